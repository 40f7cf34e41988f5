//! Registry credentials, as Kyverno takes them: Docker config JSON
//! (`{"auths": {"REGISTRY": {"auth": "base64(user:password)"}}}`, or
//! `username`/`password`), from `kubernetes.io/dockerconfigjson` secrets
//! (`leash serve --image-pull-secrets`, Kyverno's `--imagePullSecrets`) or a
//! Docker `config.json` (the CLI, as go-containerregistry's default
//! keychain reads it). A registry without credentials is read anonymously.

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

/// Username and password by registry host (`host[:port]`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    auths: Vec<(String, String, String)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("Credentials")
            .field(
                "registries",
                &self.auths.iter().map(|(h, _, _)| h).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The host a Docker config key or a reference's registry names: no
/// scheme, no path; Docker Hub's aliases as one.
fn host(key: &str) -> String {
    let key = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let key = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match key.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "index.docker.io".to_string(),
        _ => key,
    }
}

impl Credentials {
    /// The credentials of a Docker config JSON; the error names the
    /// registry entry that cannot be read.
    pub fn from_docker_config(json: &[u8]) -> Result<Credentials, String> {
        let doc: Value =
            serde_json::from_slice(json).map_err(|e| format!("not a Docker config (JSON): {e}"))?;
        let mut out = Credentials::default();
        let Some(auths) = doc["auths"].as_object() else {
            return Ok(out);
        };
        for (key, entry) in auths {
            let (user, password) = match (entry["username"].as_str(), entry["password"].as_str()) {
                (Some(u), Some(p)) => (u.to_string(), p.to_string()),
                _ => {
                    let Some(auth) = entry["auth"].as_str() else {
                        // An entry with neither (a credential helper's):
                        // nothing to use here.
                        continue;
                    };
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|e| format!("auths.{key}.auth is not base64: {e}"))?;
                    let text = String::from_utf8(raw)
                        .map_err(|_| format!("auths.{key}.auth is not UTF-8"))?;
                    let (u, p) = text
                        .split_once(':')
                        .ok_or_else(|| format!("auths.{key}.auth is not user:password"))?;
                    (u.to_string(), p.to_string())
                }
            };
            out.auths.push((host(key), user, password));
        }
        Ok(out)
    }

    /// These credentials and `other`'s; for a registry both name, these.
    pub fn merge(mut self, other: Credentials) -> Credentials {
        for entry in other.auths {
            if !self.auths.iter().any(|(h, _, _)| *h == entry.0) {
                self.auths.push(entry);
            }
        }
        self
    }

    /// Whether any registry has credentials.
    pub fn is_empty(&self) -> bool {
        self.auths.is_empty()
    }

    /// The registries with credentials.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.auths.iter().map(|(h, _, _)| h.as_str())
    }

    /// How to authenticate to `registry` (a reference's registry).
    pub(crate) fn auth_for(&self, registry: &str) -> RegistryAuth {
        let want = host(registry);
        match self.auths.iter().find(|(h, _, _)| *h == want) {
            Some((_, user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs_are_read_as_docker_reads_them() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:with-colon");
        let json = serde_json::json!({"auths": {
            "https://index.docker.io/v1/": {"auth": auth},
            "127.0.0.1:5000": {"username": "bob", "password": "pw"},
            "helper.example": {},
        }});
        let c = Credentials::from_docker_config(json.to_string().as_bytes()).unwrap();
        assert_eq!(
            c.auth_for("docker.io"),
            RegistryAuth::Basic("alice".into(), "s3cret:with-colon".into())
        );
        assert_eq!(
            c.auth_for("127.0.0.1:5000"),
            RegistryAuth::Basic("bob".into(), "pw".into())
        );
        assert_eq!(c.auth_for("ghcr.io"), RegistryAuth::Anonymous);
        assert!(!format!("{c:?}").contains("pw"), "{c:?}");
        let bad = serde_json::json!({"auths": {"r.io": {"auth": "***"}}});
        let err = Credentials::from_docker_config(bad.to_string().as_bytes()).unwrap_err();
        assert!(err.contains("auths.r.io.auth"), "{err}");
        assert!(Credentials::from_docker_config(b"nope").is_err());
        let merged = c.clone().merge(
            Credentials::from_docker_config(
                serde_json::json!({"auths": {"127.0.0.1:5000": {"username": "x", "password": "y"},
                    "q.io": {"username": "q", "password": "q"}}})
                .to_string()
                .as_bytes(),
            )
            .unwrap(),
        );
        assert_eq!(
            merged.auth_for("127.0.0.1:5000"),
            RegistryAuth::Basic("bob".into(), "pw".into())
        );
        assert_eq!(
            merged.auth_for("q.io"),
            RegistryAuth::Basic("q".into(), "q".into())
        );
    }
}
