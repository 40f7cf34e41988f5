//! leash against a real Kubernetes control plane: etcd, kube-apiserver and
//! kube-controller-manager from `k8s.io/kubernetes`, run in one process by
//! `testenv/bin/controlplane` (`testenv/build.sh controlplane`).
//!
//! These tests run when `LEASH_CONTROLPLANE` names that program (`.ci/run`
//! sets it after building it); otherwise each says why it skips. One control
//! plane is started for the whole test binary and stops when the binary
//! exits (it ends when its stdin closes and removes its data). The tests
//! take it one at a time: they register webhooks and policies cluster-wide.

#[allow(
    dead_code,
    reason = "shared with the sandbox tests (tests/it); this binary uses part of it"
)]
#[path = "../it/support.rs"]
mod support;

mod apply;
mod cluster;
mod load;
mod parity;
mod serve;
