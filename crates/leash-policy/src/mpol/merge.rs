//! Structured merge of an ApplyConfiguration into an object, as
//! server-side apply merges (sigs.k8s.io/structured-merge-diff's `Merge`,
//! which MutatingAdmissionPolicy and Kyverno use): maps and structs merge
//! field by field, scalars and atomic values are replaced, sets take the
//! union, and a list-map merges items with the same key fields.
//!
//! # Order of a merged list
//!
//! Items only in the object keep their place; items of the patch come in
//! the patch's order. When both hold the same items in different orders,
//! the patch's order wins: an object item that the patch also has is held
//! back until the patch reaches it (structured merge's "next shared item").

use serde_json::Value as Json;

use super::schema::Shape;

/// Merges `patch` into `live` (which is not changed).
pub(crate) fn merge(live: &Json, patch: &Json, shape: &Shape) -> Result<Json, String> {
    merge_at(Some(live), patch, shape, "")
}

fn merge_at(live: Option<&Json>, patch: &Json, shape: &Shape, path: &str) -> Result<Json, String> {
    match (shape, live, patch) {
        (Shape::Atomic, _, _) => Ok(patch.clone()),
        // A null patch over a non-empty map or merged list leaves it as it
        // is (structured merge reads null there as nothing to merge); over
        // a scalar or an atomic value it sets null.
        (Shape::Fields(_) | Shape::Deduced, Some(l @ Json::Object(m)), Json::Null)
            if !m.is_empty() =>
        {
            Ok(l.clone())
        }
        (Shape::ListMap { .. } | Shape::Set, Some(l @ Json::Array(a)), Json::Null)
            if !a.is_empty() =>
        {
            Ok(l.clone())
        }
        (Shape::Fields(_) | Shape::Deduced, Some(Json::Object(l)), Json::Object(p)) => {
            let mut out = l.clone();
            for (k, pv) in p {
                let child = format!("{path}.{k}");
                let merged = merge_at(l.get(k), pv, shape.field(k), &child)?;
                out.insert(k.clone(), merged);
            }
            Ok(Json::Object(out))
        }
        (Shape::ListMap { .. } | Shape::Set, live, Json::Array(p)) => {
            let empty = Vec::new();
            let l = match live {
                Some(Json::Array(l)) => l,
                _ => &empty,
            };
            merge_list(l, p, shape, path)
        }
        (Shape::ListMap { .. } | Shape::Set, _, other) if !other.is_null() => {
            Err(format!("{}: expected a list, got {other}", display(path)))
        }
        // Nothing to merge with: the patch's value, with its own lists
        // checked (a list-map item without its keys is an error).
        (_, None, _) => normalize(patch, shape, path),
        // A scalar, a deduced list, or a change of type: replaced.
        _ => Ok(patch.clone()),
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// A patch value placed where the object had nothing.
fn normalize(patch: &Json, shape: &Shape, path: &str) -> Result<Json, String> {
    match (shape, patch) {
        (Shape::ListMap { .. } | Shape::Set, Json::Array(p)) => merge_list(&[], p, shape, path),
        (Shape::Fields(_) | Shape::Deduced, Json::Object(p)) => {
            let mut out = serde_json::Map::new();
            for (k, v) in p {
                out.insert(
                    k.clone(),
                    normalize(v, shape.field(k), &format!("{path}.{k}"))?,
                );
            }
            Ok(Json::Object(out))
        }
        _ => Ok(patch.clone()),
    }
}

/// The identity of a list item: its key fields (list-map) or itself (set).
fn key_of(item: &Json, shape: &Shape, path: &str) -> Result<Json, String> {
    match shape {
        Shape::ListMap { keys, defaults, .. } => {
            let obj = item.as_object().ok_or_else(|| {
                format!(
                    "{}: an item of a list keyed by {keys:?} must be an object, got {item}",
                    display(path)
                )
            })?;
            let mut key = Vec::with_capacity(keys.len());
            for k in *keys {
                match obj.get(*k) {
                    Some(v) if !v.is_null() => key.push(v.clone()),
                    _ => match defaults.iter().find(|(d, _)| d == k) {
                        Some((_, dv)) => key.push(Json::String((*dv).to_string())),
                        None => {
                            return Err(format!(
                                "{}: an item of a list keyed by {keys:?} has no {k:?}: {item}",
                                display(path)
                            ));
                        }
                    },
                }
            }
            Ok(Json::Array(key))
        }
        _ => Ok(item.clone()),
    }
}

fn merge_list(live: &[Json], patch: &[Json], shape: &Shape, path: &str) -> Result<Json, String> {
    let item_shape: &Shape = match shape {
        Shape::ListMap { item, .. } => item,
        _ => &Shape::Atomic,
    };
    let live_keys = live
        .iter()
        .map(|i| key_of(i, shape, path))
        .collect::<Result<Vec<_>, _>>()?;
    let patch_keys = patch
        .iter()
        .map(|i| key_of(i, shape, path))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, k) in patch_keys.iter().enumerate() {
        if patch_keys[..i].contains(k) {
            return Err(format!(
                "{}: the patch has two items with the key {k}",
                display(path)
            ));
        }
    }
    // The first object item of each key (an object may hold duplicates).
    let live_item = |k: &Json| live_keys.iter().position(|x| x == k).map(|i| &live[i]);
    let in_patch = |k: &Json| patch_keys.contains(k);
    let mut shared: std::collections::VecDeque<&Json> = patch_keys
        .iter()
        .filter(|k| live_keys.contains(k))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged: Vec<&Json> = Vec::new();
    let mut out = Vec::with_capacity(live.len().max(patch.len()));
    let item_path = |k: &Json| format!("{path}[{k}]");
    let (mut li, mut ri) = (0, 0);
    while li < live.len() || ri < patch.len() {
        if li < live.len() && ri < patch.len() {
            let lk = &live_keys[li];
            if *lk == patch_keys[ri] {
                out.push(merge_at(
                    live_item(lk),
                    &patch[ri],
                    item_shape,
                    &item_path(lk),
                )?);
                merged.push(lk);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if in_patch(lk) && next_shared.is_some_and(|n| n != lk) {
                // Shared, but not the one the patch reaches next.
                li += 1;
                continue;
            }
        }
        if li < live.len() {
            let lk = &live_keys[li];
            if !in_patch(lk) {
                out.push(live[li].clone());
                li += 1;
                continue;
            }
            if merged.contains(&lk) {
                li += 1;
                continue;
            }
        }
        if ri < patch.len() {
            let rk = &patch_keys[ri];
            out.push(merge_at(
                live_item(rk),
                &patch[ri],
                item_shape,
                &item_path(rk),
            )?);
            merged.push(rk);
            ri += 1;
            if next_shared.is_some_and(|n| n == rk) {
                next_shared = shared.pop_front();
            }
        } else {
            // Only object items already merged remain.
            li += 1;
        }
    }
    Ok(Json::Array(out))
}
