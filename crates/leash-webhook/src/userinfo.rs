//! The roles and cluster roles bound to a request's user, resolved from
//! RoleBindings and ClusterRoleBindings as Kyverno's `userinfo` package does.
//!
//! # Invariants
//! 1. Nothing here spawns or awaits: resolving is synchronous, on the
//!    caller's thread (the webhook calls it inline while it answers a
//!    review).
//! 2. [`RoleMemo`]'s one `std::sync::Mutex` is held only to look up or
//!    insert an entry, never while the bindings are listed and matched
//!    (see the type's own `# Invariants`).
//! 3. A memoized answer is used only while both binding generations read
//!    before its lists are still current: once the data source holds a
//!    changed RoleBinding or ClusterRoleBinding, no older answer is used; a
//!    data source without generations is never memoized. Concurrent misses
//!    may each resolve and insert; the last insert wins.
//! 4. Memory is bounded: at most `MEMO_ENTRIES` users' answers; past it the
//!    memo starts over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use leash_policy::{ClusterData, UserInfo};
use serde_json::Value;

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// At most this many users' roles are kept; past it the memo starts over.
const MEMO_ENTRIES: usize = 4096;

/// [`resolve_roles`] with its answers kept while the bindings it read are
/// unchanged ([`ClusterData::generation`]): resolving lists and parses
/// every binding of the namespace and the cluster, and the webhook asks
/// for each review, mostly for the same few users (a profile of pod
/// creations through kube-apiserver found it 60% of leash's CPU).
///
/// # Invariants
/// 1. An entry is used only when both generations read before the lists
///    it came from are still the current ones; a source without
///    generations is never memoized.
/// 2. The mutex is held to look up or insert, never while resolving.
#[derive(Debug, Default)]
pub struct RoleMemo {
    entries: Mutex<HashMap<MemoKey, MemoEntry>>,
}

/// The namespace, the username and the groups (in the request's order).
type MemoKey = (String, String, Vec<String>);

#[derive(Debug)]
struct MemoEntry {
    generations: (u64, u64),
    roles: Arc<(Vec<String>, Vec<String>)>,
}

impl RoleMemo {
    /// Fills `user.roles` and `user.cluster_roles` as [`resolve_roles`] does.
    pub fn resolve(&self, user: &mut UserInfo, namespace: &str, data: &dyn ClusterData) {
        let generations = data
            .generation(RBAC, "rolebindings")
            .zip(data.generation(RBAC, "clusterrolebindings"));
        let Some(generations) = generations else {
            resolve_roles(user, namespace, data);
            return;
        };
        let key = (
            namespace.to_string(),
            user.username.clone(),
            user.groups.clone(),
        );
        let kept = {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries
                .get(&key)
                .filter(|e| e.generations == generations)
                .map(|e| e.roles.clone())
        };
        if let Some(roles) = kept {
            user.roles = roles.0.clone();
            user.cluster_roles = roles.1.clone();
            return;
        }
        resolve_roles(user, namespace, data);
        let roles = Arc::new((user.roles.clone(), user.cluster_roles.clone()));
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MEMO_ENTRIES {
            entries.clear();
        }
        entries.insert(key, MemoEntry { generations, roles });
    }
}

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

    /// [`Bindings`] with a generation the test changes by hand, counting
    /// its lists.
    #[derive(Debug)]
    struct Versioned {
        bindings: Mutex<Bindings>,
        generation: std::sync::atomic::AtomicU64,
        lists: std::sync::atomic::AtomicUsize,
        versioned: bool,
    }
    impl ClusterData for Versioned {
        fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<Value>> {
            None
        }
        fn list(&self, a: &str, resource: &str, ns: &str) -> Vec<Arc<Value>> {
            self.lists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.bindings.lock().unwrap().list(a, resource, ns)
        }
        fn generation(&self, _: &str, _: &str) -> Option<u64> {
            self.versioned
                .then(|| self.generation.load(std::sync::atomic::Ordering::Relaxed))
        }
    }

    #[test]
    fn the_memo_answers_as_resolving_does_until_the_bindings_change() {
        let binding = |user: &str, role: &str| {
            Arc::new(
                json!({"kind": "RoleBinding", "metadata": {"name": role, "namespace": "dev"},
                "roleRef": {"kind": "Role", "name": role},
                "subjects": [{"kind": "User", "name": user}]}),
            )
        };
        for versioned in [true, false] {
            let data = Versioned {
                bindings: Mutex::new(Bindings(vec![binding("alice", "editor")])),
                generation: 1.into(),
                lists: 0.into(),
                versioned,
            };
            let memo = RoleMemo::default();
            let resolve = |name: &str, ns: &str| {
                let mut u = UserInfo {
                    username: name.into(),
                    ..UserInfo::default()
                };
                memo.resolve(&mut u, ns, &data);
                u.roles
            };
            let lists = || data.lists.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(resolve("alice", "dev"), ["dev:editor"]);
            let after_first = lists();
            assert_eq!(resolve("alice", "dev"), ["dev:editor"]);
            assert_eq!(resolve("bob", "dev"), Vec::<String>::new());
            assert_eq!(resolve("alice", "prod"), Vec::<String>::new());
            if versioned {
                assert_eq!(lists(), 3 * after_first, "the second alice/dev is kept");
            } else {
                assert_eq!(lists(), 4 * after_first, "no generations: nothing kept");
            }
            // A new binding: a new generation, and the memo sees it.
            data.bindings
                .lock()
                .unwrap()
                .0
                .push(binding("alice", "owner"));
            data.generation
                .store(2, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(resolve("alice", "dev"), ["dev:editor", "dev:owner"]);
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
