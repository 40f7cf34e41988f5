//! Kubernetes' `jsonpatch` CEL library: `jsonpatch.escapeKey(key)` escapes
//! a map key for use in a JSON Pointer path (RFC 6901: `~` becomes `~0`,
//! then `/` becomes `~1`), as MutatingAdmissionPolicy's JSONPatch
//! expressions write `"/metadata/labels/" + jsonpatch.escapeKey(k)`.

use cel::common::types::STRING_TYPE;
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

/// Registers `jsonpatch.escapeKey` on `env`.
pub(super) fn register(env: &mut Env) {
    // Registration fails only on a duplicate declaration (a bug the tests
    // catch).
    let _ = env.add_overload(
        "jsonpatch.escapeKey",
        "leash.jsonpatch.escapeKey/1",
        vec![STRING_TYPE],
        escape_key,
    );
}

/// Escapes one JSON Pointer reference token.
pub(crate) fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn escape_key<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [arg] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    match Value::try_from(arg.as_ref())? {
        Value::String(s) => {
            let out = Value::String(std::sync::Arc::new(escape(&s)));
            Ok(CowVal::Owned(Box::<dyn Val>::try_from(out)?))
        }
        other => Err(ExecutionError::function_error(
            "jsonpatch.escapeKey",
            format!("expected a string, got {}", other.type_of()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_tilde_before_slash() {
        for (key, want) in [
            ("plain", "plain"),
            ("karpenter.sh/do-not-evict", "karpenter.sh~1do-not-evict"),
            ("a~b", "a~0b"),
            ("~/", "~0~1"),
            ("a/~1", "a~1~01"),
        ] {
            assert_eq!(escape(key), want, "{key}");
        }
    }
}
