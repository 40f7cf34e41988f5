//! A custom resource checked against its CRD version's structural schema,
//! as kube-apiserver checks it on create and update: defaults applied,
//! unknown fields pruned (unless `x-kubernetes-preserve-unknown-fields`),
//! `null` dropped where the schema is not `nullable`, then `type`,
//! `required` and `enum` validated, every error named by its path.
//!
//! Not checked (kube-apiserver does): `format`, `pattern`, numeric and
//! length bounds, `x-kubernetes-validations` (CEL), list types and map
//! keys, `metadata` beyond what the store checks, and `fieldValidation=Strict`
//! (unknown fields are pruned silently, as with the server's default when a
//! client asks for nothing).

use serde_json::{Map, Value, json};

/// Defaults, prunes and validates `obj` (a whole custom resource) against
/// `schema` (its version's `openAPIV3Schema`). `Err` holds the field errors,
/// each as kube-apiserver words them.
pub(crate) fn apply(schema: &Value, obj: &mut Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let Some(root) = obj.as_object_mut() else {
        return Err(vec!["must be an object".into()]);
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let keep_unknown = preserves(schema);
    let keys: Vec<String> = root.keys().cloned().collect();
    for key in keys {
        // apiVersion, kind and metadata are the API server's, not the schema's.
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match properties.and_then(|p| p.get(&key)) {
            Some(sub) => {
                let value = root.get_mut(&key).expect("key listed above");
                if value.is_null() && !nullable(sub) {
                    root.remove(&key);
                    continue;
                }
                visit(sub, value, &key, &mut errors);
            }
            None if keep_unknown => {}
            None => {
                root.remove(&key);
            }
        }
    }
    if let Some(props) = properties {
        default_missing(props, root);
    }
    required(schema, root, "", &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `v` is of the schema type `ty`.
fn is_type(ty: &str, v: &Value, int_or_string: bool) -> bool {
    if int_or_string {
        return matches!(type_name(v), "integer" | "string");
    }
    match ty {
        "" => true,
        "number" => v.is_number(),
        "integer" => {
            matches!(type_name(v), "integer") || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        t => type_name(v) == t,
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Checks `value` at `path` against `schema`, pruning and defaulting in it.
fn visit(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<String>) {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if value.is_null() {
        if !nullable(schema) && !ty.is_empty() {
            errors.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {ty}: \"null\""
            ));
        }
        return;
    }
    if !is_type(ty, value, int_or_string) {
        let actual = type_name(value);
        errors.push(format!(
            "{path}: Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(format!(
            "{path}: Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ));
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown = preserves(schema)
                || additional.is_some_and(|a| a.as_bool() == Some(true))
                || (properties.is_none() && ty.is_empty());
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub = properties
                    .and_then(|p| p.get(&key))
                    .or(additional.filter(|a| a.is_object()));
                match sub {
                    Some(sub) => {
                        let v = map.get_mut(&key).expect("key listed above");
                        if v.is_null() && !nullable(sub) {
                            map.remove(&key);
                            continue;
                        }
                        visit(sub, v, &child(path, &key), errors);
                    }
                    None if keep_unknown => {}
                    None => {
                        map.remove(&key);
                    }
                }
            }
            if let Some(props) = properties {
                default_missing(props, map);
            }
            required(schema, map, path, errors);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    visit(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// Sets the `default` of each property that is missing.
fn default_missing(properties: &Map<String, Value>, map: &mut Map<String, Value>) {
    for (key, sub) in properties {
        if !map.contains_key(key)
            && let Some(default) = sub.get("default")
        {
            map.insert(key.clone(), default.clone());
        }
    }
}

fn required(schema: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<String>) {
    for key in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(key) {
            errors.push(format!("{}: Required value", child(path, key)));
        }
    }
}

/// What kube-apiserver refuses of the built-in kinds leash's tests and
/// users write most (Pods, the workload controllers, ConfigMaps): the
/// decoding errors (400: a field of the wrong JSON type) and the required
/// fields and selector checks (422) of their validation, worded as it words
/// them. Everything else of a built-in kind is stored as sent.
pub(crate) enum BuiltinError {
    /// 400: the body does not decode into the kind's Go type.
    Decode(String),
    /// 422: field errors.
    Invalid(Vec<String>),
}

/// Checks a built-in object of `group`/`kind` (see [`BuiltinError`]).
pub(crate) fn check_builtin(group: &str, kind: &str, obj: &Value) -> Result<(), BuiltinError> {
    let decode = |go_type: &str, field: &str, want: &str, got: &Value| {
        BuiltinError::Decode(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {} into Go struct field {go_type}.{field} of type {want}",
            go_json_type(got)
        ))
    };
    let mut errors = Vec::new();
    match (group, kind) {
        ("", "ConfigMap") => {
            for field in ["data", "binaryData"] {
                if let Some(map) = obj.get(field).and_then(Value::as_object)
                    && let Some(bad) = map.values().find(|v| !v.is_string())
                {
                    return Err(decode("ConfigMap", field, "string", bad));
                }
            }
        }
        ("", "Pod") => pod_spec(obj.get("spec"), "spec", &mut errors),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            let spec = obj.get("spec");
            if let Some(r) = spec.and_then(|s| s.get("replicas"))
                && !r.is_null()
                && !r.is_i64()
            {
                return Err(decode(&format!("{kind}Spec"), "spec.replicas", "int32", r));
            }
            let selector = spec
                .and_then(|s| s.get("selector"))
                .filter(|s| !s.is_null());
            let labels = spec.and_then(|s| s.pointer("/template/metadata/labels"));
            match selector {
                None => errors.push("spec.selector: Required value".into()),
                Some(sel) => {
                    let wanted = sel.get("matchLabels").and_then(Value::as_object);
                    let matches = wanted.is_none_or(|w| {
                        w.iter()
                            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
                    });
                    if !matches {
                        errors.push(format!(
                            "spec.template.metadata.labels: Invalid value: {}: `selector` does not match template `labels`",
                            labels.map_or("null".into(), Value::to_string)
                        ));
                    }
                }
            }
            if selector.is_none() && labels.is_none() {
                errors.push(
                    "spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`"
                        .into(),
                );
            }
            pod_spec(
                spec.and_then(|s| s.pointer("/template/spec")),
                "spec.template.spec",
                &mut errors,
            );
        }
        _ => {}
    }
    // The AppArmor annotations of a Pod or pod template (kube-apiserver's
    // ValidateAppArmorProfileFormat; its paths say `annotations` under a
    // template, without `metadata`).
    let template = match (group, kind) {
        ("", "Pod") => Some(("/metadata", "metadata.annotations")),
        ("", "ReplicationController" | "PodTemplate")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => Some(("/spec/template/metadata", "spec.template.annotations")),
        ("batch", "CronJob") => Some((
            "/spec/jobTemplate/spec/template/metadata",
            "spec.jobTemplate.spec.template.annotations",
        )),
        _ => None,
    };
    if let Some((meta, path)) = template
        && let Some(annotations) = obj
            .pointer(&format!("{meta}/annotations"))
            .and_then(Value::as_object)
    {
        for (key, value) in annotations {
            let Some(v) = value.as_str() else { continue };
            if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && v != "runtime/default"
                && v != "unconfined"
                && !v.starts_with("localhost/")
            {
                errors.push(format!(
                    "{path}[{key}]: Invalid value: \"{v}\": invalid AppArmor profile name: \"{v}\""
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(BuiltinError::Invalid(errors))
    }
}

/// What kube-apiserver refuses of an update of a built-in object beyond
/// what [`check_builtin`] checks of the new one: a Pod's spec, which may
/// change only in its containers' images, `activeDeadlineSeconds`, added
/// tolerations, removed scheduling gates and a negative
/// `terminationGracePeriodSeconds` set to 1 (ValidatePodUpdate). Both
/// objects are as stored (defaulted). Field errors, worded as it words them.
pub(crate) fn check_builtin_update(
    group: &str,
    kind: &str,
    old: &Value,
    new: &Value,
) -> Vec<String> {
    if (group, kind) != ("", "Pod") {
        return Vec::new();
    }
    let null = Value::Null;
    let (old, new) = (
        old.get("spec").unwrap_or(&null),
        new.get("spec").unwrap_or(&null),
    );
    let len =
        |spec: &Value, list: &str| spec.get(list).and_then(Value::as_array).map_or(0, Vec::len);
    for list in ["containers", "initContainers"] {
        if len(old, list) != len(new, list) {
            return vec![format!(
                "spec.{list}: Forbidden: pod updates may not add or remove containers"
            )];
        }
    }
    // The old spec with every change that is allowed taken from the new
    // one: any difference left is forbidden.
    let mut allowed = old.clone();
    for list in ["containers", "initContainers"] {
        for i in 0..len(new, list) {
            if let (Some(slot), Some(image)) = (
                allowed.pointer_mut(&format!("/{list}/{i}")),
                new.pointer(&format!("/{list}/{i}/image")),
            ) {
                slot["image"] = image.clone();
            }
        }
    }
    let list_of = |spec: &Value, key: &str| -> Vec<Value> {
        spec.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut take = |key: &str, ok: bool| {
        if ok && let Some(m) = allowed.as_object_mut() {
            match new.get(key) {
                Some(v) => m.insert(key.to_string(), v.clone()),
                None => m.remove(key),
            };
        }
    };
    take("activeDeadlineSeconds", true);
    let (old_tol, new_tol) = (list_of(old, "tolerations"), list_of(new, "tolerations"));
    take("tolerations", old_tol.iter().all(|t| new_tol.contains(t)));
    let (old_gates, new_gates) = (
        list_of(old, "schedulingGates"),
        list_of(new, "schedulingGates"),
    );
    take(
        "schedulingGates",
        new_gates.iter().all(|g| old_gates.contains(g)),
    );
    let grace = |spec: &Value| {
        spec.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    take(
        "terminationGracePeriodSeconds",
        grace(old).is_some_and(|g| g < 0) && grace(new) == Some(1),
    );
    if &allowed == new {
        return Vec::new();
    }
    vec!["spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into()]
}

/// A Pod spec's containers: at least one, each with a name and an image.
fn pod_spec(spec: Option<&Value>, path: &str, errors: &mut Vec<String>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        errors.push(format!("{path}.containers: Required value"));
        return;
    };
    for (i, c) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if c.get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(format!("{path}.containers[{i}].{field}: Required value"));
            }
        }
    }
}

/// Go's name of a JSON value's type in an unmarshal error.
fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["mode"],
                    "properties": {
                        "mode": {"type": "string", "enum": ["Audit", "Enforce"]},
                        "background": {"type": "boolean", "default": true},
                        "replicas": {"type": "integer"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "note": {"type": "string", "nullable": true},
                    },
                },
                "results": {"type": "array", "items": {"type": "object",
                    "properties": {"policy": {"type": "string"}}}},
            },
        })
    }

    /// As kube-apiserver v1.37 stored a Pod created without a service
    /// account (seen with testenv's control plane): `default`, and its token
    /// mounted in every container; none with automount off; once only.
    #[test]
    fn pods_get_what_kube_apiserver_admission_adds() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [{"name": "a", "image": "x"},
                {"name": "b", "image": "x", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT}]}]}});
        admit_pod(&mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        let volume = spec["volumes"][0]["name"].as_str().unwrap().to_string();
        assert!(
            volume.starts_with("kube-api-access-") && volume.len() == 21,
            "{volume}"
        );
        assert_eq!(spec["volumes"][0]["projected"]["defaultMode"], 420);
        let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT});
        assert_eq!(spec["initContainers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(spec["containers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(
            spec["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1,
            "mounted already"
        );
        assert_eq!(spec["priority"], 0);
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            spec["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        let again = pod.clone();
        admit_pod(&mut pod);
        assert_eq!(pod, again, "a second pass adds nothing");

        let mut off = json!({"spec": {"serviceAccountName": "app", "automountServiceAccountToken": false,
            "containers": [{"name": "a", "image": "x"}]}});
        off["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
        off["spec"]["priorityClassName"] = json!("high");
        admit_pod(&mut off);
        assert_eq!(
            off["spec"]["tolerations"],
            json!([{"operator": "Exists"}]),
            "tolerates every taint"
        );
        assert!(
            off["spec"].get("priority").is_none(),
            "the class's priority, resolved by kube-apiserver"
        );
        assert_eq!(off["spec"]["serviceAccount"], "app");
        assert!(off["spec"].get("volumes").is_none());
        assert!(off["spec"]["containers"][0].get("volumeMounts").is_none());
    }

    /// As kube-apiserver v1.37 stored a CronJob with no template metadata
    /// and a Deployment with `strategy: {}` (seen with testenv's control
    /// plane; Kyverno's `allowed-annotations` test reads the template's
    /// metadata).
    #[test]
    fn workloads_get_kube_apiservers_defaults() {
        let mut cj = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
            "spec": {"containers": [{"name": "c", "image": "x:1"}], "restartPolicy": "OnFailure"}}}}}});
        default_builtin("batch", "CronJob", &mut cj);
        let spec = &cj["spec"];
        assert_eq!(
            (
                &spec["concurrencyPolicy"],
                &spec["suspend"],
                &spec["successfulJobsHistoryLimit"],
                &spec["failedJobsHistoryLimit"]
            ),
            (&json!("Allow"), &json!(false), &json!(3), &json!(1))
        );
        assert_eq!(spec["jobTemplate"]["metadata"], json!({}));
        let template = &spec["jobTemplate"]["spec"]["template"];
        assert_eq!(template["metadata"], json!({}));
        assert_eq!(
            template["spec"],
            json!({"containers": [{"name": "c", "image": "x:1", "imagePullPolicy": "IfNotPresent", "resources": {},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                "restartPolicy": "OnFailure", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                "securityContext": {}, "terminationGracePeriodSeconds": 30})
        );
        let mut d = json!({"spec": {"strategy": {}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        default_builtin("apps", "Deployment", &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(
            d["spec"]["template"]["metadata"],
            json!({"labels": {"a": "b"}})
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(
            d["spec"]["template"]["spec"]
                .get("enableServiceLinks")
                .is_none(),
            "a Pod's only"
        );
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "x:1"}],
            "volumes": [{"name": "h", "hostPath": {"path": "/x"}},
                        {"name": "t", "hostPath": {"path": "/y", "type": "Directory"}}]}});
        default_builtin("", "Pod", &mut pod);
        assert_eq!(pod["spec"]["enableServiceLinks"], true);
        assert_eq!(pod["spec"]["volumes"][0]["hostPath"]["type"], "");
        assert_eq!(pod["spec"]["volumes"][1]["hostPath"]["type"], "Directory");
    }

    fn builtin(group: &str, kind: &str, obj: Value) -> Result<(), String> {
        check_builtin(group, kind, &obj).map_err(|e| match e {
            BuiltinError::Decode(m) => format!("400 {m}"),
            BuiltinError::Invalid(v) => format!("422 {}", v.join(" | ")),
        })
    }

    /// The answers kube-apiserver v1.37 gave to the same bodies (seen with
    /// testenv's control plane).
    #[test]
    fn built_in_kinds_are_refused_as_kube_apiserver_refuses_them() {
        assert_eq!(
            builtin("", "Pod", json!({"metadata": {"name": "p"}})),
            Err("422 spec.containers: Required value".into())
        );
        assert_eq!(
            builtin("", "Pod", json!({"spec": {"containers": [{"name": "a"}]}})),
            Err("422 spec.containers[0].image: Required value".into())
        );
        assert_eq!(
            builtin("apps", "Deployment", json!({"spec": {"replicas": "many"}})),
            Err("400 Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32".into())
        );
        assert_eq!(
            builtin("apps", "Deployment", json!({"spec": {"replicas": 1,
                "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}})),
            Err("422 spec.selector: Required value | spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`".into())
        );
        let apparmor = |v: &str| {
            json!({"metadata": {"annotations": {
            "container.apparmor.security.beta.kubernetes.io/c": v}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})
        };
        assert_eq!(
            builtin("", "Pod", apparmor("foo/bar")),
            Err("422 metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]: Invalid value: \"foo/bar\": invalid AppArmor profile name: \"foo/bar\"".into())
        );
        for ok in ["runtime/default", "unconfined", "localhost/", "localhost/x"] {
            assert_eq!(builtin("", "Pod", apparmor(ok)), Ok(()), "{ok}");
        }
        let pod = apparmor("foo/bar");
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": pod}}}});
        assert_eq!(
            builtin("batch", "CronJob", cron),
            Err("422 spec.jobTemplate.spec.template.annotations[container.apparmor.security.beta.kubernetes.io/c]: Invalid value: \"foo/bar\": invalid AppArmor profile name: \"foo/bar\"".into())
        );
        assert_eq!(
            builtin("", "ConfigMap", json!({"data": {"a": 1}})),
            Err("400 ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string".into())
        );
        assert_eq!(
            builtin(
                "apps",
                "Deployment",
                json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a", "x": "y"}},
                    "spec": {"containers": [{"name": "a", "image": "x"}]}}}})
            ),
            Ok(())
        );
    }

    #[test]
    fn prunes_defaults_and_keeps_what_the_schema_allows() {
        let mut obj = json!({
            "apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "a"},
            "unknown": 1,
            "spec": {"mode": "Audit", "typo": true, "replicas": 2, "port": "http",
                "labels": {"a": "b"}, "free": {"any": {"thing": [1]}}, "note": null,
                "background": null},
            "results": [{"policy": "p", "extra": 1}],
        });
        apply(&schema(), &mut obj).unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "a"},
                "spec": {"mode": "Audit", "replicas": 2, "port": "http",
                    "labels": {"a": "b"}, "free": {"any": {"thing": [1]}}, "note": null,
                    "background": true},
                "results": [{"policy": "p"}],
            })
        );
    }

    #[test]
    fn errors_name_the_field_as_kube_apiserver_does() {
        let mut obj = json!({"spec": {"mode": "Deny", "replicas": "many", "labels": {"a": 1}},
            "results": {"policy": "p"}});
        let errors = apply(&schema(), &mut obj).unwrap_err();
        assert_eq!(
            errors,
            [
                "results: Invalid value: \"object\": results in body must be of type array: \"object\"",
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.mode: Unsupported value: \"Deny\": supported values: \"Audit\", \"Enforce\"",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ]
        );
        let mut missing = json!({"spec": {}});
        assert_eq!(
            apply(&schema(), &mut missing).unwrap_err(),
            ["spec.mode: Required value"]
        );
    }
}

