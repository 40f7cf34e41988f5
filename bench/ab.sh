#!/usr/bin/env bash
# A/B of leash builds on one workload, in one run: each round runs
# `leash load pods -A` (the first binary) and then `leash apply SET --cluster
# -A` with each binary in turn, against one sandbox of generated pods; prints
# the median wall and CPU (user + system) seconds of each, and each apply's
# summary line (the builds must agree).
#
#   bench/ab.sh [--set pss-classic|pss-cel] [--pods N] [--reps R] BIN...
#
# Alternating the binaries within each round is what makes the comparison
# fair on a machine whose load varies. Needs GNU time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

set_name=pss-classic pods=100000 reps=5
while [ $# -gt 0 ]; do
  case "$1" in
    --set) set_name="$2"; shift ;;
    --pods) pods="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    -*) echo "usage: bench/ab.sh [--set pss-classic|pss-cel] [--pods N] [--reps R] BIN..." >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || { echo "bench/ab.sh: name at least one leash binary" >&2; exit 2; }
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

"$1" sandbox --seed 1 --generate "pods=$pods" --namespaces 20 > "$out/url" 2> "$out/sandbox.err" &
for _ in $(seq 1 600); do [ -s "$out/url" ] && break; sleep 0.2; done
[ -s "$out/url" ] || { echo "the sandbox did not start:" >&2; cat "$out/sandbox.err" >&2; exit 1; }
url=$(head -1 "$out/url")

run() { # slot cmd...: appends "wall cpu" to $out/slot (exit 1 of apply: failing policies)
  local slot=$1; shift
  /usr/bin/time -o "$out/time" -f '%e %U %S' "$@" > /dev/null 2> /dev/null || [ $? = 1 ]
  awk '{print $1, $2 + $3}' "$out/time" | tail -1 >> "$out/$slot"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "# bench/ab.sh: $(date -u +'%F %H:%M UTC'), $(nproc) cores, $pods pods, $set_name, $reps rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq 1 "$reps"); do
  run load "$1" load pods --server "$url" -A --progress never -o ndjson
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    run "apply$i" "$bin" apply "bench/policies/$set_name" --cluster --server "$url" -A
  done
done
i=0
for bin in "$@"; do # each build's summary, from one more (untimed) run
  i=$((i + 1))
  "$bin" apply "bench/policies/$set_name" --cluster --server "$url" -A 2> /dev/null | tail -n 1 > "$out/summary$i" || true
done
row() { # label slot
  printf '%-50s wall %6.2fs  CPU %6.2fs\n' "$1" "$(cut -d' ' -f1 "$out/$2" | median)" "$(cut -d' ' -f2 "$out/$2" | median)"
}
row "leash load pods -A ($1)" load
i=0
for bin in "$@"; do
  i=$((i + 1))
  row "apply $set_name -A ($bin)" "apply$i"
  echo "    $(cat "$out/summary$i")"
done
