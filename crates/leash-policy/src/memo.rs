//! Results remembered by what each policy reads: a policy evaluated on two
//! resources that agree on every part it reads (and on namespace and
//! operation) gives the same results, so the second gets the first's.
//!
//! A cluster is made of resources that repeat: the pods of one Deployment
//! differ in their names, uids, IPs and status, rarely in what a Pod
//! Security control looks at. `leash apply --cluster` keeps one [`Memo`] per
//! evaluation thread (no sharing, no locks).
//!
//! # Invariants
//! 1. A policy has a key only when its results depend on the resource
//!    alone ([`crate::ReadSet::key_of_rules`], `ValidatingPolicy::memo_key`):
//!    no data fetched, no clock, no randomness, reads bounded. An engine
//!    with PolicyExceptions, or bindings per resource name, has no memo.
//! 2. A hit is decided by comparing the parts read, not by the hash alone.
//! 3. Bounded: at most [`CAPACITY`] entries per policy; a policy whose
//!    lookups hit less than a quarter of the time after [`PROBATION`]
//!    lookups is no longer looked up (its entries are dropped).
//! 4. A memo is valid for one engine, one set of bindings, user and
//!    cluster data, and one set of namespaces: the caller creates it for a
//!    run and drops it after.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;

use serde_json::Value;

use crate::ReadSet;
use crate::request::{EvalRequest, Operation};
use crate::result::RuleResult;

/// Entries kept per policy, and by the group.
pub const CAPACITY: usize = 4096;
/// Requests looked up policy by policy before the group is formed (and
/// group lookups before its hit rate is judged).
pub const PROBATION: u32 = 1024;

/// What a memo did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemoStats {
    /// Policy evaluations looked up.
    pub lookups: u64,
    /// Of those, answered from the memo.
    pub hits: u64,
    /// Policies with a key left out of the group (too few hits).
    pub retired: usize,
    /// Policies looked up together after the probation.
    pub grouped: usize,
}

/// Remembered results of one engine's policies ([`crate::Engine::memo`]).
///
/// For its first [`PROBATION`] requests each policy is looked up on its
/// own key; then the policies that hit at least half of the time are
/// grouped under the union of their keys, so that a request costs one
/// lookup, not one per policy, and the others are evaluated directly. A
/// group that then hits less than a quarter of the time is dropped.
#[derive(Debug)]
pub struct Memo {
    /// One per policy: the classic policies, then the ValidatingPolicies.
    slots: Vec<Slot>,
    /// Which policies have a key.
    keyed: Vec<bool>,
    requests: u64,
    probation: u32,
    formed: bool,
    group: Option<Group>,
    stats: MemoStats,
}

/// A request's visit to the memo ([`Memo::begin`]).
pub(crate) enum Visit {
    Off,
    /// Probation: each policy looked up in its own slot; the pending miss.
    Each(Option<(usize, u64)>),
    /// The group's results, one per member.
    Hit(Arc<[Arc<[RuleResult]>]>),
    /// Not there: the members' results as they are evaluated.
    Miss(u64, Vec<Option<Arc<[RuleResult]>>>),
}

impl Memo {
    pub(crate) fn new(keys: Vec<Option<ReadSet>>) -> Memo {
        Memo {
            keyed: keys.iter().map(Option::is_some).collect(),
            slots: keys
                .into_iter()
                .map(|key| Slot {
                    key,
                    table: Table::default(),
                    lookups: 0,
                    hits: 0,
                })
                .collect(),
            requests: 0,
            probation: PROBATION,
            formed: false,
            group: None,
            stats: MemoStats::default(),
        }
    }

    /// What the memo did so far.
    pub fn stats(&self) -> MemoStats {
        self.stats
    }

