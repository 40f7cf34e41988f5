//! Synthetic objects for `--generate`, `--namespaces` and `--crds`.
//!
//! [`generate`] turns a [`GenerateSpec`] into the objects a sandbox starts
//! with, in creation order: the spread namespaces first (`ns-0000`,
//! `ns-0001`, ...), then the CustomResourceDefinitions, then the requested
//! built-in kinds in the order given, then the custom objects. Namespaced
//! objects are spread round-robin over the generated namespaces (object `i`
//! goes to namespace `i % N`; with `N = 0` they all go to `default`).
//!
//! Objects look like what a real cluster returns (defaults filled in,
//! status populated): a pod is 2-6 KB of JSON with labels, annotations, an
//! owner reference, 1-3 containers (image, ports, env, resources, probes,
//! volume mounts), volumes and a running status. `uid`, `resourceVersion`
//! and `creationTimestamp` are left to the server, which assigns them on
//! create (it ignores client-supplied ones, as Kubernetes does). Owner
//! references and events' `involvedObject` carry uids derived from the seed
//! and the referenced object's kind, namespace and name; they do not match
//! the uids the server assigns (nothing in the sandbox collects garbage).
//!
//! The output is a pure function of the spec: the same spec gives
//! byte-identical JSON on every run and machine (per-object seeded
//! `fastrand` streams drawn the same way on 32- and 64-bit targets, a fixed
//! base timestamp, no maps with random order). A unit test pins a digest of
//! one spec's output, so a change to what is generated is a deliberate one.
//! An object depends only on the seed, its kind, its index and the number of
//! namespaces (and, for pods, events and daemon sets, the number of nodes),
//! so adding another kind to the spec leaves the others unchanged.
//!
//! `--generate namespaces=N` adds N more, empty namespaces
//! (`ns-idle-0000`, ...) after the spread ones; `nodes=N` makes N nodes that
//! generated pods are then scheduled onto (without it pods name 16 nodes
//! that do not exist as objects).

mod crds;
mod entropy;
mod kinds;
mod objects;
mod workloads;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::{Error, Result};

pub use crds::{
    GROUP as CRD_GROUP, kind as crd_kind, object_name as crd_object_name, plural as crd_plural,
};

/// The most objects one spec may ask for (all kinds, namespaces and custom
/// objects together): about 40 GB of pods, far past the SIG Scalability
/// limit of 150,000 pods per cluster, so only typos reach it.
pub const MAX_OBJECTS: usize = 10_000_000;

/// Nodes pods are spread over when the spec makes no `nodes`.
const DEFAULT_NODE_POOL: usize = 16;

/// What to generate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Built-in kinds (any kubectl spelling: `pods`, `po`, `deployments.apps`)
    /// and how many objects of each, in creation order.
    pub kinds: Vec<(String, usize)>,
    /// Namespaces to spread namespaced objects over (`ns-0000`...). With 0,
    /// namespaced objects go to `default`.
    pub namespaces: usize,
    /// `(K, M)`: K custom kinds with M objects each.
    pub crds: Option<(usize, usize)>,
    /// Seed of every random choice.
    pub seed: u64,
}

/// Parse a `--generate` value, `"pods=1000,deployments.apps=50"`, into kinds
/// (canonical names: `pods`, `deployments.apps`) and counts, in the order
/// given. Every kind must be known, and no kind may appear twice.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the entry, count or kind that is wrong
/// (an unknown kind's message lists every valid name).
pub fn parse_generate(s: &str) -> Result<Vec<(String, usize)>> {
    if s.trim().is_empty() {
        return Err(invalid(
            "empty --generate value: expected KIND=COUNT[,KIND=COUNT...], for example pods=1000,deployments.apps=50"
                .to_owned(),
        ));
    }
    let mut parsed = Vec::new();
    for entry in s.split(',') {
        let malformed = || {
            invalid(format!(
                "malformed --generate entry {entry:?}: expected KIND=COUNT, for example pods=1000"
            ))
        };
        let (name, count) = entry.split_once('=').ok_or_else(malformed)?;
        let (name, count) = (name.trim(), count.trim());
        if name.is_empty() {
            return Err(malformed());
        }
        let count = count.parse::<usize>().map_err(|err| {
            invalid(format!(
                "invalid count {count:?} for {name:?} in --generate: {err} (expected a non-negative integer)"
            ))
        })?;
        parsed.push((name.to_owned(), count));
    }
    let resolved = resolve_kinds(&parsed)?;
    Ok(resolved
        .into_iter()
        .map(|(kind, count)| (kind.canonical_name(), count))
        .collect())
}

