//! Writes through the admission chain: the store prepares the object (a dry run,
//! so the webhooks see it as it would be stored: defaults, generated name, uid),
//! the chain runs with no lock held, then the admitted object is stored with the
//! version it was prepared from as a precondition.
//!
//! An update whose object changed while the webhooks ran is prepared and admitted
//! again (at most [`ATTEMPTS`] times, as kube-apiserver's `GuaranteedUpdate`
//! retries), so an unconditional update never fails because of a concurrent
//! writer and a stored object is always one the webhooks saw.

use std::sync::Arc;

use serde_json::Value;

use super::{Admission, Attributes, Operation, options};
use crate::object::Entry;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::{Part, Store};

/// How often an update is prepared and admitted before a conflict is returned.
const ATTEMPTS: usize = 4;

/// A delete's arguments.
#[derive(Debug, Clone)]
pub(crate) struct DeleteRequest<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    /// DeleteOptions' `(uid, resourceVersion)` preconditions.
    pub(crate) preconditions: Option<(Option<String>, Option<String>)>,
    pub(crate) dry_run: bool,
    /// The DeleteOptions the client sent, if any.
    pub(crate) options: Option<&'a Value>,
}

/// The object a dry run prepared, as the webhooks see it: no resourceVersion on
/// create (none is assigned yet), the stored one on update.
fn prepared(entry: &Entry, rv: Option<&Value>) -> Value {
    let mut obj = entry.value();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        match rv {
            Some(rv) => {
                m.insert("resourceVersion".into(), rv.clone());
            }
            None => {
                m.remove("resourceVersion");
            }
        }
    }
    obj
}

impl Admission {
    /// A create (POST) through the chain.
    pub(crate) async fn create(
        &self,
        store: &Store,
        rt: &Arc<ResourceType>,
        path_ns: Option<&str>,
        body: Value,
        dry_run: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Arc<Entry>, ApiError> {
        if !Self::intercepts(store, rt) {
            return store.create_in(rt, path_ns, body, dry_run);
        }
        let object = store.prepare_create(rt, path_ns, body)?;
        self.admit_create(store, rt, object, path_ns, dry_run, warnings)
            .await
    }

    /// `object` is what [`Store::prepare_create`] made of the request's body.
    async fn admit_create(
        &self,
        store: &Store,
        rt: &Arc<ResourceType>,
        object: Value,
        path_ns: Option<&str>,
        dry_run: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Arc<Entry>, ApiError> {
        let meta = |k: &str| {
            object["metadata"][k]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let (name, namespace) = (meta("name"), meta("namespace"));
        let mut a = Attributes {
            resource: rt.clone(),
            sub_resource: String::new(),
            operation: Operation::Create,
            name,
            namespace,
            object: Some(object),
            old_object: None,
            dry_run,
            options: options(Operation::Create, dry_run, None),
        };
        self.admit(store, &mut a, warnings).await?;
        let path_ns = path_ns.or(rt.namespaced.then_some(a.namespace.as_str()));
        store.create_admitted(rt, path_ns, a.object.unwrap_or_default(), dry_run)
    }

    /// An update (PUT, any PATCH, a `status` write) through the chain: `change` makes
    /// the new object from the current one (or from `None` when the object does not
    /// exist and `create_missing`, which makes the write a CREATE).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn modify(
        &self,
        store: &Store,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        part: Part,
        create_missing: bool,
        dry_run: bool,
        change: impl Fn(Option<Value>) -> Result<Value, ApiError>,
        warnings: &mut Vec<String>,
    ) -> Result<Arc<Entry>, ApiError> {
        if !Self::intercepts(store, rt) {
            return store.modify(rt, ns, name, part, create_missing, dry_run, change);
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut old = None;
            let entry = store.modify(rt, ns, name, part, create_missing, true, |current| {
                old.clone_from(&current);
                change(current)
            })?;
            let Some(old) = old else {
                let path_ns = rt.namespaced.then_some(ns);
                let object = prepared(&entry, None);
                return self
                    .admit_create(store, rt, object, path_ns, dry_run, warnings)
                    .await;
            };
            let old_rv = old.pointer("/metadata/resourceVersion").cloned();
            let mut a = Attributes {
                resource: rt.clone(),
                sub_resource: match part {
                    Part::Main => String::new(),
                    Part::Status => "status".into(),
                },
                operation: Operation::Update,
                name: name.to_string(),
                namespace: if rt.namespaced {
                    ns.to_string()
                } else {
                    String::new()
                },
                object: Some(prepared(&entry, old_rv.as_ref())),
                old_object: Some(old),
                dry_run,
                options: options(Operation::Update, dry_run, None),
            };
            // This round's warnings: a round that is retried is not reported.
            let mut round = Vec::new();
            if let Err(e) = self.admit(store, &mut a, &mut round).await {
                warnings.extend(round);
                return Err(e);
            }
            let mut object = a.object.unwrap_or_default();
            // The version the webhooks saw is the precondition of the write.
            if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                match &old_rv {
                    Some(rv) => m.insert("resourceVersion".into(), rv.clone()),
                    None => m.remove("resourceVersion"),
                };
            }
            match store.modify(rt, ns, name, part, false, dry_run, |_| Ok(object)) {
                Err(e) if e.code() == 409 && attempt < ATTEMPTS => continue,
                r => {
                    warnings.extend(round);
                    return r;
                }
            }
        }
    }

    /// A delete through the chain (mutating webhooks are called too, as in
    /// kube-apiserver, but may not patch: there is no object).
    pub(crate) async fn delete(
        &self,
        store: &Store,
        rt: &Arc<ResourceType>,
        req: DeleteRequest<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Arc<Entry>, ApiError> {
        let DeleteRequest {
            namespace,
            name,
            preconditions,
            dry_run,
            options: sent,
        } = req;
        if !Self::intercepts(store, rt) {
            return store.delete_in(rt, namespace, name, preconditions, dry_run);
        }
        let current = store.delete_in(rt, namespace, name, preconditions.clone(), true)?;
        let old = current.value();
        let mut a = Attributes {
            resource: rt.clone(),
            sub_resource: String::new(),
            operation: Operation::Delete,
            name: name.to_string(),
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            object: None,
            old_object: Some(old.clone()),
            dry_run,
            options: options(Operation::Delete, dry_run, sent),
        };
        self.admit(store, &mut a, warnings).await?;
        // The object the webhooks saw, and no other: same uid (a replacement created
        // meanwhile is a conflict), and the client's own version precondition.
        let uid = old
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (sent_uid, sent_rv) = preconditions.unwrap_or_default();
        store.delete_in(
            rt,
            namespace,
            name,
            Some((sent_uid.or(uid), sent_rv)),
            dry_run,
        )
    }
}