/// What kube-apiserver's typed round-trip and defaulting add to a built-in
/// object the client left out, where Kyverno's policies read it (found by
/// its end-to-end tests against both servers, each default as kube-apiserver
/// v1.37 stored it): in Pods and the pod templates of the workload kinds,
/// the template's `metadata` (`{}`: Go never omits the struct), the pod
/// spec's `dnsPolicy`, `restartPolicy` (not for Jobs, whose validation wants
/// one), `schedulerName`, `securityContext` and
/// `terminationGracePeriodSeconds`, and every container's `imagePullPolicy`
/// (`Always` for a `:latest` or untagged image, else `IfNotPresent`),
/// `resources`, `terminationMessagePath` and `terminationMessagePolicy`, its
/// ports' `protocol` (`TCP`) and a `hostPort: 0` dropped (Go's
/// `omitempty`), and a hostPath volume's `type` (`""`); a Pod's
/// `enableServiceLinks`; a Deployment's `replicas`,
/// `revisionHistoryLimit`, `progressDeadlineSeconds` and rolling-update
/// `strategy`; a CronJob's `concurrencyPolicy`, `suspend` and history limits;
/// a Role's or ClusterRole's missing `rules` written as `null`; a
/// StorageClass's `reclaimPolicy` (`Delete`) and `volumeBindingMode`
/// (`Immediate`).
pub(crate) fn default_builtin(group: &str, kind: &str, obj: &mut Value) {
    // The pod templates' parents (whose `metadata` is defaulted) and specs.
    let (templates, spec): (&[&str], Option<&str>) = match (group, kind) {
        ("", "Pod") => (&[], Some("/spec")),
        ("", "PodTemplate") => (&["/template"], Some("/template/spec")),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => (&["/spec/template"], Some("/spec/template/spec")),
        ("batch", "CronJob") => (
            &["/spec/jobTemplate", "/spec/jobTemplate/spec/template"],
            Some("/spec/jobTemplate/spec/template/spec"),
        ),
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {
            if let Some(m) = obj.as_object_mut() {
                m.entry("rules").or_insert(Value::Null);
            }
            (&[], None)
        }
        ("storage.k8s.io", "StorageClass") => {
            if let Some(m) = obj.as_object_mut() {
                m.entry("reclaimPolicy")
                    .or_insert_with(|| Value::String("Delete".into()));
                m.entry("volumeBindingMode")
                    .or_insert_with(|| Value::String("Immediate".into()));
            }
            (&[], None)
        }
        _ => (&[], None),
    };
    let defaults = |m: &mut Map<String, Value>, pairs: &[(&str, Value)]| {
        for (k, v) in pairs {
            m.entry(*k).or_insert_with(|| v.clone());
        }
    };
    match (group, kind) {
        ("apps", "Deployment") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                defaults(
                    spec,
                    &[
                        ("replicas", json!(1)),
                        ("revisionHistoryLimit", json!(10)),
                        ("progressDeadlineSeconds", json!(600)),
                    ],
                );
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Some(st) = strategy.as_object_mut() {
                    defaults(st, &[("type", json!("RollingUpdate"))]);
                    if st["type"] == "RollingUpdate" {
                        let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            defaults(
                                ru,
                                &[("maxSurge", json!("25%")), ("maxUnavailable", json!("25%"))],
                            );
                        }
                    }
                }
            }
        }
        ("batch", "CronJob") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                defaults(
                    spec,
                    &[
                        ("concurrencyPolicy", json!("Allow")),
                        ("suspend", json!(false)),
                        ("successfulJobsHistoryLimit", json!(3)),
                        ("failedJobsHistoryLimit", json!(1)),
                    ],
                );
            }
        }
        _ => {}
    }
    for t in templates {
        if let Some(m) = obj.pointer_mut(t).and_then(Value::as_object_mut) {
            m.entry("metadata").or_insert_with(|| json!({}));
        }
    }
    let Some(spec) = spec.and_then(|p| obj.pointer_mut(p)) else {
        return;
    };
    let Some(pod) = spec.as_object_mut() else {
        return;
    };
    let mut pod_defaults = vec![
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("terminationGracePeriodSeconds", json!(30)),
    ];
    if group != "batch" {
        pod_defaults.push(("restartPolicy", json!("Always")));
    }
    if kind == "Pod" {
        pod_defaults.push(("enableServiceLinks", json!(true)));
    }
    defaults(pod, &pod_defaults);
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            if !c.contains_key("imagePullPolicy") {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                let policy = if pulls_always(image) {
                    "Always"
                } else {
                    "IfNotPresent"
                };
                c.insert("imagePullPolicy".into(), Value::String(policy.into()));
            }
            if list != "ephemeralContainers" {
                c.entry("resources").or_insert_with(|| json!({}));
            }
            c.entry("terminationMessagePath")
                .or_insert_with(|| Value::String("/dev/termination-log".into()));
            c.entry("terminationMessagePolicy")
                .or_insert_with(|| Value::String("File".into()));
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    p.entry("protocol")
                        .or_insert_with(|| Value::String("TCP".into()));
                    if p.get("hostPort").and_then(Value::as_i64) == Some(0) {
                        p.remove("hostPort");
                    }
                }
            }
        }
    }
    // A hostPath volume's `type` defaults to "" (found by Kyverno's
    // chainsaw tests of add-volume-deployment, which assert it).
    if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
        for hp in volumes
            .iter_mut()
            .filter_map(|v| v.get_mut("hostPath"))
            .filter_map(Value::as_object_mut)
        {
            hp.entry("type")
                .or_insert_with(|| Value::String(String::new()));
        }
    }
}

