#!/bin/bash
# What verifyImages adds to admission with a warm verification cache
# (issue 42): pods created through the sandbox with `leash serve`'s webhook,
# (a) with a baseline ClusterPolicy only and (b) with the same policy plus
# an Enforce verifyImages policy (a cosign public key; mutateDigest and
# verifyDigest off, so both runs call the validating webhook only) whose
# image is signed in a local docker-registry. Each pod uses that image, so
# after the first review every verification is served from the cache. Both
# in one run, alternating; prints p50/p99 of each and the difference
# (docs/BENCHMARKS.md, "Image verification at admission").
#
#   bench/admission_images.sh [CLIENTS] [REPS]   (default 10 clients, 3 reps)
#   LEASH=... LOADGEN=... PUSH=... skip the builds.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-10} reps=${2:-3}
if [ -z "${LEASH:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q --locked -p leash -p leash-loadgen
fi
if [ -z "${PUSH:-}" ]; then
  cargo build --release -q --locked -p leash-images --example push --features testing
fi
L=${LEASH:-target/release/leash} G=${LOADGEN:-target/release/leash-loadgen}
P=${PUSH:-target/release/examples/push}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$out/registry" "$(port)" > "$out/registry.yml"
host=$(sed -n 's/.*addr: //p' "$out/registry.yml")
docker-registry serve "$out/registry.yml" > /dev/null 2>&1 &
for _ in $(seq 100); do "$P" image "$host" team/app:1 --sign 1 > /dev/null 2>&1 && break; sleep 0.1; done
image="$host/team/app:1"
"$P" image "$host" team/unsigned:1 > /dev/null

mkdir -p "$out/base" "$out/verify"
cat > "$out/base/policy.yaml" <<YAML
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-app-label}
spec:
  validationFailureAction: Enforce
  background: false
  rules:
  - name: app-label
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: "an app label is required", pattern: {metadata: {labels: {app: "?*"}}}}
YAML
cp "$out/base/policy.yaml" "$out/verify/policy.yaml"
{
  printf 'apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: signed-images}\n'
  printf 'spec:\n  validationFailureAction: Enforce\n  background: false\n  rules:\n  - name: check-signature\n'
  printf '    match: {any: [{resources: {kinds: [Pod]}}]}\n    verifyImages:\n'
  printf '    - imageReferences: ["%s/team/*"]\n      mutateDigest: false\n      verifyDigest: false\n' "$host"
  printf '      attestors:\n      - entries:\n        - keys:\n            publicKeys: |-\n'
  "$P" pubkey 1 | sed 's/^/              /'
  printf '            rekor: {ignoreTlog: true}\n'
} > "$out/verify/signed.yaml"

start() { # name -> URL of a sandbox with leash serve's webhook registered
  local name=$1 health
  "$L" sandbox --data deploy/crds --data "$out/$name" > "$out/$name.url" 2> "$out/$name.sandbox.err" &
  for _ in $(seq 100); do [ -s "$out/$name.url" ] && break; sleep 0.1; done
  local url; url=$(head -1 "$out/$name.url")
  curl -sf -X POST -H 'Content-Type: application/json' "$url/api/v1/namespaces" \
    -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kyverno"}}' > /dev/null
  health=127.0.0.1:$(port)
  "$L" serve --server "$url" --components admission --admission-listen 127.0.0.1:0 \
    --health "$health" --admission-reports=false --registry-timeout 5s > "$out/$name.serve.log" 2>&1 &
  for _ in $(seq 300); do curl -sf "http://$health/readyz" > /dev/null && break; sleep 0.1; done
  echo "$url"
}
base_url=$(start base)
verify_url=$(start verify)
# The policy is served: an unsigned image is denied (else the figures
# below would not measure a verification).
denied=$("$G" pods --server "$verify_url" --clients 1 --requests 1 --violating-every 0 \
  --image "$host/team/unsigned:1" --json 2>/dev/null | tee "$out/denied.json" | python3 -c 'import sys,json; print(json.load(sys.stdin)["denied"])')
[ "$denied" = 1 ] || { echo "bench/admission_images.sh: an unsigned image was not denied: $(cat "$out/denied.json"; tail -3 "$out/verify.serve.log")" >&2; exit 1; }
# Warm: the first review of the image fetches and verifies once.
"$G" pods --server "$verify_url" --clients 1 --requests 1 --violating-every 0 --image "$image" > /dev/null
row() { # label url
  "$G" pods --server "$2" --clients "$clients" --duration 5 --violating-every 0 --image "$image" --json |
    python3 -c "import sys,json; d=json.load(sys.stdin); l=d['latency_ms']; print('%-13s %7.0f req/s  p50 %6.2f  p99 %6.2f ms  denied %d  errors %d' % ('$1', d['requests_per_second'], l['p50'], l['p99'], d['denied'], d['error_count']) + (' %s' % d['errors'] if d['error_count'] else ''))"
}
echo "# pods through the sandbox, $clients clients, $(nproc) cores, image $image (signed, verified from the cache)"
for _ in $(seq 1 "$reps"); do
  row baseline "$base_url" | tee -a "$out/rows"
  row verifyImages "$verify_url" | tee -a "$out/rows"
done
python3 - "$out/rows" <<'PY'
import statistics, sys, re
rows = {}
for line in open(sys.argv[1]):
    name = line.split()[0]
    p50, p99 = (float(x) for x in re.findall(r'p(?:50|99)\s+([\d.]+)', line))
    rows.setdefault(name, []).append((p50, p99))
b = rows['baseline']; v = rows['verifyImages']
m = lambda xs, i: statistics.median(x[i] for x in xs)
print(f"median of {len(b)} runs: baseline p50 {m(b,0):.2f} p99 {m(b,1):.2f} ms; verifyImages p50 {m(v,0):.2f} p99 {m(v,1):.2f} ms; "
      f"added p50 {m(v,0)-m(b,0):+.2f} ms, p99 {m(v,1)-m(b,1):+.2f} ms")
PY
