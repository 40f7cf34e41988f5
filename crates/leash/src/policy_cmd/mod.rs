//! The policy commands: `leash apply` and `leash test` (Kyverno's CLI) on
//! `leash-policy`.

mod cluster;
mod files;
mod load;
mod spec;
pub(crate) mod test;
