#!/usr/bin/env bash
# Builds the project's Go peers into testenv/bin (or $TESTENV_BIN):
#   kubectl       k8s.io/kubectl's command, at the control plane's release
#   controlplane  etcd + kube-apiserver + kube-controller-manager in one process
#   chainsaw      Kyverno's end-to-end test runner
#   nullwebhook   an allow-everything admission webhook, the benchmarks' limit
#   notation      the Notary Project's signing CLI and ORAS's (the image
#                 tests' Notary signatures and OCI referrers; their own
#                 module, testenv/notation)
# Usage: testenv/build.sh [kubectl|controlplane|chainsaw|nullwebhook|notation]...
# (default: kubectl, controlplane and chainsaw)
# Everything comes from the Go module proxy; Go's build cache makes a second
# run take seconds. A cold build on 2 cores: see README ("Go peers").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bin="${TESTENV_BIN:-$PWD/bin}"
mkdir -p "$bin"

# The release every k8s.io module of go.mod is at; kubectl and the control
# plane report it as their version (what `kubectl version` prints).
release=$(awk '$1 == "k8s.io/kubectl" { sub(/^v0\./, "1.", $2); print "v" $2; exit }' go.mod)
minor=$(printf '%s' "$release" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(kubectl controlplane chainsaw)
for t in "${targets[@]}"; do
  start=$SECONDS
  case "$t" in
    kubectl|controlplane|nullwebhook)
      go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$bin/$t" "./cmd/$t" ;;
    chainsaw)
      # Its own module graph: installed, not a dependency of this module.
      GOBIN="$bin" go install -buildvcs=false -trimpath -ldflags "-s -w" github.com/kyverno/chainsaw@v0.2.12 ;;
    notation)
      (cd notation &&
        go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$bin/notation" github.com/notaryproject/notation/cmd/notation &&
        go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$bin/oras" oras.land/oras/cmd/oras) ;;
    *) echo "testenv/build.sh: unknown target '$t' (kubectl, controlplane, chainsaw, nullwebhook, notation)" >&2; exit 2 ;;
  esac
  echo "testenv: built $bin/$t in $((SECONDS - start)) s" >&2
done
