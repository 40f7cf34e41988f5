#!/bin/bash
# Pod creation through kube-apiserver (the real control plane of testenv/),
# without and with `leash serve`'s admission webhook registered, the Pod
# Security policy set (bench/policies/pss-classic) in Enforce, at 1, 10 and
# 50 concurrent clients: p50 and p99, and their ratios, measured in turn in
# one run (docs/BENCHMARKS.md, "Admission on a real control plane").
#
# A third row, `limit`, registers the same webhook configurations pointed at
# testenv's nullwebhook, which allows every review reading only its uid:
# what calling any webhook costs kube-apiserver, the floor no webhook can go
# below.
#
#   bench/real_admission.sh [REPS] [CLIENTS...]   (default 2 reps; 1 10 50)
#   LEASH=... LOADGEN=... skip the cargo build; testenv/bin is built if missing.
#   LEASH_ARGS="--admission-reports=false" adds flags to `leash serve`.
#   PODS_ARGS="--no-token" adds flags to `leash-loadgen pods` (pods that
#   mount no ServiceAccount token: the mutating webhook's memo can hit).
#   SET=mutate adds the mutate policies of Kyverno's policy library
#   (bench/lib/mutate_set.sh): `leash serve` then registers its mutating
#   webhook too, and each creation goes through both.
#
# Beside latency, each row gives the CPU time per created pod of the control
# plane (etcd, kube-apiserver, controllers: one process) and of the webhook
# process (leash, or the null webhook), from
# /proc/PID/stat before and after the run: where a creation's cost goes,
# robust to other load on the machine.
#
# Every pod is compliant (--violating-every 0): each request is a creation,
# with the webhook evaluating 17 policies and writing its admission report.
# The clients authenticate with a ServiceAccount token (the loader speaks
# bearer tokens); leash serve runs with deploy/leash.yaml's ServiceAccount.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-2}; shift || true
clients=("$@"); [ "${#clients[@]}" -gt 0 ] || clients=(1 10 50)
if [ -z "${LEASH:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p leash -p leash-loadgen
fi
L=${LEASH:-target/release/leash} G=${LOADGEN:-target/release/leash-loadgen}
source bench/lib/realcp.sh
[ -x testenv/bin/nullwebhook ] || testenv/build.sh nullwebhook
policy_dir=bench/policies/pss-classic
if [ "${SET:-}" = mutate ]; then
  source bench/lib/mutate_set.sh
  policy_dir=$out/policies
  mutate_set "$policy_dir"
  # What the set's mutations point pods at must exist, or kube-apiserver
  # rejects every pod after the webhook (add-runtimeClassName's RuntimeClass).
  kubectl apply -f - > /dev/null <<'YAML'
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: prodclass}
handler: runc
YAML
fi
for f in "$policy_dir"/*.yaml; do
  sed 's/validationFailureAction: Audit/validationFailureAction: Enforce/' "$f"
  printf '\n---\n'  # a file may end without a newline
done | kubectl apply -f - > /dev/null
kubectl create namespace bench > /dev/null
kubectl create serviceaccount loader -n bench > /dev/null
kubectl create rolebinding loader --clusterrole=edit --serviceaccount=bench:loader -n bench > /dev/null
until kubectl get serviceaccount default -n bench > /dev/null 2>&1; do sleep 0.2; done
LOADER_TOKEN=$(sa_token bench loader)
# A pod the Pod Security set denies, whatever the mutate set does to it (a
# mutate policy of the library drops `privileged`): host networking.
probe_args=(--overrides='{"apiVersion":"v1","spec":{"hostNetwork":true}}')
health=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
metrics=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

ticks() { # pid -> user+system CPU ticks so far (0 when there is no such process)
  if [ -n "$1" ] && [ -r "/proc/$1/stat" ]; then
    sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
  else echo 0; fi
}
measure() { # clients [leash pid] -> "p50 p99 req/s errors cp-ms/pod leash-ms/pod"
  local c0 l0
  c0=$(ticks "$cp_pid"); l0=$(ticks "${2:-}")
  "$G" pods --server "$SERVER" --namespace bench --token "$LOADER_TOKEN" --ca "$out/ca.pem" ${PODS_ARGS:-} \
    --clients "$1" --duration 6 --violating-every 0 --json > "$out/run.json"
  python3 - "$out/run.json" "$(($(ticks "$cp_pid") - c0))" "$(($(ticks "${2:-}") - l0))" "$(getconf CLK_TCK)" <<'PY'
import sys, json
d = json.load(open(sys.argv[1])); l = d['latency_ms']
cp, leash, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
n = max(d['allowed'], 1)
print('%.2f %.2f %.0f %d %.3f %.3f' % (l['p50'], l['p99'], d['requests_per_second'], d['error_count'],
      cp * 1000 / hz / n, leash * 1000 / hz / n))
PY
}
start_serve() {
  "$L" serve --kubeconfig "$out/leash.kubeconfig" --components admission \
    --admission-listen 127.0.0.1:0 --health "$health" --metrics "$metrics" --cleanup-webhooks \
    --max-ephemeral-reports 1000000 ${LEASH_ARGS:-} > "$out/serve.log" 2>&1 &
  serve=$!
  for _ in $(seq 300); do curl -sf "http://$health/readyz" > /dev/null && break; sleep 0.1; done
  # kube-apiserver reads the new configuration through its informer.
  # (Not `| grep -q`: with pipefail, grep closing early fails the pipe.)
  until [[ "$(kubectl run probe --image=nginx:1.27 "${probe_args[@]}" --dry-run=server -n bench 2>&1)" == *"denied the request"* ]]; do sleep 0.2; done
}
# The mutating webhook's remembered answers: "hits/misses" (- without).
memo_counts() {
  curl -sf "http://$metrics/metrics" | python3 -c '
import sys
c = {}
for l in sys.stdin:
    if l.startswith("leash_mutation_memo_total"):
        c["hit" if "\"hit\"" in l else "miss"] = int(float(l.split()[-1]))
print("%d/%d" % (c.get("hit", 0), c.get("miss", 0)) if c else "-")'
}
stop_serve() {
  kill -TERM "$serve"; wait "$serve" || true
  until kubectl run probe --image=nginx:1.27 "${probe_args[@]}" --dry-run=server -n bench > /dev/null 2>&1; do sleep 0.2; done
}
# The webhook configurations leash registered, pointed at the null webhook
# (same rules, selectors, failure policy and timeouts), in $out/null.json.
capture_limit() {
  [ -s "$out/null.json" ] && return
  mkfifo "$out/null.stdin"
  nullwebhook < "$out/null.stdin" > "$out/null.ready" &
  null_pid=$!
  exec 4> "$out/null.stdin"
  for _ in $(seq 100); do [ -s "$out/null.ready" ] && break; sleep 0.1; done
  kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations -o json |
    python3 -c '
import sys, json
ready = json.load(open(sys.argv[1]))
items = []
for c in json.load(sys.stdin)["items"]:
    c["metadata"] = {"name": "null-" + c["metadata"]["name"]}
    for w in c.get("webhooks", []):
        w["clientConfig"] = {"url": ready["url"], "caBundle": ready["caBundle"]}
    items.append(c)
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
' "$out/null.ready" > "$out/null.json"
}
start_limit() {
  kubectl create -f "$out/null.json" > /dev/null
  # Registered when a pod the policies would deny is admitted by the null
  # webhook's configuration: wait until kube-apiserver has called it once.
  local before
  before=$(ticks "$null_pid")
  until [ "$(ticks "$null_pid")" != "$before" ]; do
    kubectl run probe --image=nginx:1.27 --dry-run=server -n bench > /dev/null 2>&1; sleep 0.2
  done
}
stop_limit() {
  kubectl delete -f "$out/null.json" > /dev/null
}

echo "# pods through kube-apiserver v1.37.2 (testenv), $(ls "$policy_dir" | wc -l) policies of $policy_dir${SET:+ (SET=$SET)} in Enforce, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-4s %10s %10s %8s %7s %9s %9s\n' clients rep "p50 ms" "p99 ms" "req/s" errors "cp ms/pod" "hook ms"

for c in "${clients[@]}"; do
  for r in $(seq 1 "$reps"); do
    read -r n50 n99 nrps nerr ncp _ <<< "$(measure "$c")"
    start_serve
    read -r w50 w99 wrps werr wcp wl <<< "$(measure "$c" "$serve")"
    memo=$(memo_counts)
    capture_limit
    stop_serve
    start_limit
    read -r m50 m99 mrps merr mcp ml <<< "$(measure "$c" "$null_pid")"
    stop_limit
    printf '%-8s %-4s %10s %10s %8s %7s %9s %9s   none\n' "$c" "$r" "$n50" "$n99" "$nrps" "$nerr" "$ncp" -
    printf '%-8s %-4s %10s %10s %8s %7s %9s %9s   limit    (p50 %.2fx, p99 %.2fx)\n' "$c" "$r" "$m50" "$m99" "$mrps" "$merr" "$mcp" "$ml" \
      "$(python3 -c "print($m50/$n50)")" "$(python3 -c "print($m99/$n99)")"
    printf '%-8s %-4s %10s %10s %8s %7s %9s %9s   webhook  (p50 %.2fx, p99 %.2fx; of the limit %.2fx, %.2fx; mutation memo hits/misses %s)\n' "$c" "$r" "$w50" "$w99" "$wrps" "$werr" "$wcp" "$wl" \
      "$(python3 -c "print($w50/$n50)")" "$(python3 -c "print($w99/$n99)")" \
      "$(python3 -c "print($w50/$m50)")" "$(python3 -c "print($w99/$m99)")" "$memo"
  done
done
