#!/usr/bin/env bash
# Builds Kyverno's own CLI, bench/kyverno-cli/bin/kyverno, from the Go module
# proxy when it is missing or was built from another go.mod. It is an oracle
# for bench/kyverno-diff only; no Kyverno code lives in this repository.
#   build.sh [--force]      prints the binary's path on stdout
# Go runs at low priority (nice -n 10). A cold build (empty module and build
# caches) downloads ~1,300 modules and compiles for 7-8 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/bin/kyverno"
stamp="$here/bin/kyverno.go.mod.sha256"
want="$(sha256sum "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -d' ' -f1)"
if [ "${1:-}" = --force ]; then rm -f "$bin" "$stamp"; fi
if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 2; }
  mkdir -p "$here/bin"
  version="$(awk '$1 == "require" && $2 == "github.com/kyverno/kyverno" {print $3}' "$here/go.mod")"
  echo "build.sh: building the Kyverno CLI $version (nice -n 10 go build) ..." >&2
  start=$(date +%s)
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-X github.com/kyverno/kyverno/pkg/version.BuildVersion=$version" -o "$bin.tmp" . && mv "$bin.tmp" "$bin")
  echo "$want" >"$stamp"
  echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
