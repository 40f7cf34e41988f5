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

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> MemoryCluster {
        MemoryCluster::new(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}, "data": {"k": "1"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "y"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
        ])
    }

    #[test]
    fn lookups_by_resource_or_kind_namespace_and_name() {
        let c = cluster();
        assert_eq!(
            c.get("v1", "configmaps", "x", "a").unwrap()["data"]["k"],
            "1"
        );
        assert_eq!(
            c.get("v1", "ConfigMap", "x", "a").unwrap()["metadata"]["name"],
            "a"
        );
        assert!(c.get("v1", "configmaps", "y", "a").is_none());
        assert_eq!(c.list("v1", "configmaps", "").len(), 2);
        assert_eq!(c.list("apps/v1", "deployments", "x").len(), 1);
        assert_eq!(c.list("v1", "namespaces", "").len(), 1);
    }

    #[test]
    fn api_calls_are_served_from_the_objects() {
        let c = cluster();
        let list = c.api_get("/api/v1/namespaces/x/configmaps").unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        let one = c
            .api_get("/apis/apps/v1/namespaces/x/deployments/d")
            .unwrap();
        assert_eq!(one["kind"], "Deployment");
        assert_eq!(
            c.api_get("/api/v1/configmaps").unwrap()["items"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(c.api_get("/version").is_none());
        assert!(
            c.api_get("/api/v1/namespaces/x/configmaps/missing")
                .is_none()
        );
    }
}
