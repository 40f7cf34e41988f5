//! Kubernetes' value kinds, one implementation each: quantities and Go
//! durations ([`quantity`]), and RFC 6902 JSON Patch with the options
//! Kyverno's patches need ([`json_patch`]).

pub(crate) mod json_patch;
pub mod quantity;
