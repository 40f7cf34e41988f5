#!/usr/bin/env bash
# leash load vs kubectl, same sandbox data, same run, interleaved (A B A B ...).
#
#   bench/run.sh [--quick] [--reps N] [--only4]
#
# --only4 runs scenario 4 alone (P pods: leash and the plain client,
# interleaved; no kubectl). LEASH=path uses that binary instead of building.
#
# Scenario 1: many kinds, latency-bound (K custom kinds x M objects, page size
# 100, 20 ms per request): leash at concurrency 1/4/16/32 vs the limit, a
# kubectl loop (one process per kind) and one kubectl call for every kind.
# Scenario 2: one big kind (P pods, no latency, page size 500): wall time and
# peak RSS of leash and kubectl; leash's peak RSS at P/10 vs P pods.
# Scenario 4: the same list read by a plain HTTP client (bench/plain_list.py):
# how fast the sandbox serves it, against leash's time.
# Scenario 3: scenario 1's data with 5% 500s and 5% 429s (Retry-After 1, and
# 0): every uid once, time against the fault-free run, interleaved.
# Prints medians and ratios; needs kubectl, python3 and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0 reps=3 only4=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --reps) reps="$2"; shift ;;
    --only4) only4=1 ;;
    *) echo "usage: bench/run.sh [--quick] [--reps N] [--only4]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$quick" = 1 ]; then K=40 M=200 P=10000 KL=10; else K=200 M=200 P=100000 KL=200; fi

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
timed() { # name cmd...: appends seconds to $out/t.name
  local name=$1; shift
  local t0; t0=$(now)
  "$@" > /dev/null 2>> "$out/err.$name" || echo "NOTE: a '$name' run exited $?: $(tail -1 "$out/err.$name")" >> "$out/notes"
  echo "$(now) - $t0" | bc -l >> "$out/t.$name"
}
rss() { # cmd... : prints peak RSS in MB; a failed run is noted (printed at the end)
  local status=0
  /usr/bin/time -f '%M' -o "$out/rss" "$@" > /dev/null 2> "$out/err.rss" || status=$?
  [ "$status" = 0 ] || echo "NOTE: peak-RSS run of '$*' exited $status: $(grep -v '^Command' "$out/err.rss" | tail -1)" >> "$out/notes"
  echo "$(tail -1 "$out/rss") / 1024" | bc
}
med() { median < "$out/t.$1"; }
kubectl_() { kubectl --server "$URL" --cache-dir "$out/kcache" "$@"; }

echo "# leash bench: $(date -u +%F), $(nproc) cores, quick=$quick, reps=$reps, only4=$only4"

if [ "$only4" = 1 ]; then
  start_sandbox URL --generate "pods=$P" --namespaces 20
  for _ in $(seq 1 "$reps"); do
    timed "leash_p$P" "$LEASH" load --server "$URL" pods -A --page-size 500 --progress never -o ndjson
    python3 bench/plain_list.py "$URL" /api/v1/pods 500 "$P" | awk '{print $2}' >> "$out/t.plain_p$P"
  done
  stop_sandbox URL
  echo
  echo "## Scenario 4: the sandbox alone, $P pods in pages of 500 to a plain HTTP client (bench/plain_list.py)"
  printf "leash median %6.2fs; plain client median %6.2fs (%.0f objects/s); leash/plain %.2fx\n" \
    "$(med "leash_p$P")" "$(med "plain_p$P")" "$(echo "$P/$(med "plain_p$P")" | bc -l)" "$(echo "$(med "leash_p$P")/$(med "plain_p$P")" | bc -l)"
  [ -s "$out/notes" ] && { echo; cat "$out/notes"; }
  exit 0
fi