    /// The policies (indices: the classic policies, then the
    /// ValidatingPolicies, as [`crate::Engine`] holds them) that have a key
    /// and were left out of the group.
    pub fn retired(&self) -> Vec<usize> {
        match &self.group {
            _ if !self.formed => Vec::new(),
            Some(g) => (0..self.slots.len())
                .filter(|&i| g.position[i].is_none() && self.keyed[i])
                .collect(),
            None => (0..self.slots.len()).filter(|&i| self.keyed[i]).collect(),
        }
    }

    /// A shorter probation, so that tests reach the group.
    #[cfg(test)]
    fn with_probation(mut self, requests: u32) -> Memo {
        self.probation = requests;
        self
    }

    /// Starts evaluating `req`.
    pub(crate) fn begin(&mut self, req: &EvalRequest) -> Visit {
        if req.old_object.is_some() {
            return Visit::Off;
        }
        self.requests += 1;
        if !self.formed && self.requests > u64::from(self.probation) {
            self.form_group();
        }
        if !self.formed {
            return Visit::Each(None);
        }
        let Some(group) = &mut self.group else {
            return Visit::Off;
        };
        let n = group.members as u64;
        if group.lookups == u64::from(self.probation) && group.hits * 4 < group.lookups {
            self.group = None;
            return Visit::Off;
        }
        group.lookups += 1;
        self.stats.lookups += n;
        match group.table.find(&group.key, req) {
            Ok(results) => {
                group.hits += 1;
                self.stats.hits += n;
                Visit::Hit(results)
            }
            Err(hash) => Visit::Miss(hash, vec![None; group.members]),
        }
    }

    fn form_group(&mut self) {
        self.formed = true;
        let mut key = ReadSet::empty();
        let mut position = vec![None; self.slots.len()];
        let mut members = 0;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(k) = slot.key.take() else { continue };
            slot.table = Table::default();
            if slot.lookups > 0 && slot.hits * 2 >= slot.lookups {
                key.merge(&k);
                position[i] = Some(members);
                members += 1;
            } else {
                self.stats.retired += 1;
            }
        }
        self.stats.grouped = members;
        if members > 0 {
            self.group = Some(Group {
                key,
                members,
                position,
                table: Table::default(),
                lookups: 0,
                hits: 0,
            });
        }
    }

    /// What the memo holds for policy `i` (classic policies first, then
    /// ValidatingPolicies) on this visit's request.
    pub(crate) fn answer(
        &mut self,
        visit: &mut Visit,
        i: usize,
        req: &EvalRequest,
    ) -> Option<Arc<[RuleResult]>> {
        match visit {
            Visit::Off | Visit::Miss(..) => None,
            Visit::Hit(results) => {
                let pos = self.group.as_ref()?.position[i]?;
                Some(results[pos].clone())
            }
            Visit::Each(pending) => {
                let slot = &mut self.slots[i];
                let key = slot.key.as_ref()?;
                slot.lookups += 1;
                self.stats.lookups += 1;
                match slot.table.find(key, req) {
                    Ok(results) => {
                        slot.hits += 1;
                        self.stats.hits += 1;
                        Some(results[0].clone())
                    }
                    Err(hash) => {
                        *pending = Some((i, hash));
                        None
                    }
                }
            }
        }
    }

    /// Whether [`Memo::record`] keeps policy `i`'s results on this visit.
    pub(crate) fn wants(&self, visit: &Visit, i: usize) -> bool {
        match visit {
            Visit::Each(pending) => matches!(pending, Some((at, _)) if *at == i),
            Visit::Miss(..) => self.group.as_ref().is_some_and(|g| g.position[i].is_some()),
            Visit::Off | Visit::Hit(_) => false,
        }
    }

    /// Notes policy `i`'s results, evaluated on this visit's request.
    pub(crate) fn record(
        &mut self,
        visit: &mut Visit,
        i: usize,
        req: &EvalRequest,
        results: Arc<[RuleResult]>,
    ) {
        match visit {
            Visit::Each(pending) => {
                if let Some((at, hash)) = pending.take()
                    && at == i
                {
                    let slot = &mut self.slots[i];
                    if let Some(key) = &slot.key {
                        slot.table.store(key, hash, req, vec![results]);
                    }
                }
            }
            Visit::Miss(_, got) => {
                if let Some(pos) = self.group.as_ref().and_then(|g| g.position[i]) {
                    got[pos] = Some(results);
                }
            }
            Visit::Off | Visit::Hit(_) => {}
        }
    }

    /// Ends this visit: a group miss is stored.
    pub(crate) fn end(&mut self, visit: Visit, req: &EvalRequest) {
        if let (Visit::Miss(hash, got), Some(group)) = (visit, &mut self.group)
            && let Some(results) = got.into_iter().collect::<Option<Vec<_>>>()
        {
            group.table.store(&group.key, hash, req, results);
        }
    }
}

