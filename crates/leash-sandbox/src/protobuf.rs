//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's
//! imperative commands (`create configmap|secret|deployment|...`, `run`, `expose`)
//! send them: decoded with `k8s-pb`'s generated messages and turned into the JSON
//! the store keeps (answers stay JSON, which every client accepts).
//!
//! The body is the Kubernetes envelope: the 4 magic bytes `k8s\0`, then a
//! `runtime.Unknown` whose `typeMeta` names the kind and whose `raw` holds the
//! typed object ([`decode`]). Only the kinds in [`decode`]'s table are accepted;
//! within them, a field the conversion does not know is an error when it holds
//! anything but a zero value, never silently dropped (see [`convert`]).

mod convert;

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value};

use crate::status::ApiError;
use convert::ToJson;

/// The media type of protobuf bodies.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The envelope's magic prefix.
const MAGIC: &[u8; 4] = b"k8s\0";

/// The `(apiVersion, kind)` pairs a protobuf body may hold.
pub(crate) const KINDS: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("autoscaling/v1", "Scale"),
];

/// The body of a DELETE: `DeleteOptions`, which client-go's typed clients
/// send as protobuf (chainsaw deleting its test namespace), enveloped with
/// the client's group version (`v1`, `meta.k8s.io/v1`, ...).
///
/// # Errors
/// As [`decode`]; 415 for a body of another kind.
pub(crate) fn decode_delete_options(body: &[u8]) -> Result<Value, ApiError> {
    let (api_version, kind, raw) = open_envelope(body)?;
    if kind != "DeleteOptions" {
        return Err(unsupported(format!(
            "a DELETE's protobuf body must be DeleteOptions, not {kind:?}"
        )));
    }
    let object = typed::<k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions>(&raw)?;
    Ok(typed_object(kind, api_version, object))
}

fn unsupported(why: String) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - {why} (send application/json instead)"
        ),
    )
}

fn bad(why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to decode the protobuf request body: {why}"))
}

