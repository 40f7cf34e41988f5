//! The `images` variable: every container image of a Pod (or of a pod
//! controller's template) parsed into registry, path, name, tag and digest,
//! keyed by container name, as Kyverno builds it.

use serde_json::{Map, Value, json};

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// `docker.io` when the reference names none.
    pub registry: String,
    /// Repository path without the registry (`library/nginx` is `nginx`).
    pub path: String,
    /// Last path component.
    pub name: String,
    /// Tag (`latest` when neither tag nor digest is given).
    pub tag: String,
    /// Digest (`sha256:...`), if any.
    pub digest: String,
}

impl ImageRef {
    /// Parses `[registry/]path[:tag][@digest]`.
    pub fn parse(image: &str) -> Option<ImageRef> {
        let image = image.trim();
        if image.is_empty() {
            return None;
        }
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, d.to_string()),
            None => (image, String::new()),
        };
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (rest, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                &rest[..last_slash + i],
                rest[last_slash + i + 1..].to_string(),
            ),
            None => (rest, String::new()),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((first, p)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_string(), p.to_string())
            }
            _ => ("docker.io".to_string(), rest.to_string()),
        };
        if path.is_empty() {
            return None;
        }
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        let tag = if tag.is_empty() && digest.is_empty() {
            "latest".to_string()
        } else {
            tag
        };
        Some(ImageRef {
            registry,
            path,
            name,
            tag,
            digest,
        })
    }

    /// `registry/path[:tag][@digest]`.
    pub fn reference(&self) -> String {
        let mut s = format!("{}/{}", self.registry, self.path);
        if !self.tag.is_empty() {
            s.push(':');
            s.push_str(&self.tag);
        }
        if !self.digest.is_empty() {
            s.push('@');
            s.push_str(&self.digest);
        }
        s
    }

    /// Kyverno's `ImageInfo.String()`: `registry/path@digest` when the
    /// reference names a digest (the tag left out), else
    /// `registry/path:tag`. What `verifyImages` matches its references
    /// against and names in its messages.
    pub fn kyverno_string(&self) -> String {
        if self.digest.is_empty() {
            format!("{}/{}:{}", self.registry, self.path, self.tag)
        } else {
            format!("{}/{}@{}", self.registry, self.path, self.digest)
        }
    }

    /// Kyverno's `ImageInfo` JSON, with `jsonPointer` the image's place
    /// in the object; empty `tag` and `digest` left out (`omitempty`).
    fn to_json(&self, pointer: String) -> Value {
        let mut m = Map::new();
        m.insert("registry".into(), json!(self.registry));
        m.insert("path".into(), json!(self.path));
        m.insert("name".into(), json!(self.name));
        if !self.tag.is_empty() {
            m.insert("tag".into(), json!(self.tag));
        }
        if !self.digest.is_empty() {
            m.insert("digest".into(), json!(self.digest));
        }
        m.insert("jsonPointer".into(), json!(pointer));
        m.insert("reference".into(), json!(self.reference()));
        m.insert(
            "referenceWithTag".into(),
            json!(format!("{}/{}:{}", self.registry, self.path, self.tag)),
        );
        Value::Object(m)
    }
}

/// Where a Pod, a pod controller or a CronJob keeps its pod spec, as a
/// JSON pointer.
fn pod_spec_pointer(object: &Value) -> Option<&'static str> {
    match object["kind"].as_str()? {
        "Pod" => Some("/spec"),
        "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
        "Deployment"
        | "DaemonSet"
        | "StatefulSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => Some("/spec/template/spec"),
        _ => None,
    }
}

/// The pod spec of a Pod, a pod controller or a CronJob.
pub(crate) fn pod_spec(object: &Value) -> Option<&Value> {
    object
        .pointer(pod_spec_pointer(object)?)
        .filter(|s| s.is_object())
}

/// The `images` variable of an object (null when it has no pod spec).
pub(crate) fn of_object(object: &Value) -> Value {
    let (Some(spec), Some(at)) = (pod_spec(object), pod_spec_pointer(object)) else {
        return Value::Null;
    };
    let mut out = Map::new();
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(list) = spec[field].as_array() else {
            continue;
        };
        let mut m = Map::new();
        for (i, c) in list.iter().enumerate() {
            let (Some(name), Some(image)) = (c["name"].as_str(), c["image"].as_str()) else {
                continue;
            };
            if let Some(r) = ImageRef::parse(image) {
                let pointer = format!("{at}/{field}/{i}/image");
                m.insert(name.to_string(), r.to_json(pointer));
            }
        }
        if !m.is_empty() {
            out.insert(field.to_string(), Value::Object(m));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_table() {
        for (image, registry, path, tag, digest) in [
            ("nginx", "docker.io", "nginx", "latest", ""),
            ("nginx:1.2", "docker.io", "nginx", "1.2", ""),
            ("library/nginx:1.2", "docker.io", "library/nginx", "1.2", ""),
            ("ghcr.io/org/app:v1", "ghcr.io", "org/app", "v1", ""),
            ("localhost:5000/app", "localhost:5000", "app", "latest", ""),
            ("reg.io/app@sha256:abc", "reg.io", "app", "", "sha256:abc"),
            (
                "reg.io/app:1@sha256:abc",
                "reg.io",
                "app",
                "1",
                "sha256:abc",
            ),
        ] {
            let r = ImageRef::parse(image).unwrap();
            assert_eq!(
                (
                    r.registry.as_str(),
                    r.path.as_str(),
                    r.tag.as_str(),
                    r.digest.as_str()
                ),
                (registry, path, tag, digest),
                "{image}"
            );
        }
        assert_eq!(ImageRef::parse(""), None);
    }

    /// The `images` variable as Kyverno v1.19.1's CLI gives it: each
    /// image's `jsonPointer`, no `tag` for a reference by digest alone.
    #[test]
    fn images_variable_as_kyverno_gives_it() {
        let pod = json!({"kind": "Pod", "spec": {
            "initContainers": [{"name": "i", "image": "busybox@sha256:11"}],
            "containers": [{"name": "a", "image": "ghcr.io/org/nginx:1.2"},
                           {"name": "b", "image": "localhost:5000/x"}]}});
        let images = of_object(&pod);
        assert_eq!(
            images["containers"]["b"],
            json!({"registry": "localhost:5000", "path": "x", "name": "x", "tag": "latest",
                "jsonPointer": "/spec/containers/1/image",
                "reference": "localhost:5000/x:latest",
                "referenceWithTag": "localhost:5000/x:latest"})
        );
        assert_eq!(
            images["initContainers"]["i"],
            json!({"registry": "docker.io", "path": "busybox", "name": "busybox",
                "digest": "sha256:11", "jsonPointer": "/spec/initContainers/0/image",
                "reference": "docker.io/busybox@sha256:11",
                "referenceWithTag": "docker.io/busybox:"})
        );
        let cronjob = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}}});
        assert_eq!(
            of_object(&cronjob)["containers"]["c"]["jsonPointer"],
            "/spec/jobTemplate/spec/template/spec/containers/0/image"
        );
    }
}
