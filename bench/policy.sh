#!/usr/bin/env bash
# leash apply --cluster vs leash load, same sandbox, same run, interleaved.
#
#   bench/policy.sh [--quick] [--reps N]        (LEASH=/path/to/leash skips the build)
#
# Scenario A, Kyverno issue #12967 replayed (`kyverno apply --cluster` with a
# 4-rule policy flagging deprecated APIs took 9 min 59 s over 3,002
# resources): bench/policies/deprecated-apis against 3,002 objects of the
# kinds it matches (deployments, replicasets, statefulsets, daemonsets,
# cronjobs, and ingresses, which the sandbox now serves built in; it
# refuses a CRD for them), `apply --cluster -A` vs `load <those kinds> -A`.
# Scenario B, the Pod Security Standards: P generated pods in 20 namespaces,
# bench/policies/pss-classic (17 ClusterPolicies) and bench/policies/pss-cel
# (the same controls as 17 ValidatingPolicies), `apply --cluster` vs
# `load pods`, on every core and pinned to one (taskset -c 0), and peak RSS.
# The CEL set is timed on one namespace (P/20 pods; it is too slow for the
# whole set in the time budget), against load and the classic set on the
# same namespace.
# Prints medians (wall and CPU seconds) and ratios; the machine's load average
# is printed at the start and end, since 1 core vs all only means something
# on an otherwise idle machine. Needs python3, bc, taskset and GNU time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0 reps=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --reps) reps="$2"; shift ;;
    *) echo "usage: bench/policy.sh [--quick] [--reps N]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$quick" = 1 ]; then P=10000 reps=${reps:-1}; else P=100000 reps=${reps:-3}; fi
areps=$((reps * 5)) # scenario A's runs are short: 5x the repetitions

if [ -z "${LEASH:-}" ]; then
  cargo build --release --locked -p leash >&2
  LEASH=${CARGO_TARGET_DIR:-target}/release/leash
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
export HOME="$out/home" && mkdir -p "$HOME"

start_sandbox() { # var flags...: starts a sandbox; sets $var to its URL and PID_$var to its pid
  local var=$1; shift
  "$LEASH" sandbox --seed 1 "$@" > "$out/url.$var" 2> "$out/sandbox.$var.err" &
  printf -v "PID_$var" %s $!
  for _ in $(seq 1 600); do [ -s "$out/url.$var" ] && break; sleep 0.2; done
  [ -s "$out/url.$var" ] || { echo "sandbox $var did not start:" >&2; cat "$out/sandbox.$var.err" >&2; exit 1; }
  printf -v "$var" %s "$(head -1 "$out/url.$var")"
}
stop_sandbox() { # var
  local pid="PID_$1"
  kill -INT "${!pid}"; wait "${!pid}" || true
}
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
timed() { # name cmd...: appends wall seconds to $out/t.name, CPU (user+sys) seconds to $out/c.name;
  # a failed run is noted (exit 1 is a failed run of load, but only failing policies for apply)
  local name=$1; shift
  local t0 status=0; t0=$(now)
  /usr/bin/time -f '%U %S' -o "$out/cpu" "$@" > /dev/null 2>> "$out/err.$name" || status=$?
  echo "$(now) - $t0" | bc -l >> "$out/t.$name"
  [ "$status" = 0 ] || { [ "$status" = 1 ] && [ "${name#load}" = "$name" ]; } ||
    echo "NOTE: a '$name' run exited $status: $(grep -v '^Command' "$out/err.$name" | tail -1)" >> "$out/notes"
  awk '{print $1 + $2}' "$out/cpu" | tail -1 >> "$out/c.$name"
}
rss() { # name cmd... : prints peak RSS in MB; stdout kept in $out/stdout.name; a failed run
  # is noted (exit 1 is a failed run of load, but only failing policies for apply)
  local name=$1; shift
  local status=0
  /usr/bin/time -f '%M' -o "$out/rss" "$@" > "$out/stdout.$name" 2> "$out/err.rss" || status=$?
  [ "$status" = 0 ] || { [ "$status" = 1 ] && [ "${name#load}" = "$name" ]; } || echo "NOTE: peak-RSS run of '$name' exited $status: $(grep -v '^Command' "$out/err.rss" | tail -1)" >> "$out/notes"
  echo "$(tail -1 "$out/rss") / 1024" | bc
}
med() { median < "$out/t.$1"; }
ratio() { echo "$(med "$1")/$(med "$2")" | bc -l; }
cpu() { median < "$out/c.$1"; }
summary() { # name: "N resources; pass: ..." from a kept stdout
  local f="$out/stdout.$1"
  echo "$(grep -m1 -o 'to [0-9]* resources' "$f" | awk '{print $2}') resources; $(tail -1 "$f")"
}

