//! What the dynamic watch manager watches, as one immutable snapshot.
//!
//! Seed 000: Kyverno's `WatchManager.GetDownstreams` read its maps without
//! the lock while other methods wrote them. Here the state is a value:
//! the manager builds a new [`Registry`] for every policy set and publishes
//! it whole on a `watch` channel; readers take an `Arc` of the current one
//! and query it as long as they like, never seeing half an update and never
//! taking the writer's lock.

use std::collections::{BTreeMap, BTreeSet};

use leash_policy::GenerateTarget;

/// A kind as the API names it: `(apiVersion, kind)` (`("apps/v1", "Deployment")`).
pub type Gvk = (String, String);

/// A (policy key, rule) pair.
pub type RuleKey = (String, String);

/// Why a kind is watched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    /// Synchronizing rules whose downstreams are of this kind.
    pub downstream_of: BTreeSet<RuleKey>,
    /// Generate rules whose triggers are of this kind.
    pub trigger_of: BTreeSet<RuleKey>,
}

/// See the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    /// Policy key → its generate rules.
    pub policies: BTreeMap<String, Vec<GenerateTarget>>,
    /// Watched kind → why.
    pub kinds: BTreeMap<Gvk, Roles>,
}

impl Registry {
    /// The registry of a set of generating policies; `resolve` turns a
    /// match kind (`Namespace`, `apps/v1/Deployment`, `*/Pod`) into the
    /// served kinds it names.
    pub fn build(
        policies: BTreeMap<String, Vec<GenerateTarget>>,
        resolve: impl Fn(&str) -> Vec<Gvk>,
    ) -> Registry {
        let mut kinds: BTreeMap<Gvk, Roles> = BTreeMap::new();
        for (policy, targets) in &policies {
            for t in targets {
                let key = (policy.clone(), t.rule.clone());
                if t.synchronize {
                    for k in &t.kinds {
                        kinds
                            .entry(k.clone())
                            .or_default()
                            .downstream_of
                            .insert(key.clone());
                    }
                }
                for k in t.trigger_kinds.iter().flat_map(|k| resolve(k)) {
                    kinds.entry(k).or_default().trigger_of.insert(key.clone());
                }
            }
        }
        Registry { policies, kinds }
    }

    /// The kinds of the downstreams a policy's rules create (every rule,
    /// synchronizing or not).
    pub fn downstream_kinds(&self, policy: &str) -> Vec<Gvk> {
        let mut out: Vec<Gvk> = self
            .policies
            .get(policy)
            .into_iter()
            .flatten()
            .flat_map(|t| t.kinds.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// One rule's target.
    pub fn target(&self, policy: &str, rule: &str) -> Option<&GenerateTarget> {
        self.policies.get(policy)?.iter().find(|t| t.rule == rule)
    }

    /// Whether the registry is internally consistent: every watched kind
    /// is watched for a rule the registry holds, and every synchronizing
    /// rule's downstream kinds are watched. Every published snapshot is.
    pub fn is_consistent(&self) -> bool {
        let rule_exists = |(p, r): &RuleKey| self.target(p, r).is_some();
        let kinds_ok = self.kinds.values().all(|roles| {
            (!roles.downstream_of.is_empty() || !roles.trigger_of.is_empty())
                && roles.downstream_of.iter().all(rule_exists)
                && roles.trigger_of.iter().all(rule_exists)
        });
        let sync_ok = self.policies.iter().all(|(p, targets)| {
            targets.iter().filter(|t| t.synchronize).all(|t| {
                t.kinds.iter().all(|k| {
                    self.kinds
                        .get(k)
                        .is_some_and(|r| r.downstream_of.contains(&(p.clone(), t.rule.clone())))
                })
            })
        });
        kinds_ok && sync_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn target(rule: &str, kind: &str, sync: bool) -> GenerateTarget {
        GenerateTarget {
            rule: rule.into(),
            kinds: vec![("v1".into(), kind.into())],
            synchronize: sync,
            orphan_on_policy_delete: false,
            generate_existing: false,
            trigger_kinds: vec!["Namespace".into()],
        }
    }

    fn resolve(k: &str) -> Vec<Gvk> {
        vec![(
            "v1".to_string(),
            k.rsplit('/').next().unwrap_or(k).to_string(),
        )]
    }

    #[test]
    fn synchronizing_rules_watch_their_downstreams_and_every_rule_its_triggers() {
        let mut p = BTreeMap::new();
        p.insert(
            "a".to_string(),
            vec![
                target("cm", "ConfigMap", true),
                target("q", "ResourceQuota", false),
            ],
        );
        let r = Registry::build(p, resolve);
        assert!(r.is_consistent());
        let cm = &r.kinds[&("v1".to_string(), "ConfigMap".to_string())];
        assert!(cm.downstream_of.contains(&("a".into(), "cm".into())));
        assert!(
            !r.kinds
                .contains_key(&("v1".to_string(), "ResourceQuota".to_string())),
            "a rule that does not synchronize needs no downstream watch"
        );
        let ns = &r.kinds[&("v1".to_string(), "Namespace".to_string())];
        assert_eq!(ns.trigger_of.len(), 2);
        assert_eq!(
            r.downstream_kinds("a"),
            vec![
                ("v1".to_string(), "ConfigMap".to_string()),
                ("v1".to_string(), "ResourceQuota".to_string())
            ]
        );
    }

    /// Seed 000 (`WatchManager.GetDownstreams` read its maps without the
    /// lock while other methods wrote them): a writer adds and removes
    /// policies 1,000 times while readers query continuously; every
    /// snapshot a reader sees is whole and consistent, and nobody blocks.
    #[test]
    fn seed_get_downstreams_race() {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(Registry::default()));
        let stop = AtomicBool::new(false);
        let reads = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                let rx = rx.clone();
                let (stop, reads) = (&stop, &reads);
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let snap: Arc<Registry> = rx.borrow().clone();
                        assert!(snap.is_consistent(), "a torn snapshot: {snap:?}");
                        for (policy, targets) in &snap.policies {
                            // Every policy in a snapshot has all its kinds.
                            assert_eq!(snap.downstream_kinds(policy).len(), targets.len());
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let mut live: BTreeMap<String, Vec<GenerateTarget>> = BTreeMap::new();
            for i in 0..1000 {
                let name = format!("p{}", i % 17);
                if live.remove(&name).is_none() {
                    live.insert(
                        name,
                        vec![
                            target("a", &format!("K{}", i % 5), true),
                            target("b", &format!("L{}", i % 3), i % 2 == 0),
                        ],
                    );
                }
                tx.send_replace(Arc::new(Registry::build(live.clone(), resolve)));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(reads.load(Ordering::Relaxed) > 0);
    }
}