/// Parse a `--crds` value, `"K:M"`: K custom kinds with M objects each.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value and what is wrong with it.
pub fn parse_crds(s: &str) -> Result<(usize, usize)> {
    let malformed = |reason: &str| {
        invalid(format!(
            "malformed --crds value {s:?}: {reason}; expected K:M (K custom kinds with M objects each), for example 10:100"
        ))
    };
    let (kinds, objects) = s.split_once(':').ok_or_else(|| malformed("no ':'"))?;
    let kinds = kinds
        .trim()
        .parse::<usize>()
        .map_err(|err| malformed(&format!("kind count {kinds:?}: {err}")))?;
    let objects = objects
        .trim()
        .parse::<usize>()
        .map_err(|err| malformed(&format!("object count {objects:?}: {err}")))?;
    Ok((kinds, objects))
}

/// Generate the objects `spec` describes, in creation order (namespaces and
/// CustomResourceDefinitions first). Deterministic: the same spec always
/// gives byte-identical objects. Holds them all at once; a sandbox streams
/// them instead ([`generate_iter`], [`SandboxConfig::generate`](crate::SandboxConfig::generate)).
///
/// # Errors
/// As [`generate_iter`].
pub fn generate(spec: &GenerateSpec) -> Result<Vec<Value>> {
    Ok(generate_iter(spec)?.collect())
}

/// The objects `spec` describes, in the order of [`generate`], built one at
/// a time as the iterator is advanced: creating 100,000 pods from it never
/// holds more than one of them as a [`Value`].
///
/// # Errors
/// [`Error::InvalidArgument`] for an unknown or repeated kind, or a spec
/// asking for more than [`MAX_OBJECTS`] objects (checked before anything is
/// built).
pub fn generate_iter(spec: &GenerateSpec) -> Result<Generated> {
    let kinds = resolve_kinds(&spec.kinds)?;
    let (crd_kinds, crd_objects) = spec.crds.unwrap_or((0, 0));
    let requested = spec.namespaces as u128
        + kinds.iter().map(|(_, count)| *count as u128).sum::<u128>()
        + crd_kinds as u128 * (1 + crd_objects as u128);
    if requested > MAX_OBJECTS as u128 {
        return Err(invalid(format!(
            "the generate spec asks for {requested} objects, more than the limit of {MAX_OBJECTS}"
        )));
    }
    let node_count = kinds
        .iter()
        .find(|(kind, _)| kind.kind == "Node")
        .map_or(0, |(_, count)| *count);
    let largest = kinds
        .iter()
        .map(|(_, count)| *count)
        .chain([crd_objects])
        .max()
        .unwrap_or(0);
    let ctx = Arc::new(Context {
        seed: spec.seed,
        namespaces: (0..spec.namespaces).map(|k| format!("ns-{k:04}")).collect(),
        node_count,
        token_len: entropy::token_len(largest),
    });

    let mut counts = BTreeMap::new();
    let mut count = |kind: &str, n: usize| {
        if n > 0 {
            *counts.entry(kind.to_owned()).or_insert(0) += n;
        }
    };
    count("Namespace", spec.namespaces);
    count("CustomResourceDefinition", crd_kinds);
    let spread = Arc::clone(&ctx);
    let mut objects: Box<dyn Iterator<Item = Value> + Send> = Box::new(
        (0..spec.namespaces)
            .map(move |k| objects::namespace(&spread.namespaces[k]))
            .chain((0..crd_kinds).map(crds::definition)),
    );
    for (kind, n) in kinds {
        count(kind.kind, n);
        let build = builder(kind.kind);
        let ctx = Arc::clone(&ctx);
        objects = Box::new(objects.chain((0..n).map(move |index| build(&ctx, index))));
    }
    for i in 0..crd_kinds {
        count(&crds::kind(i), crd_objects);
    }
    objects = Box::new(objects.chain((0..crd_kinds).flat_map(move |i| {
        let ctx = Arc::clone(&ctx);
        (0..crd_objects).map(move |j| crds::widget(&ctx, i, j))
    })));
    Ok(Generated {
        objects,
        remaining: requested as usize,
        counts,
    })
}