echo "# leash policy bench: $(date -u +'%F %H:%M UTC'), $(nproc) cores, quick=$quick, reps=$reps, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------- scenario A: Kyverno #12967 ----------------
NI=302 # ingresses; with the 600+1200+300+100+500 generated objects: 3,002
mkdir -p "$out/deprecated"
python3 - "$out/deprecated" "$NI" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
items = []
for i in range(n):
    app = f"app-{i:04d}"
    items.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                  "metadata": {"name": app, "namespace": f"ns-{i % 4:04d}", "labels": {"app.kubernetes.io/name": app},
                               "annotations": {"nginx.ingress.kubernetes.io/rewrite-target": "/"}},
                  "spec": {"ingressClassName": "nginx",
                           "tls": [{"hosts": [f"{app}.example.com"], "secretName": f"{app}-tls"}],
                           "rules": [{"host": f"{app}.example.com", "http": {"paths": [
                               {"path": "/", "pathType": "Prefix",
                                "backend": {"service": {"name": app, "port": {"number": 80}}}}]}}]}})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(f"{d}/10-ingresses.json", "w"))
PY
start_sandbox URL --generate deployments.apps=600,replicasets.apps=1200,statefulsets.apps=300,daemonsets.apps=100,cronjobs.batch=500 --data "$out/deprecated"
akinds="deployments.apps replicasets.apps statefulsets.apps daemonsets.apps cronjobs.batch ingresses.networking.k8s.io"
# shellcheck disable=SC2086
"$LEASH" load $akinds --server "$URL" -A --progress never -o ndjson > "$out/a.ndjson" 2> /dev/null
aobjects=$(wc -l < "$out/a.ndjson")
for _ in $(seq 1 "$areps"); do
  timed dep_apply "$LEASH" apply bench/policies/deprecated-apis --cluster --server "$URL" -A
  # shellcheck disable=SC2086
  timed dep_load "$LEASH" load $akinds --server "$URL" -A --progress never -o ndjson
done
ar=$(rss dep_apply "$LEASH" apply bench/policies/deprecated-apis --cluster --server "$URL" -A)
# shellcheck disable=SC2086
lr=$(rss dep_load "$LEASH" load $akinds --server "$URL" -A --progress never -o ndjson)
stop_sandbox URL
echo
echo "## Scenario A (Kyverno #12967): 4-rule deprecated-API ClusterPolicy, $aobjects objects of the kinds it matches, $areps runs each"
printf "leash apply --cluster -A   median %6.3fs (CPU %5.2fs)  peak RSS %s MB  (%s)\n" "$(med dep_apply)" "$(cpu dep_apply)" "$ar" "$(summary dep_apply)"
printf "leash load <7 kinds> -A    median %6.3fs (CPU %5.2fs)  peak RSS %s MB\n" "$(med dep_load)" "$(cpu dep_load)" "$lr"
printf "apply/load %.2fx (target < 1.5x); apply %.3fs (target well under 1 s; Kyverno's CLI in the issue: 599 s)\n" "$(ratio dep_apply dep_load)" "$(med dep_apply)"

