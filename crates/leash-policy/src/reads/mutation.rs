//! What the answer of a chain of mutating policies at admission depends on
//! ([`MutationKey`]), so the mutating webhook can remember it: the pods of
//! one ReplicaSet reach the mutating webhook as one object (they have no
//! name yet, only `generateName`), and pods created by name differ in
//! their name alone, which few mutate rules read.
//!
//! The question asked of each policy is narrow: does its patch depend on
//! anything but the request (then nothing is remembered), and does it read
//! or write `metadata.name` (then the name is part of the key). Everything
//! else of the request is always part of the key, so nothing else needs to
//! be bounded. Writing counts as reading: a patch that sets a field answers
//! an `add`, a `replace` or nothing depending on what was there.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Node, Scope, Uses, foreach_reads, rule_reads, selects_by_name, str_reads, vars_read};
use crate::mutate::{ForeachPatch, MutateForeach, MutateSpec};
use crate::pattern::parse_anchor;
use crate::policy::Rule;

/// What a chain of mutating policies' answer at admission depends on
/// ([`crate::Engine::mutation_key`]). Ordered from the least to the most
/// that can be remembered: a chain is keyed as its least policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MutationKey {
    /// More than the request: data fetched from the cluster or a registry,
    /// the clock, randomness, PolicyExceptions or bindings the engine does
    /// not see. Never remembered.
    Unkeyed,
    /// The whole request (object, old object, operation, user, namespace,
    /// resource).
    Request,
    /// The request without the object's `metadata.name`: no policy reads
    /// or writes it.
    RequestButName,
}

/// The key of a classic policy's compiled mutate rules (autogen's among
/// them) that run at admission: rules with `targets` mutate other
/// resources later and do not take part in the chain. A patch may depend
/// on the object's name when its rule's match names objects, a variable
/// reaches the name (or the request's identity, or the object whole), a
/// reference `$(...)` is used, or the patch writes the name.
pub(crate) fn key_of_mutate_rules<'r>(rules: impl IntoIterator<Item = &'r Rule>) -> MutationKey {
    let mut key = MutationKey::RequestButName;
    for rule in rules {
        let Some(mutate) = &rule.mutate else {
            continue;
        };
        if matches!(mutate, MutateSpec::Existing { .. }) {
            continue;
        }
        let mut root = Node::Fields(BTreeMap::new());
        let mut uses = Uses::default();
        rule_reads(rule, &mut root, &mut uses);
        if uses.fetches || uses.impure {
            return MutationKey::Unkeyed;
        }
        if uses.unbounded
            || uses.identity
            || selects_by_name(rule)
            || root.may_read(&["metadata", "name"])
            || patches(mutate).any(Patch::names)
        {
            key = MutationKey::Request;
        }
    }
    key
}

/// What a `mutate`'s variables read (a foreach's element under its list);
/// the patch's own paths are [`Patch::names`]'.
pub(super) fn mutate_reads(m: &MutateSpec, s: &mut Scope<'_>) {
    fn each(decls: &[MutateForeach], s: &mut Scope<'_>) {
        for d in decls {
            foreach_reads(
                &d.list,
                &d.context,
                d.preconditions.as_ref(),
                s,
                |inner| match &d.patch {
                    ForeachPatch::StrategicMerge(p) => vars_read(p, inner),
                    ForeachPatch::Json6902(text) => str_reads(text, inner),
                    ForeachPatch::Nested(nested) => each(nested, inner),
                },
            );
        }
    }
    match m {
        MutateSpec::StrategicMerge(p) => vars_read(p, s),
        MutateSpec::Json6902(text) => str_reads(text, s),
        MutateSpec::Foreach(decls) => each(decls, s),
        MutateSpec::Existing { .. } => s.unbounded(),
    }
}

/// One patch of a `mutate` (its own, or a foreach level's).
enum Patch<'a> {
    StrategicMerge(&'a Value),
    Json6902(&'a str),
}

impl Patch<'_> {
    /// Whether the patch may write `metadata.name` or holds a reference
    /// `$(...)` (to any part of the object).
    fn names(self) -> bool {
        match self {
            Patch::StrategicMerge(p) => merge_writes_name(p) || p.to_string().contains("$("),
            Patch::Json6902(text) => json6902_writes_name(text) || text.contains("$("),
        }
    }
}

