//! `policies.kyverno.io` ValidatingPolicy and NamespacedValidatingPolicy.
