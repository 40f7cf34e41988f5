#!/bin/bash
# Direct reviews of the mutating and the validating webhook (issue 40):
# `leash-loadgen review` hosts leash's webhook in-process with the Pod
# Security set in Enforce plus the mutate policies of Kyverno's policy
# library (bench/lib/mutate_set.sh), and posts pod reviews to /validate and
# to /mutate at 100 and 500 concurrent clients, 10 s each, in one run.
# Targets: p99 under 10 ms at 100 clients; no review over 1 s at 500.
#
#   bench/admission_mutate.sh [CLIENTS...]     (default 100 500)
#   LOADGEN=... skips the cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=("$@"); [ "${#clients[@]}" -gt 0 ] || clients=(100 500)
if [ -z "${LOADGEN:-}" ]; then cargo build --release -q -p leash-loadgen; fi
G=${LOADGEN:-target/release/leash-loadgen}
source bench/lib/mutate_set.sh
set_dir=$(mktemp -d); trap 'rm -rf "$set_dir"' EXIT
mutate_set "$set_dir"
echo "# direct reviews, $(ls "$set_dir" | wc -l) policies (Enforce), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-8s %9s %9s %9s %9s %8s %8s %7s\n' endpoint clients "p50 ms" "p99 ms" "max ms" "req/s" allowed patched errors
for c in "${clients[@]}"; do
  for e in validate mutate; do
    "$G" review --policies "$set_dir" --enforce --endpoint "$e" --clients "$c" --duration 10 --json > "$set_dir/run.json" 2> "$set_dir/run.err" ||
      { cat "$set_dir/run.err"; exit 1; }
    python3 - "$set_dir/run.json" "$e" "$c" <<'PY'
import sys, json
d = json.load(open(sys.argv[1])); l = d['latency_ms']
print('%-9s %-8s %9.2f %9.2f %9.1f %9.0f %8d %8d %7d' % (sys.argv[2], sys.argv[3], l['p50'], l['p99'], l['max'],
      d['requests_per_second'], d['allowed'], d['patched'], d['error_count']))
PY
  done
done
