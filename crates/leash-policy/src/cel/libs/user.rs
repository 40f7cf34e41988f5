//! `parseServiceAccount`.

#[allow(clippy::wildcard_imports)]
use super::*;

// Kyverno's `parseServiceAccount(username)`: `system:serviceaccount:NS:NAME`
// gives `Namespace` NS and `Name` NAME (everything after the namespace's
// colon, colons included, as Kyverno splits it); any other username gives
// both empty. The field names are those of Kyverno's Go type, which CEL
// exposes unchanged (`variables.sa.Name`).
overload!(user_parse_service_account, |args| {
    let user = str_arg(args, 0, "parseServiceAccount")?;
    let (namespace, name) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .unwrap_or(("", ""));
    Ok(Value::Map(Map {
        map: Arc::new(
            [("Namespace", namespace), ("Name", name)]
                .into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k.to_string())), s(v)))
                .collect(),
        ),
    }))
});
