//! `k8s-pb` messages to the JSON Go's encoding/json writes for the same object.
//!
//! Each converted message lists its fields with their JSON names ([`to_json!`]).
//! Go's generated marshaller writes every non-pointer field, zero or not, so a
//! zero scalar is left out (as `omitempty` would), except for fields that are
//! pointers in Go (the `keep` list: `replicas: 0` means something). Message
//! fields are written even when empty (`"status": {}`), as Go writes structs.
//!
//! # Invariants
//! 1. Nothing is dropped silently: after the listed fields are taken out of a
//!    message, what is left is encoded again and must be all zeros on the wire
//!    ([`rest_is_zero`]); otherwise the conversion fails, naming the message.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::autoscaling::v1 as autoscaling;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value};

/// The message whose unconverted fields were not zero.
pub(crate) type Unconverted = &'static str;

/// A message that converts to a JSON object.
pub(crate) trait ToJson {
    fn to_json(self) -> Result<Value, Unconverted>;
}

/// One field's value: `None` leaves the field out.
trait Field {
    fn field(self, keep_zero: bool) -> Result<Option<Value>, Unconverted>;
}

impl Field for Option<String> {
    fn field(self, keep_zero: bool) -> Result<Option<Value>, Unconverted> {
        Ok(self
            .filter(|s| keep_zero || !s.is_empty())
            .map(Value::String))
    }
}

impl Field for Option<i32> {
    fn field(self, keep_zero: bool) -> Result<Option<Value>, Unconverted> {
        Ok(self.filter(|n| keep_zero || *n != 0).map(Value::from))
    }
}

impl Field for Option<i64> {
    fn field(self, keep_zero: bool) -> Result<Option<Value>, Unconverted> {
        Ok(self.filter(|n| keep_zero || *n != 0).map(Value::from))
    }
}

impl Field for Option<bool> {
    fn field(self, keep_zero: bool) -> Result<Option<Value>, Unconverted> {
        Ok(self.filter(|b| keep_zero || *b).map(Value::Bool))
    }
}

impl Field for Vec<String> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok((!self.is_empty()).then(|| self.into_iter().map(Value::String).collect()))
    }
}

impl Field for Vec<i64> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok((!self.is_empty()).then(|| self.into_iter().map(Value::from).collect()))
    }
}

impl<T: ToJson> Field for Vec<T> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        if self.is_empty() {
            return Ok(None);
        }
        self.into_iter()
            .map(ToJson::to_json)
            .collect::<Result<Vec<_>, _>>()
            .map(|v| Some(Value::Array(v)))
    }
}

impl<T: ToJson> Field for Option<T> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        self.map(ToJson::to_json).transpose()
    }
}

fn map_field<V>(map: BTreeMap<String, V>, value: impl Fn(V) -> Value) -> Option<Value> {
    (!map.is_empty()).then(|| Value::Object(map.into_iter().map(|(k, v)| (k, value(v))).collect()))
}

impl Field for BTreeMap<String, String> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok(map_field(self, Value::String))
    }
}

impl Field for BTreeMap<String, Vec<u8>> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok(map_field(self, |b| Value::String(STANDARD.encode(b))))
    }
}

impl Field for BTreeMap<String, Quantity> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok(map_field(self, |q| {
            Value::String(q.string.unwrap_or_default())
        }))
    }
}

/// `metav1.Time`: RFC 3339 in seconds; the zero time is left out (Go writes
/// `null`, which the store fills in or ignores).
impl Field for Option<meta::Time> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        let Some(t) = self else { return Ok(None) };
        let seconds = t.seconds.unwrap_or(0);
        if seconds == 0 && t.nanos.unwrap_or(0) == 0 {
            return Ok(None);
        }
        let at = if seconds >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
        };
        Ok(Some(Value::String(
            humantime::format_rfc3339_seconds(at).to_string(),
        )))
    }
}

/// `intstr.IntOrString`: a number (type 0) or a string (type 1).
impl Field for Option<IntOrString> {
    fn field(self, _: bool) -> Result<Option<Value>, Unconverted> {
        Ok(self.map(|v| match v.r#type {
            Some(1) => Value::String(v.str_val.unwrap_or_default()),
            _ => Value::from(v.int_val.unwrap_or(0)),
        }))
    }
}

fn put(
    object: &mut Map<String, Value>,
    name: &str,
    value: impl Field,
    keep_zero: bool,
) -> Result<(), Unconverted> {
    if let Some(v) = value.field(keep_zero)? {
        object.insert(name.to_string(), v);
    }
    Ok(())
}