/// The JSON object an enveloped protobuf body holds.
///
/// # Errors
/// 400 if the envelope or the message does not decode; 415 for a kind outside
/// [`KINDS`], an encoded (`contentEncoding`) payload, or a non-zero field the
/// conversion does not cover.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let (api_version, kind, raw) = open_envelope(body)?;
    let object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => typed::<k8s_pb::api::core::v1::ConfigMap>(&raw),
        ("v1", "Secret") => typed::<k8s_pb::api::core::v1::Secret>(&raw),
        ("v1", "Namespace") => typed::<k8s_pb::api::core::v1::Namespace>(&raw),
        ("v1", "ServiceAccount") => typed::<k8s_pb::api::core::v1::ServiceAccount>(&raw),
        ("v1", "Service") => typed::<k8s_pb::api::core::v1::Service>(&raw),
        ("v1", "Pod") => typed::<k8s_pb::api::core::v1::Pod>(&raw),
        ("apps/v1", "Deployment") => typed::<k8s_pb::api::apps::v1::Deployment>(&raw),
        ("batch/v1", "Job") => typed::<k8s_pb::api::batch::v1::Job>(&raw),
        ("batch/v1", "CronJob") => typed::<k8s_pb::api::batch::v1::CronJob>(&raw),
        ("autoscaling/v1", "Scale") => typed::<k8s_pb::api::autoscaling::v1::Scale>(&raw),
        _ => {
            return Err(unsupported(format!(
                "protobuf is accepted for {} only, not {api_version:?} {kind:?}",
                KINDS
                    .iter()
                    .map(|(v, k)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }?;
    Ok(typed_object(kind, api_version, object))
}

/// The envelope's `(apiVersion, kind, raw message)`.
fn open_envelope(body: &[u8]) -> Result<(String, String, Vec<u8>), ApiError> {
    let payload = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s\\0 envelope prefix"))?;
    let unknown = Unknown::decode(payload).map_err(bad)?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(unsupported(
            "encoded protobuf payloads are not accepted".into(),
        ));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok((
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    ))
}

/// A converted message with `kind` and `apiVersion` first, as Go's JSON
/// encoding writes them.
fn typed_object(kind: String, api_version: String, object: Value) -> Value {
    let Value::Object(fields) = object else {
        unreachable!("messages convert to JSON objects");
    };
    let mut out = Map::with_capacity(fields.len() + 2);
    out.insert("kind".into(), Value::String(kind));
    out.insert("apiVersion".into(), Value::String(api_version));
    out.extend(fields);
    Value::Object(out)
}

fn typed<M: Message + Default + ToJson>(raw: &[u8]) -> Result<Value, ApiError> {
    let message = M::decode(raw).map_err(bad)?;
    message
        .to_json()
        .map_err(|field| unsupported(format!("the protobuf field {field} is not supported")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    /// What client-go's protobuf serializer writes: the envelope around `message`.
    fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(message.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    /// A DELETE's protobuf `DeleteOptions` (client-go's typed clients:
    /// chainsaw deleting its test namespace) reads as its JSON; another
    /// kind in a DELETE's body is refused with 415.
    #[test]
    fn delete_options_decode() {
        let options = meta::DeleteOptions {
            propagation_policy: Some("Background".into()),
            grace_period_seconds: Some(0),
            preconditions: Some(meta::Preconditions {
                uid: Some("u-1".into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let got = decode_delete_options(&envelope("v1", "DeleteOptions", &options)).unwrap();
        assert_eq!(
            got,
            json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": "u-1"}, "propagationPolicy": "Background",
                "gracePeriodSeconds": 0})
        );
        let cm = core::ConfigMap::default();
        let e = decode_delete_options(&envelope("v1", "ConfigMap", &cm)).unwrap_err();
        assert_eq!(e.code(), 415, "{e:?}");
    }

    /// ObjectMeta as Go's generated marshaller writes it: every non-pointer
    /// field present, zero or not.
    fn meta(name: &str) -> meta::ObjectMeta {
        meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }
    }

    #[test]
    fn configmap_with_go_zero_fields_becomes_plain_json() {
        let cm = core::ConfigMap {
            metadata: Some(meta("settings")),
            data: [("a".to_string(), "b".to_string())].into(),
            binary_data: [("bin".to_string(), vec![0u8, 1, 2])].into(),
            immutable: None,
        };
        let v = decode(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "settings"},
                   "data": {"a": "b"}, "binaryData": {"bin": "AAEC"}})
        );
    }

    #[test]
    fn deployment_keeps_pointer_zeros_and_int_or_string() {
        let template = core::PodTemplateSpec {
            metadata: Some(meta::ObjectMeta {
                labels: [("app".to_string(), "web".to_string())].into(),
                ..meta("")
            }),
            spec: Some(core::PodSpec {
                containers: vec![core::Container {
                    name: Some("nginx".into()),
                    image: Some("nginx:1.27".into()),
                    resources: Some(Default::default()),
                    ports: vec![core::ContainerPort {
                        container_port: Some(80),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let d = apps::Deployment {
            metadata: Some(meta("web")),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(0),
                selector: Some(meta::LabelSelector {
                    match_labels: [("app".to_string(), "web".to_string())].into(),
                    match_expressions: vec![],
                }),
                template: Some(template),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: None,
                    rolling_update: Some(apps::RollingUpdateDeployment {
                        max_unavailable: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("25%".into()),
                        }),
                        max_surge: Some(IntOrString {
                            r#type: Some(0),
                            int_val: Some(1),
                            str_val: Some(String::new()),
                        }),
                    }),
                }),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let v = decode(&envelope("apps/v1", "Deployment", &d)).unwrap();
        assert_eq!(v["spec"]["replicas"], 0, "a pointer field keeps its zero");
        assert_eq!(v["spec"]["selector"]["matchLabels"]["app"], "web");
        let c = &v["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c,
            &json!({"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}], "resources": {}})
        );
        assert_eq!(
            v["spec"]["strategy"]["rollingUpdate"],
            json!({"maxUnavailable": "25%", "maxSurge": 1})
        );
        assert_eq!(v["status"], json!({}));
        assert_eq!(v["metadata"], json!({"name": "web"}));
    }

    #[test]
    fn service_ports_and_selector() {
        let svc = core::Service {
            metadata: Some(meta("web")),
            spec: Some(core::ServiceSpec {
                ports: vec![core::ServicePort {
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(8080),
                        str_val: Some(String::new()),
                    }),
                    ..Default::default()
                }],
                selector: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            status: Some(core::ServiceStatus {
                load_balancer: Some(Default::default()),
                conditions: vec![],
            }),
        };
        let v = decode(&envelope("v1", "Service", &svc)).unwrap();
        assert_eq!(
            v["spec"],
            json!({"ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}], "selector": {"app": "web"}})
        );
        assert_eq!(v["status"], json!({"loadBalancer": {}}));
    }

    #[test]
    fn unknown_kinds_and_unconverted_fields_are_refused_not_dropped() {
        let cm = core::ConfigMap::default();
        let e = decode(&envelope("v1", "Endpoints", &cm)).unwrap_err();
        assert_eq!(e.code(), 415);
        // A field the conversion does not cover, set: refused, naming it.
        let pod = core::Pod {
            metadata: Some(meta("p")),
            spec: Some(core::PodSpec {
                affinity: Some(core::Affinity {
                    node_affinity: Some(Default::default()),
                    ..Default::default()
                }),
                host_aliases: vec![core::HostAlias {
                    ip: Some("10.0.0.1".into()),
                    hostnames: vec!["a".into()],
                }],
                ..Default::default()
            }),
            status: None,
        };
        let e = decode(&envelope("v1", "Pod", &pod)).unwrap_err();
        assert_eq!(e.code(), 415, "{e:?}");
        assert!(
            e.to_status()["message"]
                .as_str()
                .unwrap()
                .contains("PodSpec"),
            "{e:?}"
        );
        // The same field holding only zeros (as Go writes empty structs) is fine.
        let pod = core::Pod {
            metadata: Some(meta("p")),
            spec: Some(core::PodSpec {
                affinity: Some(core::Affinity {
                    node_affinity: Some(Default::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        };
        assert!(decode(&envelope("v1", "Pod", &pod)).is_ok());
        // Not an envelope at all.
        assert_eq!(decode(b"{}").unwrap_err().code(), 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code(), 400);
    }
}