/// Where kube-apiserver's ServiceAccount admission mounts a Pod's token.
const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What kube-apiserver's admission plugins add to a Pod it creates, before
/// any webhook sees it (create only: an update keeps what the old object
/// had, or is refused for changing the spec):
/// - Priority: `priority: 0` and `preemptionPolicy: PreemptLowerPriority`
///   when the Pod names no priority class;
/// - DefaultTolerationSeconds: tolerations of the `not-ready` and
///   `unreachable` NoExecute taints for 300 s, unless it tolerates them;
/// - ServiceAccount: `serviceAccountName` (and its deprecated mirror
///   `serviceAccount`) defaulted to `default`, and unless
///   `automountServiceAccountToken` is false, the projected token volume
///   `kube-api-access-xxxxx` mounted read-only in every container and init
///   container that does not mount that path already. (kube-apiserver also
///   refuses a Pod whose ServiceAccount does not exist; the sandbox runs no
///   controller that would create `default` in each namespace, and does
///   not.)
///
/// Idempotent: a Pod that has them keeps them.
pub(crate) fn admit_pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        spec.entry("priority").or_insert_with(|| json!(0));
        spec.entry("preemptionPolicy")
            .or_insert_with(|| json!("PreemptLowerPriority"));
    }
    let tolerations = spec
        .entry("tolerations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = tolerations.as_array_mut() {
        for taint in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let tolerated = list.iter().any(|t| {
                (t["key"] == taint
                    || (t["key"].as_str().is_none_or(str::is_empty) && t["operator"] == "Exists"))
                    && t["effect"]
                        .as_str()
                        .is_none_or(|e| e.is_empty() || e == "NoExecute")
            });
            if !tolerated {
                list.push(json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(a) if !a.is_empty() => a.to_string(),
        _ => spec
            .get("serviceAccount")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .unwrap_or("default")
            .to_string(),
    };
    spec.insert("serviceAccountName".into(), Value::String(account.clone()));
    spec.entry("serviceAccount")
        .or_insert_with(|| Value::String(account));
    if spec.get("automountServiceAccountToken") == Some(&Value::Bool(false)) {
        return;
    }
    let mounts_token = |c: &Value| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == TOKEN_MOUNT))
    };
    let lacking = ["initContainers", "containers"].iter().any(|list| {
        spec.get(*list)
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| !mounts_token(c)))
    });
    if !lacking {
        return;
    }
    let volumes = spec
        .entry("volumes")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !volumes.is_array() {
        return; // refused by validation, not here
    }
    let existing = volumes.as_array().and_then(|vs| {
        vs.iter()
            .filter_map(|v| v["name"].as_str())
            .find(|n| n.starts_with("kube-api-access-"))
            .map(str::to_string)
    });
    let name = existing.unwrap_or_else(|| {
        // kube-apiserver's name: 5 characters of its random-suffix alphabet.
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let suffix: String = (0..5)
            .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
            .collect();
        let name = format!("kube-api-access-{suffix}");
        if let Some(vs) = volumes.as_array_mut() {
            vs.push(serde_json::json!({
                "name": name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                },
            }));
        }
        name
    });
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter(|c| !mounts_token(c)) {
            let Some(c) = c.as_object_mut() else { continue };
            let mounts = c
                .entry("volumeMounts")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(m) = mounts.as_array_mut() {
                m.push(serde_json::json!({
                    "name": name, "readOnly": true, "mountPath": TOKEN_MOUNT,
                }));
            }
        }
    }
}

