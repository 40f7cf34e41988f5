//! Evaluation results: data, not log lines. The CLI, the reports and the
//! webhook all render the same values.

use std::fmt;
use std::sync::Arc;

/// The outcome of one rule (or one ValidatingPolicy) on one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// The resource satisfies the rule.
    Pass,
    /// The resource violates the rule.
    Fail,
    /// A failure reported as a warning (Audit with `--audit-warn`, or a
    /// ValidatingPolicy `Warn` action).
    Warn,
    /// The rule could not be evaluated (bad expression, missing data).
    Error,
    /// The rule does not apply (preconditions, conditional anchors, exceptions).
    Skip,
}

impl Status {
    /// The lower-case name Kyverno's reports and tests use.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Warn => "warn",
            Status::Error => "error",
            Status::Skip => "skip",
        }
    }

    /// Parses a report/test result name (`pass`, `fail`, ...).
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "pass" => Status::Pass,
            "fail" => Status::Fail,
            "warn" => Status::Warn,
            "error" => Status::Error,
            "skip" => Status::Skip,
            _ => return None,
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which engine produced a result (a report's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A `kyverno.io` ClusterPolicy / Policy.
    Kyverno,
    /// A `policies.kyverno.io` ValidatingPolicy / NamespacedValidatingPolicy.
    ValidatingPolicy,
    /// A `policies.kyverno.io` ImageValidatingPolicy /
    /// NamespacedImageValidatingPolicy.
    ImageValidatingPolicy,
    /// A `policies.kyverno.io` MutatingPolicy / NamespacedMutatingPolicy.
    MutatingPolicy,
    /// A `policies.kyverno.io` GeneratingPolicy.
    GeneratingPolicy,
    /// A `policies.kyverno.io` DeletingPolicy / NamespacedDeletingPolicy.
    DeletingPolicy,
    /// A Kubernetes ValidatingAdmissionPolicy (with its bindings).
    ValidatingAdmissionPolicy,
    /// A Kubernetes MutatingAdmissionPolicy (with its bindings).
    MutatingAdmissionPolicy,
}

impl Source {
    /// The report's `source` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Kyverno => "kyverno",
            Source::ValidatingPolicy => "KyvernoValidatingPolicy",
            Source::ImageValidatingPolicy => "KyvernoImageValidatingPolicy",
            Source::MutatingPolicy => "KyvernoMutatingPolicy",
            Source::GeneratingPolicy => "KyvernoGeneratingPolicy",
            Source::DeletingPolicy => "KyvernoDeletingPolicy",
            Source::ValidatingAdmissionPolicy => "ValidatingAdmissionPolicy",
            Source::MutatingAdmissionPolicy => "MutatingAdmissionPolicy",
        }
    }
}

/// The result of one rule on one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleResult {
    /// The policy's name (`namespace/name` for a namespaced `Policy`).
    pub policy: Arc<str>,
    /// The rule's name; for a ValidatingPolicy, the policy's name.
    pub rule: String,
    /// What happened.
    pub status: Status,
    /// Kyverno's message for the result (empty when it has none).
    pub message: String,
    /// The engine that produced it.
    pub source: Source,
}