#[derive(Debug)]
struct Slot {
    key: Option<ReadSet>,
    table: Table,
    lookups: u64,
    hits: u64,
}

#[derive(Debug)]
struct Group {
    key: ReadSet,
    members: usize,
    /// Each policy's position among the members.
    position: Vec<Option<usize>>,
    table: Table,
    lookups: u64,
    hits: u64,
}

#[derive(Debug)]
struct Entry {
    namespace: Box<str>,
    operation: Operation,
    kept: Value,
    results: Arc<[Arc<[RuleResult]>]>,
}

/// Entries by the hash of the parts read, namespace and operation.
#[derive(Debug, Default)]
struct Table {
    entries: HashMap<u64, Vec<Entry>>,
    len: usize,
}

impl Table {
    /// The results stored for what `req` reads of `key`, or the hash to
    /// store them under.
    fn find(&self, key: &ReadSet, req: &EvalRequest) -> Result<Arc<[Arc<[RuleResult]>]>, u64> {
        let mut h = Fx::default();
        h.write(req.request_namespace().as_bytes());
        h.write_u8(req.operation as u8);
        key.hash_read(&req.object, &mut h);
        let hash = h.finish();
        self.entries
            .get(&hash)
            .and_then(|bucket| {
                bucket.iter().find(|e| {
                    *e.namespace == *req.request_namespace()
                        && e.operation == req.operation
                        && key.same_read(&req.object, &e.kept)
                })
            })
            .map(|e| e.results.clone())
            .ok_or(hash)
    }

    fn store(
        &mut self,
        key: &ReadSet,
        hash: u64,
        req: &EvalRequest,
        results: Vec<Arc<[RuleResult]>>,
    ) {
        if self.len >= CAPACITY {
            return;
        }
        self.len += 1;
        self.entries.entry(hash).or_default().push(Entry {
            namespace: req.request_namespace().into(),
            operation: req.operation,
            kept: key.prune(&req.object),
            results: results.into(),
        });
    }
}

