//! `image_normalize(image)`: the image reference with Kyverno's default
//! registry (`docker.io`) and tag (`latest`) filled in, as Kyverno's
//! `GetImageInfo(...).String()` with the default configuration
//! (`docker.io/nginx:latest` for `nginx`; the digest wins over the tag).
//!
//! # Invariants
//! No lock, no task: the one `OnceLock` static holds its regular expression, built
//! once by its first reader and read-only afterwards.

use std::sync::OnceLock;

use jmespath::Runtime;
use regex::Regex;

use super::ty::s;
use super::{arg_str, ferr, register, string};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "image_normalize", vec![s()], |x| {
        normalize(arg_str(x, 0))
            .map(string)
            .map_err(|e| ferr("image_normalize", e))
    });
}

const DEFAULT_REGISTRY: &str = "docker.io";

/// Parsed parts of an image reference.
#[derive(Debug, PartialEq)]
pub(crate) struct ImageInfo {
    /// Registry host, e.g. `ghcr.io` or `localhost:5000`.
    pub(crate) registry: String,
    /// Repository path, e.g. `library/nginx`.
    pub(crate) path: String,
    /// Tag; `latest` when neither tag nor digest is given.
    pub(crate) tag: String,
    /// Digest, e.g. `sha256:...`.
    pub(crate) digest: String,
}

fn reference_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let domain_component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
        let domain = format!(r"{domain_component}(?:\.{domain_component})*(?::[0-9]+)?");
        let alnum = r"[a-z0-9]+";
        let sep = r"(?:[._]|__|[-]*)";
        let component = format!(r"{alnum}(?:{sep}{alnum})*");
        let pattern = format!(
            r"^(?:({domain})/)?({component}(?:/{component})*)(?::([\w][\w.-]{{0,127}}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}}))?$"
        );
        Regex::new(&pattern).expect("image reference pattern is valid")
    })
}

/// Kyverno's `addDefaultRegistry`.
fn add_default_registry(name: &str) -> String {
    match name.find('/') {
        None => format!("{DEFAULT_REGISTRY}/{name}"),
        Some(i) => {
            let first = &name[..i];
            if !first.contains(['.', ':']) && first != "localhost" && first.to_lowercase() == first
            {
                format!("{DEFAULT_REGISTRY}/{name}")
            } else {
                name.to_string()
            }
        }
    }
}

/// Kyverno's `GetImageInfo` with the default configuration.
pub(crate) fn image_info(image: &str) -> Result<ImageInfo, String> {
    let full = add_default_registry(image);
    let bad = |why: &str| {
        format!(
            "bad image: {full}, defaultRegistry: {DEFAULT_REGISTRY}, enableDefaultRegistryMutation: true: {why}"
        )
    };
    let Some(c) = reference_regex().captures(&full) else {
        let lower = full.to_lowercase();
        if lower != full && reference_regex().is_match(&lower) {
            return Err(bad(
                "invalid reference format: repository name must be lowercase",
            ));
        }
        return Err(bad("invalid reference format"));
    };
    let get = |i: usize| c.get(i).map_or("", |m| m.as_str()).to_string();
    let (registry, path, mut tag, digest) = (get(1), get(2), get(3), get(4));
    let name_len = if registry.is_empty() {
        path.len()
    } else {
        registry.len() + 1 + path.len()
    };
    if name_len > 255 {
        return Err(bad("repository name must not be more than 255 characters"));
    }
    if tag.is_empty() && digest.is_empty() {
        tag = "latest".to_string();
    }
    Ok(ImageInfo {
        registry,
        path,
        tag,
        digest,
    })
}

/// `ImageInfo.String()`.
fn normalize(image: &str) -> Result<String, String> {
    let info = image_info(image)?;
    let base = if info.registry.is_empty() {
        info.path
    } else {
        format!("{}/{}", info.registry, info.path)
    };
    Ok(if info.digest.is_empty() {
        format!("{base}:{}", info.tag)
    } else {
        format!("{base}@{}", info.digest)
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn normalize() {
        let cases: &[Case] = &[
            (
                "image_normalize('nginx')",
                "{}",
                Json(r#""docker.io/nginx:latest""#),
            ),
            (
                "image_normalize('library/nginx:1.25')",
                "{}",
                Json(r#""docker.io/library/nginx:1.25""#),
            ),
            (
                "image_normalize('ghcr.io/org/app:v1')",
                "{}",
                Json(r#""ghcr.io/org/app:v1""#),
            ),
            (
                "image_normalize('localhost:5000/app')",
                "{}",
                Json(r#""localhost:5000/app:latest""#),
            ),
            (
                "image_normalize('localhost/app')",
                "{}",
                Json(r#""localhost/app:latest""#),
            ),
            (
                "image_normalize('nginx:1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef')",
                "{}",
                Json(
                    r#""docker.io/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef""#,
                ),
            ),
            ("image_normalize('Nginx')", "{}", Err("must be lowercase")),
            ("image_normalize('')", "{}", Err("invalid reference format")),
            (
                "image_normalize('a b')",
                "{}",
                Err("invalid reference format"),
            ),
            ("image_normalize(`1`)", "{}", Err("string")),
        ];
        run(cases);
    }
}