/// Checks that the fields left in `rest` (the ones not converted) are zero.
fn rest_is_zero<M: Message>(rest: &M, name: Unconverted) -> Result<(), Unconverted> {
    if wire_is_zero(&rest.encode_to_vec(), 32) {
        Ok(())
    } else {
        Err(name)
    }
}

/// Whether protobuf wire data holds only zero values: varints 0, fixed fields 0,
/// and length-delimited fields that are empty or (read as a nested message) zero
/// themselves. A non-empty string or bytes field is never zero (its text does
/// not read as zero-valued fields, and where it could, it is refused at `depth`).
fn wire_is_zero(mut buf: &[u8], depth: u8) -> bool {
    use prost::encoding::decode_varint;
    while !buf.is_empty() {
        let Ok(key) = decode_varint(&mut buf) else {
            return false;
        };
        match key & 7 {
            0 => {
                if decode_varint(&mut buf) != Ok(0) {
                    return false;
                }
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                if buf.len() < n || buf[..n].iter().any(|b| *b != 0) {
                    return false;
                }
                buf = &buf[n..];
            }
            2 => {
                let Ok(len) = decode_varint(&mut buf) else {
                    return false;
                };
                let Ok(len) = usize::try_from(len) else {
                    return false;
                };
                if len > buf.len() {
                    return false;
                }
                let (inner, rest) = buf.split_at(len);
                if !inner.is_empty() && (depth == 0 || !wire_is_zero(inner, depth - 1)) {
                    return false;
                }
                buf = rest;
            }
            _ => return false,
        }
    }
    true
}

/// Implements [`ToJson`] for a message: `"jsonName" => rust_field` pairs in
/// Go's order, then after `keep:` the fields that are pointers in Go (a zero
/// is written), then after `flatten:` embedded structs whose fields Go's JSON
/// inlines.
macro_rules! to_json {
    ($ty:path { $($name:literal => $field:ident),* $(,)?
        $(; keep: $($kname:literal => $kfield:ident),* $(,)?)?
        $(; flatten: $($ffield:ident),* $(,)?)? }) => {
        impl ToJson for $ty {
            // A message with no listed field changes neither.
            #[allow(unused_mut)]
            fn to_json(mut self) -> Result<Value, Unconverted> {
                let mut object = Map::new();
                $( put(&mut object, $name, std::mem::take(&mut self.$field), false)?; )*
                $($( put(&mut object, $kname, std::mem::take(&mut self.$kfield), true)?; )*)?
                $($(
                    if let Some(Value::Object(inner)) =
                        std::mem::take(&mut self.$ffield).field(false)?
                    {
                        object.extend(inner);
                    }
                )*)?
                rest_is_zero(&self, stringify!($ty))?;
                Ok(Value::Object(object))
            }
        }
    };
}

// meta.k8s.io/v1
to_json!(meta::ObjectMeta {
    "name" => name, "generateName" => generate_name, "namespace" => namespace,
    "selfLink" => self_link, "uid" => uid, "resourceVersion" => resource_version,
    "generation" => generation, "creationTimestamp" => creation_timestamp,
    "deletionTimestamp" => deletion_timestamp, "labels" => labels,
    "annotations" => annotations, "ownerReferences" => owner_references,
    "finalizers" => finalizers;
    keep: "deletionGracePeriodSeconds" => deletion_grace_period_seconds,
});
to_json!(meta::OwnerReference {
    "apiVersion" => api_version, "kind" => kind, "name" => name, "uid" => uid;
    keep: "controller" => controller, "blockOwnerDeletion" => block_owner_deletion,
});
to_json!(meta::DeleteOptions {
    "preconditions" => preconditions, "orphanDependents" => orphan_dependents,
    "propagationPolicy" => propagation_policy, "dryRun" => dry_run;
    keep: "gracePeriodSeconds" => grace_period_seconds,
    "ignoreStoreReadErrorWithClusterBreakingPotential" =>
        ignore_store_read_error_with_cluster_breaking_potential,
});
to_json!(meta::Preconditions { "uid" => uid, "resourceVersion" => resource_version });
to_json!(meta::LabelSelector {
    "matchLabels" => match_labels, "matchExpressions" => match_expressions,
});
to_json!(meta::LabelSelectorRequirement {
    "key" => key, "operator" => operator, "values" => values,
});