# ---------------- scenario 1 ----------------
start_sandbox URL --crds "$K:$M" --namespaces 4 --latency 20ms
kinds=$(seq 0 $((K - 1)) | awk '{printf "widget%04ds.example.leash.dev\n", $1}')
kinds_csv=$(echo "$kinds" | head -n "$KL" | paste -sd, -)
kubectl_ get "$(echo "$kinds" | head -1)" -A -o name > /dev/null # warm kubectl's discovery cache
for _ in $(seq 1 "$reps"); do
  for c in 1 4 16 32; do
    timed "leash_c$c" "$LEASH" load --server "$URL" --all -A --page-size 100 --concurrency "$c" --progress never -o ndjson
  done
  timed kubectl_loop bash -c "for k in $(echo "$kinds" | head -n "$KL" | paste -sd' ' -); do kubectl --server $URL --cache-dir $out/kcache get \$k -A -o json --chunk-size=100 > /dev/null || exit 1; done"
  timed kubectl_one kubectl_ get "$kinds_csv" -A -o json --chunk-size=100
done
"$LEASH" load --server "$URL" --all -A --page-size 100 --concurrency 16 --progress never -o ndjson > "$out/s1.ndjson" 2> "$out/s1.summary"
# the limit from the pages leash reported, at 20 ms each
pages=$(python3 - "$out/s1.ndjson" "$M" <<'PY'
import json, sys, collections, math
per = collections.Counter()
for line in open(sys.argv[1]):
    o = json.loads(line)
    per[(o["apiVersion"], o["kind"])] += 1
pages = [max(1, math.ceil(n / 100)) for n in per.values()]
print(max(pages), sum(pages), sum(per.values()))
PY
)
read -r longest total objects <<< "$pages"
echo
echo "## Scenario 1: $K kinds x $M objects, page size 100, 20 ms per request ($objects objects, $total pages, longest kind $longest pages)"
for c in 1 4 16 32; do
  limit=$(echo "l=$longest*0.02; t=$total*0.02/$c; if (l>t) l else t" | bc -l)
  m=$(med "leash_c$c")
  printf "leash --concurrency %-2s  median %6.2fs  limit %6.2fs  leash/limit %.2f\n" "$c" "$m" "$limit" "$(echo "$m/$limit" | bc -l)"
done
l16=$(med leash_c16)
printf "kubectl loop over %s kinds  median %6.2fs  kubectl/leash(c16) %.1fx%s\n" "$KL" "$(med kubectl_loop)" "$(echo "$(med kubectl_loop)/$l16" | bc -l)" "$([ "$KL" != "$K" ] && echo " (kubectl on $KL of $K kinds)")"
printf "kubectl one call, %s kinds  median %6.2fs  kubectl/leash(c16) %.1fx\n" "$KL" "$(med kubectl_one)" "$(echo "$(med kubectl_one)/$l16" | bc -l)"

# ---------------- scenario 3 (same data, faults) ----------------
# The fault-free sandbox of scenario 1 stays up; two faulty ones join it and
# the three are loaded in turn. 429s carry Retry-After: 1 (what API Priority
# and Fairness sends) in one, Retry-After: 0 (the wait left to leash's own
# backoff) in the other. S3 runs are short, so they get 3x the repetitions.
start_sandbox URL_RA1 --crds "$K:$M" --namespaces 4 --latency 20ms --fail-rate 0.05 --throttle-rate 0.05 --retry-after 1
start_sandbox URL_RA0 --crds "$K:$M" --namespaces 4 --latency 20ms --fail-rate 0.05 --throttle-rate 0.05 --retry-after 0
load16() { "$LEASH" load --server "$1" --all -A --page-size 100 --concurrency 16 --progress never -o ndjson "${@:2}"; }
for _ in $(seq 1 $((reps * 3))); do
  timed clean_c16 load16 "$URL"
  timed faulty_ra1 load16 "$URL_RA1"
  timed faulty_ra0 load16 "$URL_RA0"