# ---------------- scenario B: Pod Security Standards ----------------
S=$((P / 20)) # pods in namespace ns-0000 (generated pods go round-robin into 20)
start_sandbox URL --generate "pods=$P" --namespaces 20
classic=bench/policies/pss-classic cel=bench/policies/pss-cel
for _ in $(seq 1 "$reps"); do
  timed load_all "$LEASH" load pods --server "$URL" -A --progress never -o ndjson
  timed classic_all "$LEASH" apply "$classic" --cluster --server "$URL" -A
  timed load_all_1 taskset -c 0 "$LEASH" load pods --server "$URL" -A --progress never -o ndjson
  timed classic_all_1 taskset -c 0 "$LEASH" apply "$classic" --cluster --server "$URL" -A
  timed cel_all "$LEASH" apply "$cel" --cluster --server "$URL" -A
  timed cel_all_1 taskset -c 0 "$LEASH" apply "$cel" --cluster --server "$URL" -A
  timed load_ns "$LEASH" load pods --server "$URL" -n ns-0000 --progress never -o ndjson
  timed classic_ns "$LEASH" apply "$classic" --cluster --server "$URL" -n ns-0000
  timed cel_ns "$LEASH" apply "$cel" --cluster --server "$URL" -n ns-0000
  timed load_ns_1 taskset -c 0 "$LEASH" load pods --server "$URL" -n ns-0000 --progress never -o ndjson
  timed classic_ns_1 taskset -c 0 "$LEASH" apply "$classic" --cluster --server "$URL" -n ns-0000
  timed cel_ns_1 taskset -c 0 "$LEASH" apply "$cel" --cluster --server "$URL" -n ns-0000
done
r_load_all=$(rss load_all "$LEASH" load pods --server "$URL" -A --progress never -o ndjson)
r_classic_all=$(rss classic_all "$LEASH" apply "$classic" --cluster --server "$URL" -A)
r_cel_all=$(rss cel_all "$LEASH" apply "$cel" --cluster --server "$URL" -A)
r_load_ns=$(rss load_ns "$LEASH" load pods --server "$URL" -n ns-0000 --progress never -o ndjson)
r_classic_ns=$(rss classic_ns "$LEASH" apply "$classic" --cluster --server "$URL" -n ns-0000)
r_cel_ns=$(rss cel_ns "$LEASH" apply "$cel" --cluster --server "$URL" -n ns-0000)
stop_sandbox URL
echo
echo "## Scenario B: Pod Security Standards, $P generated pods in 20 namespaces, $reps runs each (all cores, and taskset -c 0)"
hdr='%-36s %8s %8s %8s %7s   %s\n'
printf "$hdr" "" wall CPU "1 core" "RSS MB" "vs load: wall, 1-core wall, CPU, RSS; 1 core/all cores"
lrow() { # label name rss
  printf '%-36s %7.2fs %7.2fs %7.2fs %7s\n' "$1" "$(med "$2")" "$(cpu "$2")" "$(med "$2_1")" "$3"
}
arow() { # label apply-name load-name rss-apply rss-load
  printf '%-36s %7.2fs %7.2fs %7.2fs %7s   %6.2fx %6.2fx %6.2fx %5.2fx; %.2fx\n' "$1" "$(med "$2")" "$(cpu "$2")" "$(med "$2_1")" "$4" \
    "$(ratio "$2" "$3")" "$(ratio "$2_1" "$3_1")" "$(echo "$(cpu "$2")/$(cpu "$3")" | bc -l)" "$(echo "$4/$5" | bc -l)" "$(ratio "$2_1" "$2")"
}
lrow "leash load pods -A ($P pods)" load_all "$r_load_all"
arow "leash apply pss-classic -A" classic_all load_all "$r_classic_all" "$r_load_all"
arow "leash apply pss-cel -A" cel_all load_all "$r_cel_all" "$r_load_all"
lrow "leash load pods -n ns-0000 ($S pods)" load_ns "$r_load_ns"
arow "leash apply pss-classic -n ns-0000" classic_ns load_ns "$r_classic_ns" "$r_load_ns"
arow "leash apply pss-cel -n ns-0000" cel_ns load_ns "$r_cel_ns" "$r_load_ns"
printf "CEL/classic: %.1fx -A, %.1fx on ns-0000 (all cores), %.1fx on ns-0000 (1 core)\n" "$(ratio cel_all classic_all)" "$(ratio cel_ns classic_ns)" "$(ratio cel_ns_1 classic_ns_1)"
echo "results: classic -A: $(summary classic_all)"
echo "         cel -A: $(summary cel_all)"
echo "         classic ns-0000: $(summary classic_ns)"
echo "         cel ns-0000: $(summary cel_ns)"
echo "targets: apply within 2x of load in wall time and peak RSS"
echo "# done: $(date -u +'%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ -s "$out/notes" ] && { echo; cat "$out/notes"; }
exit 0
