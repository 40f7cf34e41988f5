#!/usr/bin/env bash
# leash serve's reports component on the Pod Security policy set, against
# the limit (leash load reading the same pods) in the same run.
#
#   bench/serve.sh [--pods N] [--latency-pods M]   (LEASH=/path/to/leash skips the build)
#
# A sandbox with N pods (default 10,000) in 20 namespaces, leash's CRDs and
# bench/policies/pss-classic (17 ClusterPolicies). Measures, in one run:
# `leash load pods -A` (the time just to read the pods: the floor of any
# scan), then `leash serve` from process start to every PolicyReport
# written and no EphemeralReport left, its CPU seconds and peak RSS, and the
# time from a pod's creation to its report (p50, p99, max over M pods,
# default 200). Prints one JSON line and the ratio scan/load.
# Kyverno's published run (scaling.md): 16 PSS policies, 10,254 reports,
# reports controller peaking at 4.3 cores and 152 MiB. Needs python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pods=10000 lat=200
while [ $# -gt 0 ]; do
  case "$1" in
    --pods) pods="$2"; shift ;;
    --latency-pods) lat="$2"; shift ;;
    *) echo "usage: bench/serve.sh [--pods N] [--latency-pods M]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "${LEASH:-}" ]; then
  cargo build --release --locked -p leash >&2
  LEASH=${CARGO_TARGET_DIR:-target}/release/leash
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
"$LEASH" sandbox --seed 1 --generate "pods=$pods" --namespaces 20 --crds 0:0 \
  --data deploy/crds --data bench/policies/pss-classic > "$out/url" 2> "$out/sandbox.err" &
for _ in $(seq 1 600); do [ -s "$out/url" ] && break; sleep 0.2; done
[ -s "$out/url" ] || { echo "sandbox did not start:" >&2; cat "$out/sandbox.err" >&2; exit 1; }
url=$(head -1 "$out/url")
echo "sandbox $url: $pods pods, 17 PSS ClusterPolicies; $(nproc) cores" >&2

t0=$(date +%s.%N)
"$LEASH" load pods -A --server "$url" -o ndjson > /dev/null 2> "$out/load.err"
t1=$(date +%s.%N)
load_s=$(echo "$t1 - $t0" | bc)

"$LEASH" serve --server "$url" --components reports > /dev/null 2> "$out/serve.err" &
serve_pid=$!
result=$(python3 bench/serve_measure.py "$url" "$serve_pid" "$pods" "$lat")
kill -TERM "$serve_pid"; wait "$serve_pid" || { echo "leash serve exited with $?" >&2; cat "$out/serve.err" >&2; exit 1; }
echo "$result"
first=$(echo "$result" | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_scan_s"])')
echo "load pods: ${load_s}s; serve first scan: ${first}s; ratio scan/load: $(echo "scale=2; $first / $load_s" | bc)x"