done
uniq_uids() { # url: "objects unique-uids retries" of one more load
  load16 "$1" --summary json > "$out/s3.ndjson" 2> "$out/s3.summary" || echo "  (load of $1 exited $?)" >&2
  python3 - "$out/s3.ndjson" "$out/s3.summary" <<'PY'
import json, sys
u = [json.loads(l)["metadata"]["uid"] for l in open(sys.argv[1])]
total = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][0]["total"]
print(f"{len(u)} objects, {len(set(u))} unique uids, {total['retries']} retries")
PY
}
u1=$(uniq_uids "$URL_RA1"); u0=$(uniq_uids "$URL_RA0")
kstatus=0; kubectl --server "$URL_RA1" --cache-dir "$out/kcache" get "$kinds_csv" -A -o json --chunk-size=100 > "$out/k3.json" 2> "$out/k3.err" || kstatus=$?
kitems=$(python3 -c 'import json,sys
try: print(len(json.load(open(sys.argv[1]))["items"]))
except Exception as e: print("unparseable")' "$out/k3.json")
c=$(med clean_c16)
echo
echo "## Scenario 3: scenario 1 with 5% 500s and 5% 429s, leash --concurrency 16 ($objects objects fault-free)"
printf "fault-free               median %6.2fs
" "$c"
printf "429 Retry-After: 1       median %6.2fs  vs fault-free %.2fx  (floor for a client that honours it: 1 s + %s pages x 20 ms = %.2fx)  %s
" \
  "$(med faulty_ra1)" "$(echo "$(med faulty_ra1)/$c" | bc -l)" "$longest" "$(echo "(1+$longest*0.02)/$c" | bc -l)" "$u1"
printf "429 Retry-After: 0       median %6.2fs  vs fault-free %.2fx  %s
" \
  "$(med faulty_ra0)" "$(echo "$(med faulty_ra0)/$c" | bc -l)" "$u0"
echo "kubectl one call over $KL kinds (Retry-After: 1): exit $kstatus, items $kitems; last stderr line: $(tail -1 "$out/k3.err")"
stop_sandbox URL_RA1; stop_sandbox URL_RA0; stop_sandbox URL

# ---------------- scenario 2 ----------------
echo
echo "## Scenario 2: one big kind, page size 500, no latency"
for n in $((P / 10)) "$P"; do
  start_sandbox URL --generate "pods=$n" --namespaces 20
  for _ in $(seq 1 "$reps"); do
    timed "leash_p$n" "$LEASH" load --server "$URL" pods -A --page-size 500 --progress never -o ndjson
    if [ "$n" = "$P" ]; then
      timed "kubectl_p$n" kubectl_ get pods -A -o json --chunk-size=500
      python3 bench/plain_list.py "$URL" /api/v1/pods 500 "$n" | awk '{print $2}' >> "$out/t.plain_p$n"
    fi
  done
  lr=$(rss "$LEASH" load --server "$URL" pods -A --page-size 500 --progress never -o ndjson)
  echo "$lr" > "$out/rss.leash.$n"
  if [ "$n" = "$P" ]; then
    kr=$(rss kubectl --server "$URL" --cache-dir "$out/kcache" get pods -A -o json --chunk-size=500)
    printf "%s pods: leash median %6.2fs, peak RSS %s MB; kubectl median %6.2fs, peak RSS %s MB; kubectl/leash time %.1fx, RSS %.1fx\n" \
      "$n" "$(med "leash_p$n")" "$lr" "$(med "kubectl_p$n")" "$kr" "$(echo "$(med "kubectl_p$n")/$(med "leash_p$n")" | bc -l)" "$(echo "$kr/$lr" | bc -l)"
  else
    printf "%s pods: leash median %6.2fs, peak RSS %s MB\n" "$n" "$(med "leash_p$n")" "$lr"
  fi
  stop_sandbox URL
done
printf "leash peak RSS %s pods / %s pods: %.2fx\n" "$P" "$((P / 10))" "$(echo "$(cat "$out/rss.leash.$P")/$(cat "$out/rss.leash.$((P / 10))")" | bc -l)"

echo
echo "## Scenario 4: the sandbox alone, $P pods in pages of 500 to a plain HTTP client (bench/plain_list.py)"
printf "plain client median %6.2fs (%.0f objects/s); leash/plain %.2fx\n" \
  "$(med "plain_p$P")" "$(echo "$P/$(med "plain_p$P")" | bc -l)" "$(echo "$(med "leash_p$P")/$(med "plain_p$P")" | bc -l)"
[ -s "$out/notes" ] && { echo; cat "$out/notes"; }
exit 0