/// The builder of a built-in kind's objects.
fn builder(kind: &str) -> fn(&Context, usize) -> Value {
    match kind {
        "Namespace" => idle_namespace,
        "Node" => objects::node,
        "Pod" => workloads::pod,
        "ConfigMap" => objects::configmap,
        "Secret" => objects::secret,
        "Service" => objects::service,
        "ServiceAccount" => objects::serviceaccount,
        "Event" => objects::event,
        "Deployment" => workloads::deployment,
        "StatefulSet" => workloads::statefulset,
        "DaemonSet" => workloads::daemonset,
        "ReplicaSet" => workloads::replicaset,
        "Job" => workloads::job,
        "CronJob" => workloads::cronjob,
        other => unreachable!("kinds::BUILTIN_KINDS lists {other} but generate has no builder"),
    }
}

/// The objects of a [`GenerateSpec`], built as they are taken (see
/// [`generate_iter`]).
pub struct Generated {
    objects: Box<dyn Iterator<Item = Value> + Send>,
    remaining: usize,
    counts: BTreeMap<String, usize>,
}

impl Generated {
    /// How many objects of each kind the spec makes, by `kind` (all of them,
    /// however many were taken already).
    pub fn kind_counts(&self) -> &BTreeMap<String, usize> {
        &self.counts
    }
}

impl Iterator for Generated {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        let object = self.objects.next()?;
        self.remaining -= 1;
        Some(object)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Generated {}

impl std::fmt::Debug for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generated")
            .field("remaining", &self.remaining)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

/// What every builder needs besides its index.
#[derive(Debug)]
struct Context {
    seed: u64,
    namespaces: Vec<String>,
    node_count: usize,
    /// Length of unique name tokens (5, or more for huge counts).
    token_len: u32,
}

impl Context {
    /// The random stream of object `index` of the kind tagged `tag`.
    fn rng(&self, tag: &str, index: usize) -> fastrand::Rng {
        entropy::object_rng(self.seed, tag, index)
    }

    /// The name token of object `index` of the kind tagged `tag`, unique
    /// within the kind.
    fn token(&self, tag: &str, index: usize) -> String {
        entropy::unique_token(self.seed, tag, index, self.token_len)
    }

    /// The namespace of namespaced object `index`: round-robin.
    fn namespace_for(&self, index: usize) -> &str {
        if self.namespaces.is_empty() {
            "default"
        } else {
            &self.namespaces[index % self.namespaces.len()]
        }
    }

    /// How many nodes pods are spread over.
    fn node_pool(&self) -> usize {
        if self.node_count > 0 {
            self.node_count
        } else {
            DEFAULT_NODE_POOL
        }
    }

    fn node_name(&self, index: usize) -> String {
        objects::node_name(index)
    }
}

/// An extra, empty namespace from `--generate namespaces=N`.
fn idle_namespace(_ctx: &Context, index: usize) -> Value {
    objects::namespace(&format!("ns-idle-{index:04}"))
}

/// Resolve every kind name, rejecting unknown names and duplicates.
fn resolve_kinds(kinds: &[(String, usize)]) -> Result<Vec<(&'static kinds::BuiltinKind, usize)>> {
    let mut resolved: Vec<(&'static kinds::BuiltinKind, usize, &str)> = Vec::new();
    for (name, count) in kinds {
        let kind = kinds::resolve(name).ok_or_else(|| {
            invalid(format!(
                "unknown kind {name:?} in --generate; valid names: {}",
                kinds::valid_names()
            ))
        })?;
        if let Some((_, _, first)) = resolved.iter().find(|(seen, _, _)| *seen == kind) {
            return Err(invalid(format!(
                "{} is given twice in --generate (as {first:?} and {name:?})",
                kind.canonical_name()
            )));
        }
        resolved.push((kind, *count, name));
    }
    Ok(resolved
        .into_iter()
        .map(|(kind, count, _)| (kind, count))
        .collect())
}

/// Errors of this module: [`Error::InvalidArgument`] naming the bad value.
fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

#[cfg(test)]
mod tests;
