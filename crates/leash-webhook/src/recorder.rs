//! The policy readiness recorder: which policies the running webhook serves.
//!
//! # Invariants
//! 1. The state lives in a `tokio::sync::watch` channel. `record`, `forget`
//!    and `serve_exactly` modify it with `send_if_modified`, which takes the
//!    channel's own lock only for the closure and never waits for a
//!    receiver: a consumer that stopped reading (or holds an old value)
//!    cannot block a caller (seed: Kyverno's `Recorder.Record()` held a
//!    mutex across an unbuffered channel send and blocked forever).
//! 2. No other lock exists here; callers never hold a guard across an await
//!    (consumers clone what they need out of `borrow()`).
//!    `fail_exactly` does the same for the invalid policies.
//! 3. A change notifies consumers once per modification that changed the
//!    state; an idempotent `record` of an already-served policy notifies no one.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// A policy by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyRef {
    /// `ClusterPolicy`, `Policy`, `ValidatingPolicy`, `NamespacedValidatingPolicy`.
    pub kind: String,
    /// The namespace of a namespaced policy.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl PolicyRef {
    /// A reference.
    pub fn new(kind: &str, namespace: Option<&str>, name: &str) -> PolicyRef {
        PolicyRef {
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A resource as `(group, version, plural)`.
pub type Gvr = (String, String, String);

/// The served policies, each with the recorder generation at which it
/// became served (a consumer compares generations to find new ones).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Served policies → generation at which they were (re)recorded, or
    /// their resources last changed.
    pub served: BTreeMap<PolicyRef, u64>,
    /// Served policies → the resources of their match constraints that
    /// the status checks leash may list and watch (the
    /// `policies.kyverno.io` kinds; none for the others).
    pub resources: BTreeMap<PolicyRef, Vec<Gvr>>,
    /// Policies that are not served because they are invalid → why
    /// (the compile error, naming the field).
    pub failed: BTreeMap<PolicyRef, String>,
    /// Bumped by every change.
    pub generation: u64,
}

/// Records which policies the webhook serves. Cheap to clone; every clone
/// records into the same state.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: Arc<watch::Sender<Readiness>>,
    events: Counter,
}

impl Recorder {
    /// A recorder with nothing served; registers `leash_readiness_events`.
    pub fn new(registry: &mut Registry) -> Recorder {
        let events = Counter::default();
        registry.register(
            "leash_readiness_events",
            "Readiness recorder changes (policies becoming served or not)",
            events.clone(),
        );
        Recorder {
            tx: Arc::new(watch::Sender::new(Readiness::default())),
            events,
        }
    }

    /// Marks `policy` served (Ready). Never blocks (invariant 1).
    pub fn record(&self, policy: PolicyRef) {
        let changed = self.tx.send_if_modified(|s| {
            if s.served.contains_key(&policy) {
                return false;
            }
            s.generation += 1;
            let g = s.generation;
            s.served.insert(policy, g);
            true
        });
        if changed {
            self.events.inc();
        }
    }

    /// Marks `policy` not served.
    pub fn forget(&self, policy: &PolicyRef) {
        let changed = self.tx.send_if_modified(|s| {
            s.resources.remove(policy);
            if s.served.remove(policy).is_none() {
                return false;
            }
            s.generation += 1;
            true
        });
        if changed {
            self.events.inc();
        }
    }

    /// Makes the served set exactly `policies` (a new policy snapshot),
    /// each with the resources its status checks; a served policy whose
    /// resources changed is served anew (a new generation).
    pub fn serve_exactly(&self, policies: &BTreeMap<PolicyRef, Vec<Gvr>>) {
        let changed = self.tx.send_if_modified(|s| {
            let before = s.served.len();
            s.served.retain(|p, _| policies.contains_key(p));
            s.resources.retain(|p, _| policies.contains_key(p));
            let mut changed = s.served.len() != before;
            let next = s.generation + 1;
            for (p, resources) in policies {
                let same = s.served.contains_key(p)
                    && s.resources
                        .get(p)
                        .map_or(resources.is_empty(), |r| r == resources);
                if !same {
                    s.served.insert(p.clone(), next);
                    s.resources.insert(p.clone(), resources.clone());
                    changed = true;
                }
            }
            if changed {
                s.generation = next;
            }
            changed
        });
        if changed {
            self.events.inc();
        }
    }

    /// Makes the set of invalid policies exactly `failures` (policy, why),
    /// from a new policy snapshot.
    pub fn fail_exactly(&self, failures: impl IntoIterator<Item = (PolicyRef, String)>) {
        let wanted: BTreeMap<PolicyRef, String> = failures.into_iter().collect();
        let changed = self.tx.send_if_modified(|s| {
            if s.failed == wanted {
                return false;
            }
            s.failed = wanted;
            s.generation += 1;
            true
        });
        if changed {
            self.events.inc();
        }
    }

    /// Whether `policy` is served.
    pub fn is_ready(&self, policy: &PolicyRef) -> bool {
        self.tx.borrow().served.contains_key(policy)
    }

    /// A copy of the current state.
    pub fn readiness(&self) -> Readiness {
        self.tx.borrow().clone()
    }

    /// A consumer of changes. A consumer that never reads blocks nothing.
    pub fn subscribe(&self) -> watch::Receiver<Readiness> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_forget_and_serve_exactly() {
        let r = Recorder::new(&mut Registry::default());
        let a = PolicyRef::new("ClusterPolicy", None, "a");
        let b = PolicyRef::new("Policy", Some("ns"), "b");
        let rx = r.subscribe();
        r.record(a.clone());
        r.record(a.clone());
        assert_eq!(
            r.readiness().generation,
            1,
            "idempotent record changes nothing"
        );
        assert!(rx.has_changed().unwrap());
        let pods = || ("".to_string(), "v1".to_string(), "pods".to_string());
        r.serve_exactly(&[(b.clone(), vec![pods()])].into());
        assert!(!r.is_ready(&a));
        assert!(r.is_ready(&b));
        let served_at = r.readiness().served[&b];
        r.serve_exactly(&[(b.clone(), vec![pods()])].into());
        assert_eq!(
            r.readiness().served[&b],
            served_at,
            "the same set changes nothing"
        );
        let nodes = ("".to_string(), "v1".to_string(), "nodes".to_string());
        r.serve_exactly(&[(b.clone(), vec![nodes.clone()])].into());
        assert!(
            r.readiness().served[&b] > served_at,
            "new resources: served anew"
        );
        assert_eq!(r.readiness().resources[&b], [nodes]);
        r.forget(&b);
        assert!(r.readiness().served.is_empty());
        assert_eq!(b.to_string(), "Policy ns/b");
    }

    #[test]
    fn fail_exactly_replaces_the_invalid_set_and_notifies_on_change_only() {
        let r = Recorder::new(&mut Registry::default());
        let a = PolicyRef::new("ClusterPolicy", None, "a");
        let mut rx = r.subscribe();
        r.fail_exactly([(a.clone(), "spec.x: unknown field".to_string())]);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        r.fail_exactly([(a.clone(), "spec.x: unknown field".to_string())]);
        assert!(!rx.has_changed().unwrap(), "the same set changes nothing");
        assert_eq!(r.readiness().failed[&a], "spec.x: unknown field");
        r.fail_exactly([]);
        assert!(r.readiness().failed.is_empty());
    }
}
