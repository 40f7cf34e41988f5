//! The store's writes: create, modify (update, patch, apply) and delete, with the
//! metadata rules the API server applies. The invariants are the store's (see the
//! parent module): every change happens under its mutex and takes the next version.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{EventKind, Part, State, Store, now};
use crate::object::{Entry, check_name, check_namespace, check_type};
use crate::resources::{ResourceType, from_crd};
use crate::status::ApiError;

impl Store {
    /// Creates `obj` as a `rt` (POST). `path_ns` is the namespace in the URL, if any.
    pub(crate) fn create_in(
        &self,
        rt: &ResourceType,
        path_ns: Option<&str>,
        obj: Value,
        dry_run: bool,
    ) -> Result<Arc<Entry>, ApiError> {
        let (obj, rv, entry) = self.create_with(rt, path_ns, obj, dry_run, false)?;
        Ok(entry.unwrap_or_else(|| Arc::new(Entry::new(rt, &obj, rv))))
    }

    /// The object a create of `obj` would store (a dry run: name generated, uid and
    /// creationTimestamp set), without a resourceVersion (none is assigned before it
    /// is stored): what admission webhooks see. Not serialized, nothing stored.
    pub(crate) fn prepare_create(
        &self,
        rt: &ResourceType,
        path_ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let (mut obj, _, _) = self.create_with(rt, path_ns, obj, true, false)?;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        Ok(obj)
    }

    /// Stores `obj`, an object [`Store::prepare_create`] prepared and admission
    /// passed: its `uid` and `creationTimestamp` are kept (the webhooks saw them), its
    /// name is taken as it is (409 if another writer took it since).
    pub(crate) fn create_admitted(
        &self,
        rt: &ResourceType,
        path_ns: Option<&str>,
        obj: Value,
        dry_run: bool,
    ) -> Result<Arc<Entry>, ApiError> {
        let (obj, rv, entry) = self.create_with(rt, path_ns, obj, dry_run, true)?;
        Ok(entry.unwrap_or_else(|| Arc::new(Entry::new(rt, &obj, rv))))
    }

