//! The policy commands: `leash apply` and `leash test` (Kyverno's CLI) on
//! `leash-policy`.

pub(crate) mod apply;
mod cluster;
mod cluster_apply;
mod files;
mod load;
mod mutated;
mod patched;
mod spec;
pub(crate) mod test;