/// A multiply-rotate hasher (as rustc's FxHasher): the parts read are a
/// few short strings and numbers, and hashing them must cost less than
/// evaluating; a collision only costs a comparison.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        self.write_u8(0xfe);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Value, json};

    use crate::{Bindings, Document, Engine, EvalRequest, NoClusterData, Status};

    const CORPUS: &str = "/work/shared/kyverno-policies";

    /// The engine of a folder's policies, and its resources.
    fn folder(dir: &Path) -> (Engine, Vec<Value>) {
        let mut engine = Engine::new();
        let mut resources = Vec::new();
        for doc in crate::vpol::tests::yaml_docs(dir) {
            match Document::compile(&doc) {
                Ok(Some(d)) => engine.add(d),
                _ if doc["metadata"].is_object()
                    && !doc["apiVersion"]
                        .as_str()
                        .unwrap_or("")
                        .contains("kyverno.io") =>
                {
                    resources.push(doc)
                }
                _ => {}
            }
        }
        (engine, resources)
    }

    /// `v` with one scalar leaf changed, for each of its first `max` leaves.
    fn variants(v: &Value, max: usize) -> Vec<Value> {
        fn leaves(v: &Value, at: String, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, x)| {
                    leaves(
                        x,
                        format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                        out,
                    )
                }),
                Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .for_each(|(i, x)| leaves(x, format!("{at}/{i}"), out)),
                _ => out.push(at),
            }
        }
        let mut paths = Vec::new();
        leaves(v, String::new(), &mut paths);
        paths
            .into_iter()
            .take(max)
            .map(|p| {
                let mut changed = v.clone();
                let leaf = changed.pointer_mut(&p).expect("a leaf");
                *leaf = match leaf.take() {
                    Value::String(s) => Value::String(format!("{s}x")),
                    Value::Number(n) => json!(n.as_f64().unwrap_or(0.0) + 1.0),
                    Value::Bool(b) => Value::Bool(!b),
                    _ => json!("x"),
                };
                changed
            })
            .collect()
    }

    /// What is compared: status and message (an error's message may print
    /// a CEL map, in no set order).
    fn outcome(results: Vec<crate::RuleResult>) -> Vec<(String, String, Status, String)> {
        results
            .into_iter()
            .map(|r| {
                let message = if r.status == Status::Error {
                    String::new()
                } else {
                    r.message
                };
                (r.policy.to_string(), r.rule, r.status, message)
            })
            .collect()
    }

    /// Remembered results are the results: for the policies of every
    /// validate folder of the corpus and the bench's Pod Security sets, on
    /// each resource and on copies of it with one leaf changed (each of its
    /// first 40), evaluating through a memo that has seen the resource
    /// gives what evaluating directly gives. A change to a part a policy
    /// does not read is a hit, so this checks that what a policy's key
    /// leaves out does not change its results.
    #[test]
    fn remembered_results_are_the_results() {
        let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/policies");
        let mut dirs = vec![bench.join("pss-classic"), bench.join("pss-cel")];
        let classes =
            std::fs::read_to_string(Path::new(CORPUS).join("CLASSES.tsv")).unwrap_or_default();
        dirs.extend(
            classes
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .filter(|(_, c)| {
                    [
                        "classic-validate",
                        "classic-validate+context",
                        "classic-validate-cel",
                        "ValidatingPolicy",
                    ]
                    .contains(c)
                })
                .map(|(f, _)| Path::new(CORPUS).join(f)),
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "uid": "u-1", "labels": {"app": "a"},
                "annotations": {"container.apparmor.security.beta.kubernetes.io/a": "runtime/default"}},
            "spec": {"hostNetwork": false, "containers": [
                {"name": "a", "image": "nginx:1", "ports": [{"containerPort": 80, "hostPort": 0}],
                 "securityContext": {"privileged": false, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, "runAsNonRoot": true}},
                {"name": "b", "image": "redis", "env": [{"name": "E", "value": "v"}]}],
                "volumes": [{"name": "t", "projected": {"sources": []}}, {"name": "h", "hostPath": {"path": "/x"}}],
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        let (mut folders, mut compared, mut hits, mut lookups) = (0, 0, 0, 0);
        let mut differ = Vec::new();
        // Policies that use the identity in ways a key must see: a
        // ValidatingPolicy's `request`, an object selector, `resourceNames`;
        // a classic rule's `names`, `selector` and `request.name`-like
        // variables.
        let written = [
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                "metadata": {"name": "req"}, "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "validations": [{"expression": "request.name == 'q'", "messageExpression": "'pod ' + request.name"}]}}),
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                "metadata": {"name": "sel"}, "spec": {
                "matchConstraints": {"objectSelector": {"matchLabels": {"app": "a"}},
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"], "resourceNames": ["p", "px"]}]},
                "validations": [{"expression": "object.spec.hostNetwork == false"}]}}),
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "names"},
                "spec": {"rules": [
                    {"name": "n", "match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["p"]}}]},
                     "validate": {"message": "m", "pattern": {"spec": {"hostNetwork": false}}}},
                    {"name": "s", "match": {"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "a"}}}}]},
                     "validate": {"message": "m", "pattern": {"spec": {"hostNetwork": false}}}}]}}),
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "request"},
                "spec": {"rules": [
                    {"name": "v", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                     "validate": {"message": "{{ request.name }}", "deny": {"conditions": {"any": [
                        {"key": "{{ request.kind.kind }}", "operator": "Equals", "value": "Pod"}]}}}}]}}),
        ];
        let mut sets: Vec<(String, Engine, Vec<Value>)> = Vec::new();
        for doc in &written {
            let mut engine = Engine::new();
            engine.add(Document::compile(doc).expect("compiles").expect("a policy"));
            sets.push((
                doc["metadata"]["name"].to_string(),
                engine,
                vec![pod.clone()],
            ));
        }
        for dir in &dirs {
            let (engine, mut resources) = folder(dir);
            if dir.starts_with(&bench) {
                resources.push(pod.clone());
            }
            sets.push((dir.display().to_string(), engine, resources));
        }
        for (name, engine, resources) in &sets {
            // The group is formed after 4 requests: both ways are checked.
            let Some(mut memo) = engine
                .memo(&Bindings::default())
                .map(|m| m.with_probation(4))
            else {
                continue;
            };
            folders += 1;
            for r in resources {
                let eval = |o: &Value, memo: Option<&mut crate::Memo>| {
                    let prepared =
                        crate::Prepared::new(EvalRequest::create(std::sync::Arc::new(o.clone())));
                    outcome(
                        engine
                            .evaluation(&NoClusterData)
                            .memo(memo)
                            .validate(&prepared)
                            .into_vec(),
                    )
                };
                for v in std::iter::once(r.clone()).chain(variants(r, 40)) {
                    // The memo has seen `r`.
                    eval(r, Some(&mut memo));
                    let before = memo.stats();
                    let got = eval(&v, Some(&mut memo));
                    hits += memo.stats().hits - before.hits;
                    lookups += memo.stats().lookups - before.lookups;
                    let want = eval(&v, None);
                    compared += 1;
                    if got != want {
                        differ.push(format!(
                            "{name}: {v}\n  memo:   {got:?}\n  direct: {want:?}"
                        ));
                    }
                }
            }
        }
        assert!(
            differ.is_empty(),
            "{} of {compared} differ:\n{}",
            differ.len(),
            differ.join("\n")
        );
        assert!(folders >= 2, "{folders} folders with a memo");
        // Not vacuous: most evaluations were answered from the memo.
        assert!(hits * 2 > lookups, "{hits} hits of {lookups} lookups");
        println!("{folders} folders, {compared} compared, {hits} hits of {lookups} lookups");
    }

    /// A policy whose key never repeats (it reads each pod's name) is
    /// retired after its probation, its entries dropped.
    #[test]
    fn a_policy_that_never_hits_is_retired() {
        let mut engine = Engine::new();
        engine.add(
            Document::compile(&json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "n"}, "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "{{ request.object.metadata.name }}", "pattern": {"spec": {"x": 1}}}}]}}))
            .expect("compiles")
            .expect("a policy"),
        );
        let mut memo = engine.memo(&Bindings::default()).expect("a memo");
        for i in 0..(super::PROBATION as usize + 10) {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")}, "spec": {"x": 1}});
            let prepared = crate::Prepared::new(EvalRequest::create(std::sync::Arc::new(pod)));
            let results = engine
                .evaluation(&NoClusterData)
                .memo(Some(&mut memo))
                .validate(&prepared)
                .into_vec();
            assert_eq!(results.len(), 1);
            assert_eq!(results[0].status, Status::Pass);
        }
        let stats = memo.stats();
        assert_eq!(stats.hits, 0);
        assert_eq!(stats.lookups, u64::from(super::PROBATION));
        assert_eq!((stats.retired, stats.grouped), (1, 0));
        assert_eq!(memo.slots[0].table.len, 0);
    }
}
