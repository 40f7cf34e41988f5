//! Immutable snapshots: an entry's data and every projection of that same data.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::Value;

use crate::entry::CompiledProjection;
use crate::error::{Error, Result};

/// One consistent view of an entry: the raw data and every projection
/// computed from exactly that data. Readers get it as `Arc<Snapshot>`; it is
/// never modified after it is built (house rule 7), so holding it is safe
/// for as long as a reader likes.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The raw data: the list of objects (Kubernetes entries) or the parsed
    /// JSON response (API calls).
    pub data: Value,
    /// Every projection, by name.
    pub projections: BTreeMap<String, Value>,
    /// When this snapshot was computed.
    pub computed_at: SystemTime,
}

impl Snapshot {
    /// Evaluate every projection over `data`. Either all succeed and a whole
    /// snapshot is returned, or the first failure is returned and nothing is
    /// built (the seed's half-written projection map cannot happen).
    pub fn compute(data: Value, projections: &[CompiledProjection]) -> Result<Snapshot> {
        let mut values = BTreeMap::new();
        if !projections.is_empty() {
            // Convert once; every projection reads the same variable, with
            // Kyverno's functions and number forms (leash-policy's JMESPath).
            let variable = leash_policy::jmespath::from_json(&data);
            for projection in projections {
                let result = leash_policy::jmespath::search_var(&projection.expression, &variable)
                    .map_err(|reason| Error::ProjectionFailed {
                        projection: projection.name.clone(),
                        reason,
                    })?;
                values.insert(
                    projection.name.clone(),
                    leash_policy::jmespath::to_json(&result),
                );
            }
        }
        Ok(Snapshot {
            data,
            projections: values,
            computed_at: SystemTime::now(),
        })
    }

    /// A projection's value.
    pub fn projection(&self, name: &str) -> Option<&Value> {
        self.projections.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compiled(name: &str, expr: &str) -> CompiledProjection {
        CompiledProjection {
            name: name.to_owned(),
            expression: leash_policy::jmespath::compile(expr).unwrap(),
        }
    }

    #[test]
    fn all_projections_from_the_same_data() {
        let p = [compiled("n", "length(@)"), compiled("first", "[0].a")];
        let s = Snapshot::compute(json!([{"a": 1}, {"a": 2}]), &p).unwrap();
        assert_eq!(s.projection("n"), Some(&json!(2)));
        assert_eq!(s.projection("first"), Some(&json!(1)));
    }

    /// Kyverno's JMESPath functions work in projections, as Kyverno
    /// evaluates them with its engine's JMESPath.
    #[test]
    fn projections_have_kyvernos_functions() {
        let p = [
            compiled("upper", "to_upper([0].name)"),
            compiled("total", "sum([*].n)"),
        ];
        let s =
            Snapshot::compute(json!([{"name": "a", "n": 2}, {"name": "b", "n": 3}]), &p).unwrap();
        assert_eq!(s.projection("upper"), Some(&json!("A")));
        assert_eq!(s.projection("total"), Some(&json!(5)));
    }

    #[test]
    fn a_failing_projection_builds_nothing() {
        let p = [compiled("ok", "@"), compiled("bad", "length(@)")];
        let err = Snapshot::compute(json!(42), &p).unwrap_err();
        assert!(
            matches!(&err, Error::ProjectionFailed { projection, .. } if projection == "bad"),
            "{err}"
        );
    }
}
