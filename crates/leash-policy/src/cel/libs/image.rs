//! Kyverno's image library: `image`, `isImage`, `parseImageReference` and an image's parts.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A container image reference (Kyverno's `image` library), normalized as
/// go-containerregistry does: `nginx` is `index.docker.io/library/nginx:latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    registry: String,
    repository: String,
    tag: String,
    digest: String,
}

impl Opaque for Image {
    fn runtime_type_name(&self) -> &str {
        "kyverno.Image"
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if !self.tag.is_empty() {
            write!(f, ":{}", self.tag)?;
        }
        if !self.digest.is_empty() {
            write!(f, "@{}", self.digest)?;
        }
        Ok(())
    }
}

impl Image {
    /// Parses an image reference.
    pub(crate) fn parse(text: &str) -> Option<Image> {
        if text.is_empty() || text.chars().any(char::is_whitespace) {
            return None;
        }
        let (name, digest) = match text.split_once('@') {
            Some((n, d)) => {
                let (alg, hex) = d.split_once(':')?;
                if alg.is_empty() || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                (n, d.to_string())
            }
            None => (text, String::new()),
        };
        let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(i) => (
                &name[..last_slash + i],
                name[last_slash + i + 1..].to_string(),
            ),
            None => (name, String::new()),
        };
        if !tag.is_empty()
            && (tag.len() > 128
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)))
        {
            return None;
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => ("index.docker.io".to_string(), name.to_string()),
        };
        let repository = if registry == "index.docker.io" && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|c| {
                !c.is_empty()
                    && c.chars().all(|ch| {
                        ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch)
                    })
            });
        if !repo_ok {
            return None;
        }
        let tag = if tag.is_empty() && digest.is_empty() {
            "latest".to_string()
        } else {
            tag
        };
        Some(Image {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

overload!(img_new, |args| {
    let t = str_arg(args, 0, "image")?;
    Image::parse(t)
        .map(opaque)
        .ok_or_else(|| ferr("image", format!("could not parse image reference: {t}")))
});
overload!(img_is, |args| Ok(Value::Bool(
    Image::parse(str_arg(args, 0, "isImage")?).is_some()
)));
overload!(img_parse_reference, |args| {
    let t = str_arg(args, 0, "parseImageReference")?;
    let i =
        Image::parse(t).ok_or_else(|| ferr("parseImageReference", "invalid image reference"))?;
    Ok(super::super::map(vec![
        ("registry", s(&i.registry)),
        ("repository", s(&i.repository)),
        ("path", s(&i.repository)),
        ("tag", s(&i.tag)),
        ("digest", s(&i.digest)),
        ("reference", s(&i.to_string())),
    ]))
});

pub(super) fn this_image<'a>(
    args: &'a [Value],
    function: &str,
) -> Result<&'a Image, ExecutionError> {
    as_opaque::<Image>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not an image"))
}

overload!(img_registry, |args| Ok(s(
    &this_image(args, "registry")?.registry
)));
overload!(img_repository, |args| Ok(s(&this_image(
    args,
    "repository"
)?
.repository)));
overload!(img_identifier, |args| {
    let i = this_image(args, "identifier")?;
    Ok(s(if i.digest.is_empty() {
        &i.tag
    } else {
        &i.digest
    }))
});
overload!(img_tag, |args| Ok(s(&this_image(args, "tag")?.tag)));
overload!(img_digest, |args| Ok(
    s(&this_image(args, "digest")?.digest)
));
overload!(img_contains_digest, |args| Ok(Value::Bool(
    !this_image(args, "containsDigest")?.digest.is_empty()
)));
