//! The webhook CA shared by every replica, kept in a `kubernetes.io/tls`
//! Secret (as Kyverno keeps its CA in `kyverno-svc.kyverno.svc.kyverno-tls-ca`).
//! The first replica to start creates it; the others, and later restarts,
//! read it. So every replica's serving certificate is trusted by the one
//! `caBundle` any of them writes, and a restarted replica is trusted by the
//! webhook configuration it left behind.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::error::{Error, Result};
use crate::tls::CaMaterial;

/// Reads the CA from the Secret `namespace/name`, creating it when it does
/// not exist, and replacing it when what it holds is not a CA certificate
/// and its key (the webhook configurations then get the new `caBundle`).
/// Two replicas racing to create or replace it agree on the winner's.
///
/// # Errors
/// [`Error::ApiFailed`] naming the Secret and the operation; worth
/// retrying (the caller does, with backoff).
pub async fn shared_ca(client: &kube::Client, namespace: &str, name: &str) -> Result<CaMaterial> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |operation: &str, source: kube::Error| Error::ApiFailed {
        operation: format!("{operation} the webhook CA Secret {namespace}/{name}"),
        source,
    };
    // A lost race (409) is answered by reading the winner's; a few rounds
    // settle any interleaving of two replicas.
    for _ in 0..5 {
        let existing = match api.get_opt(name).await {
            Ok(s) => s,
            Err(e) => return Err(failed("reading", e)),
        };
        let fresh = CaMaterial::generate()?;
        let outcome = match existing {
            Some(secret) => match from_secret(&secret) {
                Ok(ca) => return Ok(ca),
                Err(why) => {
                    tracing::warn!(
                        "the webhook CA Secret {namespace}/{name} is not usable ({why}): replacing it"
                    );
                    let mut replaced = to_secret(namespace, name, &fresh);
                    replaced.metadata.resource_version = secret.metadata.resource_version;
                    api.replace(name, &PostParams::default(), &replaced).await
                }
            },
            None => {
                api.create(&PostParams::default(), &to_secret(namespace, name, &fresh))
                    .await
            }
        };
        match outcome {
            Ok(_) => {
                tracing::info!("created the webhook CA in Secret {namespace}/{name}");
                return Ok(fresh);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(failed("writing", e)),
        }
    }
    Err(failed(
        "writing",
        kube::Error::Api(Box::new(kube::core::Status::failure(
            "the Secret kept changing while it was written (5 conflicts)",
            "Conflict",
        ))),
    ))
}

fn to_secret(namespace: &str, name: &str, ca: &CaMaterial) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "leash".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(ca.cert_pem.as_bytes().to_vec()),
            ),
            (
                "tls.key".to_string(),
                ByteString(ca.key_pem.as_bytes().to_vec()),
            ),
        ])),
        ..Secret::default()
    }
}

fn from_secret(secret: &Secret) -> std::result::Result<CaMaterial, String> {
    let field = |key: &str| -> std::result::Result<String, String> {
        let data = secret.data.as_ref().and_then(|d| d.get(key));
        let bytes = match data {
            Some(b) => b.0.clone(),
            None => return Err(format!("no {key}")),
        };
        String::from_utf8(bytes).map_err(|_| format!("{key} is not PEM text"))
    };
    let ca = CaMaterial {
        cert_pem: field("tls.crt")?,
        key_pem: field("tls.key")?,
    };
    ca.validate()?;
    Ok(ca)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_round_trips_and_damage_is_named() {
        let ca = CaMaterial::generate().unwrap();
        let secret = to_secret("kyverno", "leash-webhook-ca", &ca);
        assert_eq!(from_secret(&secret).unwrap(), ca);

        let other = CaMaterial::generate().unwrap();
        let mut mixed = secret.clone();
        mixed.data.as_mut().unwrap().insert(
            "tls.key".into(),
            ByteString(other.key_pem.as_bytes().to_vec()),
        );
        assert_eq!(
            from_secret(&mixed).unwrap_err(),
            "tls.key is not the key of tls.crt"
        );
        let mut empty = secret;
        empty.data.as_mut().unwrap().remove("tls.crt");
        assert_eq!(from_secret(&empty).unwrap_err(), "no tls.crt");
    }
}