    /// The object as created and its version; the stored entry, or `None` for a dry
    /// run (the caller serializes it only if it needs one).
    fn create_with(
        &self,
        rt: &ResourceType,
        path_ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
        keep_identity: bool,
    ) -> Result<(Value, u64, Option<Arc<Entry>>), ApiError> {
        check_schema(rt, &mut obj)?;
        if rt.group.is_empty() && rt.plural == "pods" {
            crate::schema::admit_pod(&mut obj);
        }
        let meta = check_type(rt, &mut obj)?;
        let ns = check_namespace(rt, meta, path_ns)?;
        let mut kept = (None, None);
        if keep_identity {
            let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
            kept = (s("uid"), s("creationTimestamp"));
        }
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "managedFields",
            "generation",
        ] {
            meta.remove(k);
        }
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generate = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        let coll = rt.collection();
        let mut st = self.lock();
        if rt.namespaced && !st.exists(&Arc::from("namespaces"), "", &ns) {
            return Err(ApiError::not_found("", "namespaces", &ns));
        }
        if name.is_empty() {
            for _ in 0..16 {
                let candidate = format!("{generate}{}", st.suffix());
                if !st.exists(&coll, &ns, &candidate) {
                    name = candidate;
                    break;
                }
            }
            if name.is_empty() {
                return Err(ApiError::new(
                    409,
                    "AlreadyExists",
                    format!("no unique name could be generated from {generate:?}"),
                ));
            }
        }
        check_name(rt, &name)?;
        if st.exists(&coll, &ns, &name) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        let meta = obj["metadata"].as_object_mut().expect("checked above");
        meta.insert("name".into(), Value::String(name.clone()));
        let mut new_types = None;
        if rt.crd.is_none() && rt.plural == "customresourcedefinitions" {
            let types = from_crd(&obj)?;
            if let Some(t) = types.first()
                && st.registry.taken(&t.group, &t.plural, &t.kind, &name)
            {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &name,
                    format!(
                        "spec.names: Invalid value: \"{}\" (kind {}): already served in group {}",
                        t.plural, t.kind, t.group
                    ),
                ));
            }
            set_crd_status(&mut obj);
            new_types = Some(types);
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
            obj["status"] = json!({"phase": "Active"});
            set_namespace_name_label(&mut obj, &name);
        }
        let rv = st.rv + 1;
        if rt.group.is_empty() && rt.plural == "services" {
            default_service(&mut obj, rv);
        }
        if rt.group.is_empty() && rt.plural == "secrets" {
            // kube-apiserver's default; `kubectl create secret generic` sends none.
            obj.as_object_mut()
                .expect("checked above")
                .entry("type")
                .or_insert_with(|| json!("Opaque"));
        }
        let uid = kept.0.filter(|u| !u.is_empty()).unwrap_or_else(|| st.uid());
        let created = kept.1.filter(|t| !t.is_empty()).unwrap_or_else(now);
        let meta = obj["metadata"].as_object_mut().expect("checked above");
        meta.insert("uid".into(), Value::String(uid));
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        meta.insert("creationTimestamp".into(), Value::String(created));
        if obj.get("spec").is_some() && rt.plural != "namespaces" {
            obj["metadata"]["generation"] = json!(1);
        }
        if dry_run {
            return Ok((obj, rv, None));
        }
        let entry = Arc::new(Entry::new(rt, &obj, rv));
        st.commit(coll, EventKind::Added, entry.clone());
        if let Some(types) = new_types {
            st.serve_crd(&name, types);
        }
        let wake = st.wake();
        drop(st);
        wake.send();
        Ok((obj, rv, Some(entry)))
    }

    /// Changes an existing object: `change` gets the current object (or `None` if it does not
    /// exist and `create_missing`) and returns the new one, which is then checked and stored
    /// as an update of `part`. A `metadata.resourceVersion` in the result must match the
    /// current one (optimistic concurrency). An unchanged object is not written again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn modify(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        part: Part,
        create_missing: bool,
        dry_run: bool,
        change: impl FnOnce(Option<Value>) -> Result<Value, ApiError>,
    ) -> Result<Arc<Entry>, ApiError> {
        let coll = rt.collection();
        // The whole read-modify-write happens under the lock (it is CPU work only), so a
        // request without a precondition never fails because of a concurrent writer.
        let mut st = self.lock();
        let Some(current) = st.get(&coll, ns, name) else {
            drop(st);
            if create_missing {
                let mut obj = change(None)?;
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.entry("name")
                        .or_insert_with(|| Value::String(name.to_string()));
                }
                let path_ns = rt.namespaced.then_some(ns);
                return self.create_in(rt, path_ns, obj, dry_run);
            }
            return Err(ApiError::not_found(&rt.group, &rt.plural, name));
        };
        // The current object as read at this version (a CRD's versions share objects).
        let mut old = current.value();
        old["apiVersion"] = Value::String(rt.api_version());
        let mut new = change(Some(old.clone()))?;
        let meta = check_type(rt, &mut new)?;
        check_namespace(rt, meta, rt.namespaced.then_some(ns))?;
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), Value::String(name.to_string()));
            }
            Some(n) if n == name => {}
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        let precondition = match meta.get("resourceVersion") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(
                s.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?,
            ),
            Some(_) => {
                return Err(ApiError::bad_request(
                    "metadata.resourceVersion must be a string",
                ));
            }
        };
        if precondition.is_some_and(|rv| rv != current.rv) {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut new = merge_part(rt, &old, new, part);
        check_schema(rt, &mut new)?;
        if rt.schema.is_none() && rt.crd.is_none() {
            let errors = crate::schema::check_builtin_update(&rt.group, &rt.kind, &old, &new);
            if !errors.is_empty() {
                return Err(invalid_object(rt, &new, errors));
            }
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            let name = old["metadata"]["name"].as_str().unwrap_or("").to_string();
            set_namespace_name_label(&mut new, &name);
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match old["metadata"].get(k) {
                Some(v) => new["metadata"][k] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        if old.get("spec") != new.get("spec")
            && let Some(g) = old["metadata"].get("generation").and_then(Value::as_i64)
        {
            new["metadata"]["generation"] = json!(g + 1);
        }
        let is_crd = rt.crd.is_none() && rt.plural == "customresourcedefinitions";
        new["metadata"]["resourceVersion"] = Value::String(current.rv.to_string());
        if new == old {
            return Ok(current);
        }
        let mut new_types = None;
        if is_crd {
            let types = from_crd(&new)?;
            if types.first().map(|t| (&t.group, &t.plural))
                != from_crd(&old)
                    .ok()
                    .as_ref()
                    .and_then(|o| o.first())
                    .map(|t| (&t.group, &t.plural))
            {
                return Err(ApiError::invalid(
                    &rt.kind,
                    name,
                    "spec.names.plural, spec.group: field is immutable",
                ));
            }
            set_crd_status(&mut new);
            new_types = Some(types);
        }
        let rv = st.rv + 1;
        new["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let entry = Arc::new(Entry::new(rt, &new, rv));
        if dry_run {
            return Ok(entry);
        }
        st.commit(coll, EventKind::Modified, entry.clone());
        if let Some(types) = new_types {
            st.serve_crd(name, types);
        }
        let wake = st.wake();
        drop(st);
        wake.send();
        Ok(entry)
    }

    /// Deletes one object; returns its last state (at the deletion's version).
    /// `preconditions` are DeleteOptions' `(uid, resourceVersion)`.
    pub(crate) fn delete_in(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        preconditions: Option<(Option<String>, Option<String>)>,
        dry_run: bool,
    ) -> Result<Arc<Entry>, ApiError> {
        let coll = rt.collection();
        let mut st = self.lock();
        let current = st
            .get(&coll, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if let Some((uid, rv)) = preconditions {
            let obj = current.value();
            let cur_uid = obj["metadata"]["uid"].as_str().unwrap_or("");
            if let Some(uid) = uid.filter(|u| u != cur_uid) {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"
                    ),
                ));
            }
            if let Some(rv) = rv.filter(|r| *r != current.rv.to_string()) {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        current.rv
                    ),
                ));
            }
        }
        if rt.group.is_empty()
            && rt.plural == "namespaces"
            && ["default", "kube-system", "kube-public"].contains(&name)
        {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
            ));
        }
        if dry_run {
            return Ok(current);
        }
        let registry = st.registry.clone();
        if rt.group.is_empty() && rt.plural == "namespaces" {
            // Everything in the namespace goes first, as the namespace controller would.
            for t in registry.all().filter(|t| t.namespaced) {
                let c = t.collection();
                let keys: Vec<_> = st
                    .collections
                    .get(&c)
                    .map(|objs| {
                        objs.range((name.to_string(), String::new())..)
                            .take_while(|((n, _), _)| n == name)
                            .map(|(k, _)| k.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                for (n, o) in keys {
                    st.remove(t, &c, &n, &o);
                }
            }
        }
        if rt.crd.is_none() && rt.plural == "customresourcedefinitions" {
            let mut next = (*registry).clone();
            if let Some(t) = registry.all().find(|t| t.crd.as_deref() == Some(name)) {
                let c = t.collection();
                // Its watches end (they see the kind gone), objects or not.
                st.touched.push(c.clone());
                let keys: Vec<_> = st
                    .collections
                    .get(&c)
                    .map(|objs| objs.keys().cloned().collect())
                    .unwrap_or_default();
                for (n, o) in keys {
                    st.remove(t, &c, &n, &o);
                }
                st.collections.remove(&c);
            }
            next.remove_crd(name);
            st.registry = Arc::new(next);
        }
        let deleted = st
            .remove(rt, &coll, ns, name)
            .expect("present: checked under this lock");
        let wake = st.wake();
        drop(st);
        wake.send();
        Ok(deleted)
    }
}

impl State {
    /// Makes the CRD `crd` serve `types` (its versions) in place of what it served
    /// before, if anything; the registry is replaced whole (invariant 5).
    fn serve_crd(&mut self, crd: &str, types: Vec<ResourceType>) {
        // The watches of its kind look again: a version they watch may be gone.
        let served: Vec<_> = (self.registry.all())
            .filter(|t| t.crd.as_deref() == Some(crd))
            .map(|t| t.collection())
            .collect();
        self.touched.extend(served);
        let mut registry = (*self.registry).clone();
        registry.remove_crd(crd);
        for t in types {
            registry.insert(t);
        }
        self.registry = Arc::new(registry);
    }
}

/// The object a write of `part` stores, given the old and the requested new object.
fn merge_part(rt: &ResourceType, old: &Value, new: Value, part: Part) -> Value {
    match part {
        Part::Status => {
            let mut out = old.clone();
            copy_status(&mut out, &new);
            // The precondition travels with the request's metadata.
            if let Some(rv) = new.pointer("/metadata/resourceVersion") {
                out["metadata"]["resourceVersion"] = rv.clone();
            }
            out
        }
        Part::Main if rt.has_status() => {
            let mut out = new;
            copy_status(&mut out, old);
            out
        }
        Part::Main => new,
    }
}

/// Gives `out` the `status` of `from`, or no `status` if `from` has none.
/// kube-apiserver labels every Namespace `kubernetes.io/metadata.name:
/// NAME` on create and update (what webhooks' namespaceSelectors use to
/// name namespaces), whatever the request said.
fn set_namespace_name_label(obj: &mut Value, name: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !labels.is_object() {
            *labels = Value::Object(serde_json::Map::new());
        }
        labels["kubernetes.io/metadata.name"] = Value::String(name.to_string());
    }
}