/// kube-apiserver's `imagePullPolicy` default: `Always` when the image has
/// no tag or the tag `latest` (and no digest).
fn pulls_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    // The tag follows the last ':' after the last '/' (a registry's port
    // comes before a '/').
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        None => true,
        Some((_, tag)) => tag == "latest",
    }
}

#[cfg(test)]
mod default_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_and_templates_get_kube_apiservers_container_defaults() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "nginx:latest", "ports": [{"containerPort": 80, "hostPort": 0}]},
            {"name": "c", "image": "registry:5000/nginx:1.27", "imagePullPolicy": "Never"},
            {"name": "d", "image": "nginx@sha256:abc"},
            {"name": "e", "image": "registry:5000/nginx"},
        ]}});
        default_builtin("", "Pod", &mut pod);
        let policies: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["imagePullPolicy"].as_str().unwrap())
            .collect();
        assert_eq!(
            policies,
            ["Always", "Always", "Never", "IfNotPresent", "Always"]
        );
        assert_eq!(
            pod["spec"]["containers"][1]["ports"][0],
            json!({"containerPort": 80, "protocol": "TCP"})
        );
        assert_eq!(
            pod["spec"]["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
        let mut cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "busybox:1.36"}]}}}}}});
        default_builtin("batch", "CronJob", &mut cron);
        assert_eq!(
            cron.pointer("/spec/jobTemplate/spec/template/spec/containers/0/imagePullPolicy"),
            Some(&json!("IfNotPresent"))
        );
        let mut role = json!({"metadata": {"name": "r"}});
        default_builtin("rbac.authorization.k8s.io", "ClusterRole", &mut role);
        assert_eq!(role, json!({"metadata": {"name": "r"}, "rules": null}));
        let mut sc = json!({"provisioner": "x"});
        default_builtin("storage.k8s.io", "StorageClass", &mut sc);
        assert_eq!(
            sc,
            json!({"provisioner": "x", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
        );
    }
}