/// Every patch of a `mutate`, at every foreach level.
fn patches(m: &MutateSpec) -> impl Iterator<Item = Patch<'_>> {
    fn each<'a>(decls: &'a [MutateForeach], out: &mut Vec<Patch<'a>>) {
        for d in decls {
            match &d.patch {
                ForeachPatch::StrategicMerge(p) => out.push(Patch::StrategicMerge(p)),
                ForeachPatch::Json6902(text) => out.push(Patch::Json6902(text)),
                ForeachPatch::Nested(nested) => each(nested, out),
            }
        }
    }
    let mut out = Vec::new();
    match m {
        MutateSpec::StrategicMerge(p) => out.push(Patch::StrategicMerge(p)),
        MutateSpec::Json6902(text) => out.push(Patch::Json6902(text)),
        MutateSpec::Foreach(decls) => each(decls, &mut out),
        MutateSpec::Existing { patch, .. } => out.extend(patches(patch)),
    }
    out.into_iter()
}

/// A strategic merge patch writes the name when its `metadata` (anchors
/// stripped) names `name` or a `$patch`-like directive, or is not a map;
/// a directive at the top may replace everything.
fn merge_writes_name(patch: &Value) -> bool {
    let strip = |k: &str| parse_anchor(k).map_or(k, |(_, inner)| inner).to_string();
    let Value::Object(top) = patch else {
        return true;
    };
    top.iter().any(|(k, v)| {
        let k = strip(k);
        k.starts_with('$')
            || (k == "metadata"
                && v.as_object().is_none_or(|meta| {
                    meta.keys().any(|k| {
                        let k = strip(k);
                        k == "name" || k.starts_with('$')
                    })
                }))
    })
}

/// Whether RFC 6902 operations (YAML or JSON text, variables unresolved)
/// may write or move `/metadata/name`: an op's `path` or `from` is the
/// name, under it, or above it (`/metadata`, the root), or its part before
/// a variable could become one of those.
pub(crate) fn json6902_writes_name(ops: &str) -> bool {
    static PATH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"["']?\b(?:path|from)["']?\s*:\s*(?:"([^"]*)"|'([^']*)'|([^\s,}\]]*))"#)
            .expect("a valid regular expression")
    });
    let mut seen = false;
    for c in PATH.captures_iter(ops) {
        seen = true;
        let path = c
            .get(1)
            .or_else(|| c.get(2))
            .or_else(|| c.get(3))
            .map_or("", |m| m.as_str());
        if path_may_be_name(path) {
            return true;
        }
    }
    // Operations whose paths this cannot find.
    !seen && !ops.trim().is_empty()
}

/// Whether a JSON pointer (its part before any variable) may be
/// `/metadata/name`, under it, or above it.
pub(crate) fn path_may_be_name(path: &str) -> bool {
    const NAME: &str = "/metadata/name";
    match path.find("{{") {
        // What the variable becomes may complete the name's path.
        Some(i) => {
            let fixed = &path[..i];
            NAME.starts_with(fixed) || fixed.starts_with(NAME)
        }
        // The name, under it, or above it ("" is the whole object).
        None => {
            let above = NAME.starts_with(path)
                && (path.len() == NAME.len() || NAME[path.len()..].starts_with('/'));
            above || path.starts_with("/metadata/name/")
        }
    }
}

/// Whether CEL text (a MutatingPolicy's ApplyConfiguration or JSONPatch
/// expression, or a variable it may use) may write `metadata.name`: an
/// `Object.metadata{...}` that sets `name`, a `metadata:` set to anything
/// but such a literal, a string literal that may begin a JSON pointer to
/// the name, under it, or above it (`'/metadata/' + k`), or a JSONPatch
/// `path`/`from` that is not a literal. Over-approximate: a `name:` of a
/// nested literal inside the metadata counts.
pub(crate) fn cel_writes_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut from = 0;
    while let Some(i) = text[from..].find("metadata") {
        let at = from + i;
        from = at + "metadata".len();
        if at > 0 && is_ident(bytes[at - 1]) || bytes.get(from).is_some_and(|b| is_ident(*b)) {
            continue;
        }
        let rest = text[from..].trim_start();
        if let Some(body) = rest.strip_prefix('{') {
            // `Object.metadata{...}`: the fields it sets.
            let mut depth = 0usize;
            let mut end = body.len();
            for (j, c) in body.char_indices() {
                match c {
                    '{' | '[' | '(' => depth += 1,
                    '}' | ']' | ')' if depth == 0 => {
                        end = j;
                        break;
                    }
                    '}' | ']' | ')' => depth -= 1,
                    _ => {}
                }
            }
            if sets_field(&body[..end], "name") {
                return true;
            }
        } else if let Some(value) = rest.strip_prefix(':') {
            // `metadata: X`: only a literal `Object.….metadata{...}` is
            // read (at its own occurrence); anything else may hold a name.
            let value = value.trim_start();
            let literal = value.strip_prefix("Object.").is_some_and(|t| {
                let end = t
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                    .unwrap_or(t.len());
                (t[..end] == *"metadata" || t[..end].ends_with(".metadata"))
                    && t[end..].trim_start().starts_with('{')
            });
            if !literal {
                return true;
            }
        }
    }
    // A JSONPatch path is a literal or begins with one ('/metadata/' + k);
    // one that does not is not bounded.
    // A path from a variable is checked where the variable is.
    static DYNAMIC_PATH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"\b(?:path|from)\s*:\s*([^'"\s][\w.]*)"#)
            .expect("a valid regular expression")
    });
    let dynamic = DYNAMIC_PATH
        .captures_iter(text)
        .any(|c| !c[1].starts_with("variables."));
    dynamic
        || string_literals(text).any(|(literal, after)| {
            const NAME: &str = "/metadata/name";
            // A literal something is appended to is a path's beginning.
            let joined = after.trim_start().starts_with('+');
            literal.starts_with('/')
                && if joined {
                    NAME.starts_with(literal) || literal.starts_with(NAME)
                } else {
                    path_may_be_name(literal)
                }
        })
}

