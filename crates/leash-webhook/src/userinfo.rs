//! The roles and cluster roles bound to a request's user, resolved from
//! RoleBindings and ClusterRoleBindings as Kyverno's `userinfo` package does.

use leash_policy::{ClusterData, UserInfo};
use serde_json::Value;

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// Fills `user.roles` (`NAMESPACE:NAME`) and `user.cluster_roles` from the
/// bindings of `namespace` and the cluster's ClusterRoleBindings. A
/// RoleBinding to a ClusterRole adds the cluster role, as Kyverno does.
pub fn resolve_roles(user: &mut UserInfo, namespace: &str, data: &dyn ClusterData) {
    let mut roles = Vec::new();
    let mut cluster_roles = Vec::new();
    if !namespace.is_empty() {
        for rb in data.list(RBAC, "rolebindings", namespace) {
            let ns = rb["metadata"]["namespace"].as_str().unwrap_or(namespace);
            if !binds(&rb, ns, user) {
                continue;
            }
            let name = rb["roleRef"]["name"].as_str().unwrap_or("");
            match rb["roleRef"]["kind"].as_str() {
                Some("Role") => push(&mut roles, format!("{ns}:{name}")),
                Some("ClusterRole") => push(&mut cluster_roles, name.to_string()),
                _ => {}
            }
        }
    }
    for crb in data.list(RBAC, "clusterrolebindings", "") {
        if binds(&crb, "", user) {
            let name = crb["roleRef"]["name"].as_str().unwrap_or("");
            push(&mut cluster_roles, name.to_string());
        }
    }
    user.roles = roles;
    user.cluster_roles = cluster_roles;
}

fn push(v: &mut Vec<String>, s: String) {
    if !s.is_empty() && !v.contains(&s) {
        v.push(s);
    }
}

/// Whether a binding's subjects include the user.
fn binds(binding: &Value, binding_ns: &str, user: &UserInfo) -> bool {
    let Some(subjects) = binding["subjects"].as_array() else {
        return false;
    };
    subjects.iter().any(|s| {
        let name = s["name"].as_str().unwrap_or("");
        match s["kind"].as_str() {
            Some("User") => name == user.username,
            Some("Group") => user.groups.iter().any(|g| g == name),
            Some("ServiceAccount") => {
                let ns = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_ns);
                user.username == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Bindings(Vec<Arc<Value>>);
    impl ClusterData for Bindings {
        fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<Value>> {
            None
        }
        fn list(&self, _: &str, resource: &str, ns: &str) -> Vec<Arc<Value>> {
            self.0
                .iter()
                .filter(|b| {
                    let is_rb = b["kind"] == "RoleBinding";
                    (resource == "rolebindings" && is_rb && b["metadata"]["namespace"] == ns)
                        || (resource == "clusterrolebindings" && !is_rb)
                })
                .cloned()
                .collect()
        }
    }

    #[test]
    fn users_groups_and_service_accounts() {
        let data = Bindings(vec![
            Arc::new(
                json!({"kind": "RoleBinding", "metadata": {"name": "a", "namespace": "dev"},
                "roleRef": {"kind": "Role", "name": "editor"},
                "subjects": [{"kind": "User", "name": "alice"}]}),
            ),
            Arc::new(
                json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "dev"},
                "roleRef": {"kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "builder"}]}),
            ),
            Arc::new(
                json!({"kind": "ClusterRoleBinding", "metadata": {"name": "c"},
                "roleRef": {"kind": "ClusterRole", "name": "admin"},
                "subjects": [{"kind": "Group", "name": "ops"}]}),
            ),
        ]);
        let mut alice = UserInfo {
            username: "alice".into(),
            groups: vec!["ops".into()],
            ..UserInfo::default()
        };
        resolve_roles(&mut alice, "dev", &data);
        assert_eq!(alice.roles, vec!["dev:editor".to_string()]);
        assert_eq!(alice.cluster_roles, vec!["admin".to_string()]);
        let mut sa = UserInfo {
            username: "system:serviceaccount:dev:builder".into(),
            ..UserInfo::default()
        };
        resolve_roles(&mut sa, "dev", &data);
        assert!(sa.roles.is_empty());
        assert_eq!(sa.cluster_roles, vec!["view".to_string()]);
        let mut other = UserInfo {
            username: "bob".into(),
            ..UserInfo::default()
        };
        resolve_roles(&mut other, "prod", &data);
        assert!(other.roles.is_empty() && other.cluster_roles.is_empty());
    }
}