// v1
to_json!(core::ConfigMap {
    "metadata" => metadata, "data" => data, "binaryData" => binary_data;
    keep: "immutable" => immutable,
});
to_json!(core::Secret {
    "metadata" => metadata, "data" => data, "stringData" => string_data, "type" => r#type;
    keep: "immutable" => immutable,
});
to_json!(core::Namespace { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(core::NamespaceSpec { "finalizers" => finalizers });
to_json!(core::NamespaceStatus { "phase" => phase });
to_json!(core::ServiceAccount {
    "metadata" => metadata, "secrets" => secrets, "imagePullSecrets" => image_pull_secrets;
    keep: "automountServiceAccountToken" => automount_service_account_token,
});
to_json!(core::ObjectReference {
    "kind" => kind, "namespace" => namespace, "name" => name, "uid" => uid,
    "apiVersion" => api_version, "resourceVersion" => resource_version,
    "fieldPath" => field_path,
});
to_json!(core::LocalObjectReference { "name" => name });
to_json!(core::Service { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(core::ServiceSpec {
    "ports" => ports, "selector" => selector, "clusterIP" => cluster_ip,
    "clusterIPs" => cluster_ips, "type" => r#type, "externalIPs" => external_ips,
    "sessionAffinity" => session_affinity, "loadBalancerIP" => load_balancer_ip,
    "loadBalancerSourceRanges" => load_balancer_source_ranges,
    "externalName" => external_name, "externalTrafficPolicy" => external_traffic_policy,
    "healthCheckNodePort" => health_check_node_port,
    "publishNotReadyAddresses" => publish_not_ready_addresses,
    "ipFamilies" => ip_families;
    keep: "ipFamilyPolicy" => ip_family_policy,
    "allocateLoadBalancerNodePorts" => allocate_load_balancer_node_ports,
    "loadBalancerClass" => load_balancer_class,
    "internalTrafficPolicy" => internal_traffic_policy,
    "trafficDistribution" => traffic_distribution,
});
to_json!(core::ServicePort {
    "name" => name, "protocol" => protocol, "port" => port,
    "targetPort" => target_port, "nodePort" => node_port;
    keep: "appProtocol" => app_protocol,
});
to_json!(core::ServiceStatus { "loadBalancer" => load_balancer });
to_json!(core::LoadBalancerStatus {});
to_json!(core::Pod { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(core::PodTemplateSpec { "metadata" => metadata, "spec" => spec });
to_json!(core::PodSpec {
    "initContainers" => init_containers, "containers" => containers,
    "restartPolicy" => restart_policy, "dnsPolicy" => dns_policy,
    "nodeSelector" => node_selector, "serviceAccountName" => service_account_name,
    "serviceAccount" => service_account, "nodeName" => node_name,
    "hostNetwork" => host_network, "hostPID" => host_pid, "hostIPC" => host_ipc,
    "securityContext" => security_context, "imagePullSecrets" => image_pull_secrets,
    "hostname" => hostname, "subdomain" => subdomain, "schedulerName" => scheduler_name,
    "tolerations" => tolerations, "priorityClassName" => priority_class_name;
    keep: "terminationGracePeriodSeconds" => termination_grace_period_seconds,
    "activeDeadlineSeconds" => active_deadline_seconds,
    "automountServiceAccountToken" => automount_service_account_token,
    "shareProcessNamespace" => share_process_namespace, "priority" => priority,
    "runtimeClassName" => runtime_class_name, "enableServiceLinks" => enable_service_links,
    "preemptionPolicy" => preemption_policy,
});
to_json!(core::PodSecurityContext {
    "supplementalGroups" => supplemental_groups;
    keep: "runAsUser" => run_as_user, "runAsGroup" => run_as_group,
    "runAsNonRoot" => run_as_non_root, "fsGroup" => fs_group,
});
to_json!(core::Toleration {
    "key" => key, "operator" => operator, "value" => value, "effect" => effect;
    keep: "tolerationSeconds" => toleration_seconds,
});
to_json!(core::PodStatus {
    "phase" => phase, "message" => message, "reason" => reason,
    "nominatedNodeName" => nominated_node_name, "hostIP" => host_ip,
    "podIP" => pod_ip, "startTime" => start_time, "qosClass" => qos_class,
});
to_json!(core::Container {
    "name" => name, "image" => image, "command" => command, "args" => args,
    "workingDir" => working_dir, "ports" => ports, "env" => env,
    "resources" => resources, "volumeMounts" => volume_mounts,
    "terminationMessagePath" => termination_message_path,
    "terminationMessagePolicy" => termination_message_policy,
    "imagePullPolicy" => image_pull_policy, "securityContext" => security_context,
    "stdin" => stdin, "stdinOnce" => stdin_once, "tty" => tty;
    keep: "restartPolicy" => restart_policy,
});
to_json!(core::ContainerPort {
    "name" => name, "hostPort" => host_port, "containerPort" => container_port,
    "protocol" => protocol, "hostIP" => host_ip,
});
to_json!(core::EnvVar { "name" => name, "value" => value });
to_json!(core::ResourceRequirements { "limits" => limits, "requests" => requests });
to_json!(core::VolumeMount {
    "name" => name, "readOnly" => read_only, "mountPath" => mount_path,
    "subPath" => sub_path, "subPathExpr" => sub_path_expr;
    keep: "recursiveReadOnly" => recursive_read_only,
    "mountPropagation" => mount_propagation,
});
to_json!(core::SecurityContext {
    ; keep: "privileged" => privileged, "runAsUser" => run_as_user,
    "runAsGroup" => run_as_group, "runAsNonRoot" => run_as_non_root,
    "readOnlyRootFilesystem" => read_only_root_filesystem,
    "allowPrivilegeEscalation" => allow_privilege_escalation,
});

// apps/v1
to_json!(apps::Deployment { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(apps::DeploymentSpec {
    "selector" => selector, "template" => template, "strategy" => strategy,
    "minReadySeconds" => min_ready_seconds, "paused" => paused;
    keep: "replicas" => replicas, "revisionHistoryLimit" => revision_history_limit,
    "progressDeadlineSeconds" => progress_deadline_seconds,
});
to_json!(apps::DeploymentStrategy { "type" => r#type, "rollingUpdate" => rolling_update });
to_json!(apps::RollingUpdateDeployment {
    "maxUnavailable" => max_unavailable, "maxSurge" => max_surge,
});
to_json!(apps::DeploymentStatus {
    "observedGeneration" => observed_generation, "replicas" => replicas,
    "updatedReplicas" => updated_replicas, "readyReplicas" => ready_replicas,
    "availableReplicas" => available_replicas,
    "unavailableReplicas" => unavailable_replicas,
    "collisionCount" => collision_count;
    keep: "terminatingReplicas" => terminating_replicas,
});

// batch/v1
to_json!(batch::Job { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(batch::JobSpec {
    "selector" => selector, "template" => template;
    keep: "parallelism" => parallelism, "completions" => completions,
    "activeDeadlineSeconds" => active_deadline_seconds, "backoffLimit" => backoff_limit,
    "backoffLimitPerIndex" => backoff_limit_per_index,
    "maxFailedIndexes" => max_failed_indexes, "manualSelector" => manual_selector,
    "ttlSecondsAfterFinished" => ttl_seconds_after_finished,
    "completionMode" => completion_mode, "suspend" => suspend,
    "podReplacementPolicy" => pod_replacement_policy, "managedBy" => managed_by,
});
to_json!(batch::JobStatus {
    "startTime" => start_time, "completionTime" => completion_time,
    "active" => active, "succeeded" => succeeded, "failed" => failed;
    keep: "terminating" => terminating, "ready" => ready,
});
to_json!(batch::JobTemplateSpec { "metadata" => metadata, "spec" => spec });
to_json!(batch::CronJob { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(batch::CronJobSpec {
    "schedule" => schedule, "concurrencyPolicy" => concurrency_policy,
    "jobTemplate" => job_template;
    keep: "timeZone" => time_zone, "startingDeadlineSeconds" => starting_deadline_seconds,
    "suspend" => suspend, "successfulJobsHistoryLimit" => successful_jobs_history_limit,
    "failedJobsHistoryLimit" => failed_jobs_history_limit,
});
to_json!(batch::CronJobStatus {
    "active" => active, "lastScheduleTime" => last_schedule_time,
    "lastSuccessfulTime" => last_successful_time,
});

// autoscaling/v1
to_json!(autoscaling::Scale { "metadata" => metadata, "spec" => spec, "status" => status });
to_json!(autoscaling::ScaleSpec {; keep: "replicas" => replicas });
to_json!(autoscaling::ScaleStatus {
    "selector" => selector;
    keep: "replicas" => replicas,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_wire_data() {
        assert!(wire_is_zero(&[], 4));
        // field 1 varint 0; field 2 empty; field 3 holding field 1 varint 0
        assert!(wire_is_zero(
            &[0x08, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x08, 0x00],
            4
        ));
        assert!(!wire_is_zero(&[0x08, 0x01], 4));
        // field 2 holding the text "hi": not a zero message
        assert!(!wire_is_zero(&[0x12, 0x02, b'h', b'i'], 4));
        // truncated
        assert!(!wire_is_zero(&[0x12, 0x05, 0x00], 4));
    }
}
