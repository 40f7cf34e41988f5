//! An in-memory [`ClusterData`]: the objects of a test's `Context` file (or
//! any set of objects), looked up by apiVersion, resource or kind,
//! namespace and name, and `apiCall` URL paths served from them.

use std::sync::Arc;

use leash_policy::ClusterData;
use leash_policy::kinds::{plural_of, split_api_version};
use serde_json::{Value, json};

/// Objects held in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryCluster {
    objects: Vec<Arc<Value>>,
}

impl MemoryCluster {
    pub(crate) fn new(objects: Vec<Value>) -> MemoryCluster {
        MemoryCluster {
            objects: objects.into_iter().map(Arc::new).collect(),
        }
    }

    fn matching<'a>(
        &'a self,
        api_version: &'a str,
        resource: &'a str,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.objects.iter().filter(move |o| {
            let kind = o["kind"].as_str().unwrap_or("");
            let av = o["apiVersion"].as_str().unwrap_or("");
            (api_version.is_empty() || av == api_version || split_api_version(av).0 == api_version)
                && (kind == resource
                    || plural_of(kind) == resource
                    || kind.eq_ignore_ascii_case(resource))
                && (namespace.is_empty()
                    || o["metadata"]["namespace"].as_str().unwrap_or("default") == namespace)
        })
    }
}

impl ClusterData for MemoryCluster {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.matching(api_version, resource, namespace)
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
            .cloned()
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        self.matching(api_version, resource, namespace)
            .cloned()
            .collect()
    }

    fn api_get(&self, url_path: &str) -> Option<Value> {
        let path = url_path.split('?').next().unwrap_or("");
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (api_version, rest) = match parts.as_slice() {
            ["api", v, rest @ ..] => (v.to_string(), rest),
            ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
            _ => ("", rest),
        };
        match rest {
            [resource] => {
                let items: Vec<Value> = self
                    .list(&api_version, resource, namespace)
                    .iter()
                    .map(|o| (**o).clone())
                    .collect();
                Some(
                    json!({"apiVersion": api_version, "kind": "List", "metadata": {}, "items": items}),
                )
            }
            [resource, name] => self
                .get(&api_version, resource, namespace, name)
                .map(|o| (*o).clone()),
            _ => None,
        }
    }
}