fn copy_status(out: &mut Value, from: &Value) {
    match from.get("status") {
        Some(s) => out["status"] = s.clone(),
        None => {
            if let Some(m) = out.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

fn set_crd_status(crd: &mut Value) {
    let names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let now = now();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    crd["status"] = json!({
        "acceptedNames": names,
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    });
}

/// The defaults kube-apiserver gives a new Service (what `kubectl get svc` shows):
/// `type` ClusterIP, a cluster IP (unless ExternalName or headless `None`),
/// single-stack IPv4, each port's protocol and target port, and for NodePort and
/// LoadBalancer Services a node port (30000-32767; not checked for clashes).
///
/// The cluster IP is taken from 10.96.0.0/12 by the create's resourceVersion
/// (unique among the Services of up to a million writes).
fn default_service(obj: &mut Value, rv: u64) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let kind = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or("")
        .to_string();
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    let node_ports = matches!(kind.as_str(), "NodePort" | "LoadBalancer");
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for (i, p) in ports
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .enumerate()
        {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
            if node_ports && p.get("nodePort").and_then(Value::as_u64).unwrap_or(0) == 0 {
                // 30000-32767, the API server's default range, by write and port.
                let n = 30_000 + (rv.wrapping_mul(7).wrapping_add(i as u64) % 2_768);
                p.insert("nodePort".into(), json!(n));
            }
        }
    }
    if kind == "ExternalName" {
        return;
    }
    let ip = match spec.get("clusterIP").and_then(Value::as_str) {
        Some(ip) if !ip.is_empty() => ip.to_string(),
        _ => {
            let n = 0x0a60_0000 + 1 + (rv % ((1 << 20) - 2)) as u32;
            std::net::Ipv4Addr::from(n).to_string()
        }
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.entry("clusterIPs").or_insert_with(|| json!([ip]));
    if ip != "None" {
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
    }
    spec.entry("internalTrafficPolicy")
        .or_insert_with(|| json!("Cluster"));
}

/// An object checked as kube-apiserver checks it on create and update
/// ([`crate::schema`]): a custom resource against its CRD version's schema
/// (defaulted, pruned, validated), a built-in kind for what its decoding
/// and validation refuse. Field errors answer 422 `Kind[.group] "name" is
/// invalid: path: ...` (several in brackets), decoding errors 400.
fn check_schema(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    let errors = match &rt.schema {
        Some(schema) => match crate::schema::apply(schema, obj) {
            Ok(()) => return Ok(()),
            Err(errors) => errors,
        },
        None if rt.crd.is_some() => return Ok(()),
        None => match crate::schema::check_builtin(&rt.group, &rt.kind, obj) {
            Ok(()) => {
                crate::schema::default_builtin(&rt.group, &rt.kind, obj);
                return Ok(());
            }
            Err(crate::schema::BuiltinError::Decode(m)) => return Err(ApiError::bad_request(m)),
            Err(crate::schema::BuiltinError::Invalid(errors)) => errors,
        },
    };
    Err(invalid_object(rt, obj, errors))
}

/// The 422 of field errors of an object: `Kind[.group] "name" is invalid:
/// path: ...`, several in brackets.
fn invalid_object(rt: &ResourceType, obj: &Value, errors: Vec<String>) -> ApiError {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    // `Pod`, `Deployment.apps`, `PolicyReport.wgpolicyk8s.io`.
    let kind = if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    };
    ApiError::invalid(&kind, name, message)
}