/// Whether a CEL object literal's body sets `field` (`field:` after the
/// start, a comma or a brace).
fn sets_field(body: &str, field: &str) -> bool {
    body.match_indices(field).any(|(i, _)| {
        let before = body[..i].trim_end();
        let after = body[i + field.len()..].trim_start();
        (before.is_empty() || before.ends_with([',', '{'])) && after.starts_with(':')
    })
}

/// The contents of the single- and double-quoted string literals of a CEL
/// expression (escapes left as written), each with the text after it.
fn string_literals(text: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find(['"', '\''])?;
        let quote = rest.as_bytes()[start];
        let body = &rest[start + 1..];
        let mut end = None;
        let mut escaped = false;
        for (i, b) in body.bytes().enumerate() {
            match b {
                b'\\' if !escaped => escaped = true,
                b if b == quote && !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end.unwrap_or(body.len());
        let literal = &body[..end];
        rest = body.get(end + 1..).unwrap_or("");
        Some((literal, rest))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(rule: Value) -> MutationKey {
        let doc = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "p", "annotations": {"pod-policies.kyverno.io/autogen-controllers": "none"}},
            "spec": {"rules": [rule]}});
        match crate::Document::compile(&doc) {
            Ok(Some(crate::Document::Policy(p))) => p.mutation_key,
            other => panic!("{doc}: {other:?}"),
        }
    }

    #[test]
    fn an_annotation_key_is_no_variable() {
        let rule = json!({"name": "r", "match": pods(), "mutate": {"patchStrategicMerge":
            {"metadata": {"annotations": {"+(request.example.com/enabled)": "true"}}}}});
        assert_eq!(key(rule), MutationKey::RequestButName);
        let rule = json!({"name": "r", "match": pods(), "mutate": {"foreach": [{"list": "request.object.spec.containers",
            "patchStrategicMerge": {"spec": {"containers": [{"(name)": "{{element.name}}",
                "resources": {"requests": {"+(memory)": "{{element.resources.requests.memory || '1Gi'}}"}}}]}}}]}});
        assert_eq!(key(rule), MutationKey::RequestButName);
    }

    fn pods() -> Value {
        json!({"any": [{"resources": {"kinds": ["Pod"]}}]})
    }

    #[test]
    fn a_label_patch_is_remembered_without_the_name() {
        let rule = json!({"name": "r", "match": pods(), "mutate": {"patchStrategicMerge":
            {"metadata": {"labels": {"+(team)": "a"}}, "spec": {"containers": [{"(name)": "*", "imagePullPolicy": "Always"}]}}}});
        assert_eq!(key(rule), MutationKey::RequestButName);
    }

    #[test]
    fn reading_or_writing_the_name_keys_on_it() {
        let cases = [
            json!({"patchStrategicMerge": {"metadata": {"labels": {"n": "{{request.object.metadata.name}}"}}}}),
            json!({"patchStrategicMerge": {"metadata": {"labels": {"n": "{{request.name}}"}}}}),
            json!({"patchStrategicMerge": {"metadata": {"labels": {"n": "{{request.object.metadata | to_string(@)}}"}}}}),
            json!({"patchStrategicMerge": {"metadata": {"+(name)": "x"}}}),
            json!({"patchStrategicMerge": {"metadata": "x"}}),
            json!({"patchStrategicMerge": {"$patch": "replace", "spec": {}}}),
            json!({"patchesJson6902": "- op: replace\n  path: /metadata/name\n  value: x"}),
            json!({"patchesJson6902": "- op: add\n  path: /metadata\n  value: {}"}),
            json!({"patchesJson6902": "[{\"op\": \"move\", \"from\": \"/metadata/name\", \"path\": \"/x\"}]"}),
            json!({"patchesJson6902": "- op: add\n  path: /metadata/{{request.object.kind}}\n  value: x"}),
            json!({"patchesJson6902": "something without paths"}),
            json!({"foreach": [{"list": "request.object.spec.containers",
                "patchStrategicMerge": {"metadata": {"labels": {"c": "{{request.object.metadata.name}}"}}}}]}),
            json!({"patchStrategicMerge": {"metadata": {"labels": {"n": "$(name)"}}}}),
        ];
        for mutate in cases {
            let rule = json!({"name": "r", "match": pods(), "mutate": mutate});
            assert_eq!(key(rule.clone()), MutationKey::Request, "{rule}");
        }
        let named = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["web-*"]}}]},
            "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}});
        assert_eq!(key(named), MutationKey::Request);
    }

    #[test]
    fn fetched_data_the_clock_and_randomness_are_never_remembered() {
        let cases = [
            json!({"name": "r", "match": pods(), "context": [{"name": "cm", "configMap": {"name": "c", "namespace": "d"}}],
                "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "{{cm.data.a}}"}}}}}),
            json!({"name": "r", "match": pods(), "mutate": {"foreach": [{"list": "request.object.spec.containers",
                "context": [{"name": "x", "apiCall": {"urlPath": "/api/v1/namespaces"}}],
                "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}]}}),
            json!({"name": "r", "match": pods(), "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"t": "{{time_now_utc()}}"}}}}}),
            json!({"name": "r", "match": pods(), "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"t": "{{random('[a-z]{4}')}}"}}}}}),
        ];
        for rule in cases {
            assert_eq!(key(rule.clone()), MutationKey::Unkeyed, "{rule}");
        }
    }

    #[test]
    fn variables_that_only_read_other_fields_leave_the_name_out() {
        let rule = json!({"name": "r", "match": pods(),
            "context": [{"name": "app", "variable": {"jmesPath": "request.object.metadata.labels.app", "default": ""}}],
            "preconditions": {"all": [{"key": "{{request.operation}}", "operator": "Equals", "value": "CREATE"}]},
            "mutate": {"foreach": [{"list": "request.object.spec.containers",
                "patchesJson6902": "- op: add\n  path: /spec/containers/{{elementIndex}}/env/-\n  value: {\"name\": \"APP\", \"value\": \"{{app}}\"}"}]}});
        assert_eq!(key(rule), MutationKey::RequestButName);
    }

    #[test]
    fn targets_rules_are_not_in_the_chain() {
        let rule = json!({"name": "r", "match": pods(), "mutate": {"targets": [{"apiVersion": "v1", "kind": "Secret"}],
            "patchStrategicMerge": {"metadata": {"name": "{{request.object.metadata.name}}"}}}});
        assert_eq!(key(rule), MutationKey::RequestButName);
    }

    #[test]
    fn cel_mutations_that_set_the_name() {
        for text in [
            "Object{metadata: Object.metadata{name: \"x\"}}",
            "Object{metadata: Object.metadata{labels: {\"a\": \"b\"}, name: \"x\"}}",
            "Object{metadata: variables.meta}",
            "[JSONPatch{op: \"replace\", path: \"/metadata/name\", value: \"x\"}]",
            "[JSONPatch{op: \"add\", path: \"/metadata\", value: {}}]",
            "[JSONPatch{op: \"add\", path: '/metadata/' + variables.k, value: \"x\"}]",
            "[JSONPatch{op: \"add\", path: object.spec.p, value: \"x\"}]",
            "\"/metadata/name\"",
            "\"/metadata\"",
            "\"/\" + variables.rest",
        ] {
            assert!(cel_writes_name(text), "{text}");
        }
        for text in [
            "Object{metadata: Object.metadata{labels: {\"name\": object.spec.x}}}",
            "Object{spec: Object.spec{containers: [Object.spec.containers{name: \"c\", image: \"i\"}]}}",
            "Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {\"a\": \"b\"}}}}}",
            "[JSONPatch{op: \"add\", path: \"/metadata/labels/a\", value: \"b\"}]",
            "[JSONPatch{op: \"add\", path: \"/metadata/annotations\", value: {}}]",
            "[JSONPatch{op: \"test\", path: \"/\", value: null}]",
            "[JSONPatch{op: \"add\", path: variables.p, value: \"x\"}]",
            "object.metadata.labels.app",
        ] {
            assert!(!cel_writes_name(text), "{text}");
        }
    }
}
