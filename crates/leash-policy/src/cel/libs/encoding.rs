//! `md5`, `sha1`, `sha256`, `json.unmarshal`, `yaml.parse`.

#[allow(clippy::wildcard_imports)]
use super::*;

overload!(hash_md5, |args| {
    let text = str_arg(args, 0, "md5")?;
    Ok(s(&crate::jmespath::hash::hex(&crate::jmespath::hash::md5(
        text.as_bytes(),
    ))))
});

/// A ring digest of a string argument, as lowercase hex.
pub(super) fn digest_hex(
    args: &[Value],
    function: &str,
    algorithm: &'static ring::digest::Algorithm,
) -> R {
    let text = str_arg(args, 0, function)?;
    Ok(s(&crate::jmespath::hash::hex(
        ring::digest::digest(algorithm, text.as_bytes()).as_ref(),
    )))
}

overload!(hash_sha1, |args| digest_hex(
    args,
    "sha1",
    &ring::digest::SHA1_FOR_LEGACY_USE_ONLY
));
overload!(hash_sha256, |args| digest_hex(
    args,
    "sha256",
    &ring::digest::SHA256
));
overload!(json_unmarshal, |args| {
    let text = str_arg(args, 0, "json.unmarshal")?;
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ferr("json.unmarshal", format!("invalid JSON: {e}")))?;
    Ok(from_json(&v))
});
overload!(yaml_parse, |args| {
    let text = str_arg(args, 0, "yaml.parse")?;
    // `0644` is 420, as Kyverno's sigs.k8s.io/yaml reads YAML (1.1).
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let v: serde_json::Value = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| ferr("yaml.parse", format!("invalid YAML: {e}")))?;
    Ok(from_json(&v))
});
