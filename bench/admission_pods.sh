#!/bin/bash
# Pod creation through the sandbox, without and with `leash serve`'s
# admission webhook registered (writing an admission EphemeralReport per
# pod, the default, then with --admission-reports=false), in turn, in one
# run (docs/BENCHMARKS.md, "leash serve: the admission webhook under load").
#
#   bench/admission_pods.sh [CLIENTS] [REPS]     (default 10 clients, 2 reps)
#   LEASH=... LOADGEN=... skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-10} reps=${2:-2}
if [ -z "${LEASH:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p leash -p leash-loadgen
fi
L=${LEASH:-target/release/leash} G=${LOADGEN:-target/release/leash-loadgen}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
"$L" sandbox --data deploy/crds --data bench/policies/pss-classic > "$out/url" 2> "$out/sandbox.err" &
for _ in $(seq 100); do [ -s "$out/url" ] && break; sleep 0.1; done
URL=$(head -1 "$out/url")
curl -sf -X POST -H 'Content-Type: application/json' "$URL/api/v1/namespaces" \
  -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kyverno"}}' > /dev/null
health=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
row() { # label
  "$G" pods --server "$URL" --clients "$clients" --duration 5 --violating-every 0 --json |
    python3 -c "import sys,json; d=json.load(sys.stdin); l=d['latency_ms']; print('%-11s %8.0f req/s  p50 %6.2f  p95 %6.2f  p99 %6.2f  max %6.1f ms  errors %d' % ('$1', d['requests_per_second'], l['p50'], l['p95'], l['p99'], l['max'], d['error_count']) + (' %s' % d['errors'] if d['error_count'] else ''))"
}
echo "# pods through the sandbox, $clients clients, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
webhook() { # label [serve flags]
  local label=$1; shift
  "$L" serve --server "$URL" --components admission --admission-listen 127.0.0.1:0 \
    --health "$health" --cleanup-webhooks --max-ephemeral-reports 1000000 "$@" > "$out/serve.log" 2>&1 &
  serve=$!
  for _ in $(seq 200); do curl -sf "http://$health/readyz" > /dev/null && break; sleep 0.1; done
  row "$label"
  kill -TERM "$serve"; wait "$serve" || true
}
for _ in $(seq 1 "$reps"); do
  row none
  webhook admission
  webhook no-reports --admission-reports=false
done
