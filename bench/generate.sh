#!/usr/bin/env bash
# leash serve's generate path (admission + background) against the limit (a
# plain create of the downstream kind) in the same run.
#
#   bench/generate.sh [--triggers N] [--total M]   (LEASH=/path/to/leash skips the build)
#
# A sandbox with leash's CRDs and bench/policies/generate (a ConfigMap per
# namespace labelled bench=yes, synchronized); `leash serve --components
# admission,background` registers its webhook with the sandbox, which calls
# it for every namespace created. Measures, in one run (bench/generate_measure.py):
# N (default 1,000) ConfigMaps created directly 50 at a time (the latency of
# one object appearing: the floor), then N triggering namespaces created
# through admission 50 at a time, each namespace's creation to its
# downstream's appearance (p50, p99), UpdateRequests processed per second,
# and the serve process's peak RSS with M (default 10,000) downstreams under
# watch. Prints one JSON line and the latency ratios. Needs python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
triggers=1000 total=10000
while [ $# -gt 0 ]; do
  case "$1" in
    --triggers) triggers="$2"; shift ;;
    --total) total="$2"; shift ;;
    *) echo "usage: bench/generate.sh [--triggers N] [--total M]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "${LEASH:-}" ]; then
  cargo build --release --locked -p leash >&2
  LEASH=${CARGO_TARGET_DIR:-target}/release/leash
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: kyverno}\n' > "$out/kyverno.yaml"
"$LEASH" sandbox --data deploy/crds --data bench/policies/generate --data "$out/kyverno.yaml" \
  > "$out/url" 2> "$out/sandbox.err" &
for _ in $(seq 1 600); do [ -s "$out/url" ] && break; sleep 0.2; done
[ -s "$out/url" ] || { echo "sandbox did not start:" >&2; cat "$out/sandbox.err" >&2; exit 1; }
url=$(head -1 "$out/url")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "sandbox $url; $triggers triggers, $total downstreams; $(nproc) cores" >&2
"$LEASH" serve --server "$url" --components admission,background \
  --admission-listen "127.0.0.1:$port" > /dev/null 2> "$out/serve.err" &
serve_pid=$!
result=$(python3 bench/generate_measure.py "$url" "$serve_pid" "$triggers" "$total") || {
  echo "measurement failed; leash serve said:" >&2; tail -20 "$out/serve.err" >&2; exit 1; }
kill -TERM "$serve_pid"; wait "$serve_pid" || { echo "leash serve exited with $?" >&2; cat "$out/serve.err" >&2; exit 1; }
echo "$result"
echo "$result" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("trigger-to-downstream / direct create: p50 %.1fx, p99 %.1fx" % (r["trigger_to_downstream_p50_ms"]/r["direct_create_p50_ms"], r["trigger_to_downstream_p99_ms"]/r["direct_create_p99_ms"]))'
