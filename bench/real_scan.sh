#!/bin/bash
# The background scan on the real control plane of testenv/: N pods
# (default 10,000) in 20 namespaces, the Pod Security set
# (bench/policies/pss-classic, 17 ClusterPolicies, Audit), measured in one
# run against its limit, `leash load pods -A` reading the same pods:
#   - `leash load pods -A`: wall time (the floor of any scan);
#   - `leash serve --components reports` (deploy/leash.yaml's ServiceAccount):
#     time from process start until every pod has its PolicyReport and no
#     EphemeralReport is left, CPU seconds, peak RSS, creation-to-report
#     latency of M more pods (bench/serve_measure.py);
#   - the API requests made meanwhile, per verb and resource, from
#     kube-apiserver's apiserver_request_total (the whole server's: the
#     control plane's own controllers add a few).
#
#   bench/real_scan.sh [PODS] [LATENCY_PODS]   (LEASH=... LOADGEN=... skip the build)
set -euo pipefail
cd "$(dirname "$0")/.."
pods=${1:-10000} lat=${2:-100}
if [ -z "${LEASH:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p leash -p leash-loadgen
fi
L=${LEASH:-target/release/leash} G=${LOADGEN:-target/release/leash-loadgen}
source bench/lib/realcp.sh
kubectl apply -f bench/policies/pss-classic > /dev/null
kubectl create serviceaccount loader -n default > /dev/null
kubectl create clusterrolebinding loader --clusterrole=edit --serviceaccount=default:loader > /dev/null
token=$(sa_token default loader)
echo "# $pods pods (20 namespaces, one in three violating) on kube-apiserver v1.37.2 (testenv), pss-classic, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
per=$((pods / 20))
for i in $(seq 0 19); do kubectl create namespace "scan-$i" > /dev/null; done
# A pod needs its namespace's default ServiceAccount, which a controller makes.
for i in $(seq 0 19); do
  until kubectl get serviceaccount default -n "scan-$i" > /dev/null 2>&1; do sleep 0.2; done
done
for i in $(seq 0 19); do
  n=$per; [ "$i" -lt $((pods % 20)) ] && n=$((n + 1))
  # One pod in three violates the set (privileged, hostNetwork, hostPath).
  "$G" --clients 8 --requests "$n" --violating-every 3 pods --server "$SERVER" \
    --namespace "scan-$i" --token "$token" --ca "$out/ca.pem" > "$out/loadgen.out" 2> "$out/loadgen.log" ||
    { cat "$out/loadgen.log"; exit 1; }
done
have=$(kubectl get pods -A --no-headers 2>/dev/null | grep -c "^scan-")
[ "$have" -eq "$pods" ] || { echo "created $have pods, not $pods"; cat "$out/loadgen.out"; exit 1; }

# Every resource the set's rules (autogen included) match gets a report:
# deploy/leash.yaml's Deployment, its ReplicaSet and pending pods too.
expected=$(kubectl get pods,deployments,replicasets,daemonsets,statefulsets,jobs,cronjobs -A --no-headers 2>/dev/null | wc -l)

requests() { # apiserver_request_total lines
  kubectl get --raw /metrics | grep '^apiserver_request_total{' || true
}
t0=$(date +%s.%N)
"$L" load pods -A --kubeconfig "$KUBECONFIG" -o ndjson 2> "$out/load.log" | wc -l > "$out/loaded"
t1=$(date +%s.%N)
load_s=$(python3 -c "print(round($t1 - $t0, 2))")
all_pods=$(kubectl get pods -A --no-headers 2>/dev/null | wc -l)
[ "$(cat "$out/loaded")" -eq "$all_pods" ] || { echo "leash load printed $(cat "$out/loaded") of $all_pods pods"; cat "$out/load.log"; exit 1; }

kubectl proxy --port 0 > "$out/proxy" 2>&1 &
for _ in $(seq 100); do grep -q 'Starting to serve' "$out/proxy" && break; sleep 0.1; done
proxy=http://$(sed -n 's/.*Starting to serve on //p' "$out/proxy")
requests > "$out/before"
"$L" serve --kubeconfig "$out/leash.kubeconfig" --components reports > /dev/null 2> "$out/serve.log" &
serve=$!
# Polled every 0.5 s: each poll is one LIST (limit=1) of each report kind,
# counted below with leash's requests.
result=$(python3 bench/serve_measure.py "$proxy" "$serve" "$expected" "$lat" 0.5) ||
  { echo "measure failed: $result"; tail -20 "$out/serve.log"; exit 1; }
requests > "$out/after"
kill -TERM "$serve"; wait "$serve" || { echo "leash serve exited with $?"; tail -20 "$out/serve.log"; exit 1; }
echo "$result"
first=$(echo "$result" | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_scan_s"])')
echo "leash load pods -A: ${load_s}s; leash serve first scan: ${first}s; ratio scan/load: $(python3 -c "print(round($first / $load_s, 2))")x"
echo "API requests during the scan and the latency pods (verb resource: count):"
python3 - "$out/before" "$out/after" <<'PY'
import re, sys
def parse(path):
    counts = {}
    for line in open(path):
        m = re.match(r'apiserver_request_total\{(.*)\} (\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = (labels.get('verb', ''), (labels.get('group') + '/' if labels.get('group') else '') + labels.get('resource', ''))
        counts[key] = counts.get(key, 0) + float(m.group(2))
    return counts
before, after = parse(sys.argv[1]), parse(sys.argv[2])
for key in sorted(after):
    n = after[key] - before.get(key, 0)
    if n >= 1:
        print(f"  {key[0]:<8} {key[1]:<50} {int(n)}")
PY
