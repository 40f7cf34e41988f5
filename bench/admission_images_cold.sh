#!/bin/bash
# What a cold verifyImages review costs, and whether the round trips of a
# pod's images are made concurrently (issue 42): `leash serve`'s webhook on
# a sandbox, an Enforce verifyImages ClusterPolicy (a cosign public key;
# mutateDigest and verifyDigest off) for a local docker-registry's `cold/*`
# images. Each row creates ONE pod whose N images were never reviewed
# (fresh images pushed for it), so its review fetches every image's
# manifest, config, signature manifest and signature blob; then the same
# pod again (warm: every answer kept). A registry read sequentially would
# cost N times one image's round trips; read concurrently, about one.
# Prints each row and, per N, the median cold and warm latency of REPS
# pods and cold(N) / cold(1) (docs/BENCHMARKS.md, "Image verification at
# admission").
#
# LATENCY_MS (default 20) puts a proxy in front of the registry that
# holds every request that long, as a registry across a network would
# (on 127.0.0.1 a round trip costs nothing, and the figures would measure
# the registry's CPU on this machine's 2 cores instead); LATENCY_MS=0
# reads the registry directly.
#
#   bench/admission_images_cold.sh [REPS]   (default 5; N = 1, 4, 8)
#   LEASH=... LOADGEN=... PUSH=... skip the builds.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
latency=${LATENCY_MS:-20}
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
for _ in $(seq 100); do "$P" image "$host" cold/probe:1 --sign 1 > /dev/null 2>&1 && break; sleep 0.1; done
# What leash reads: the registry, or the delaying proxy in front of it
# (pushes go to the registry itself).
via=$host
if [ "$latency" != 0 ]; then
  via=127.0.0.1:$(port)
  python3 - "$via" "$host" "$latency" <<'PY' &
import asyncio, sys
listen, upstream, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]) / 1000
async def pipe(reader, writer, hold):
    try:
        while data := await reader.read(65536):
            if hold:
                await asyncio.sleep(delay)  # one request's round trip
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
async def client(r, w):
    host, port = upstream.rsplit(":", 1)
    ur, uw = await asyncio.open_connection(host, int(port))
    await asyncio.gather(pipe(r, uw, True), pipe(ur, w, False))
async def main():
    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(client, host, int(port))
    async with server:
        await server.serve_forever()
asyncio.run(main())
PY
  for _ in $(seq 100); do curl -sf "http://$via/v2/" > /dev/null && break; sleep 0.1; done
fi

mkdir -p "$out/verify"
{
  printf 'apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: signed-images}\n'
  printf 'spec:\n  validationFailureAction: Enforce\n  background: false\n  rules:\n  - name: check-signature\n'
  printf '    match: {any: [{resources: {kinds: [Pod]}}]}\n    verifyImages:\n'
  printf '    - imageReferences: ["%s/cold/*"]\n      mutateDigest: false\n      verifyDigest: false\n' "$via"
  printf '      attestors:\n      - entries:\n        - keys:\n            publicKeys: |-\n'
  "$P" pubkey 1 | sed 's/^/              /'
  printf '            rekor: {ignoreTlog: true}\n'
} > "$out/verify/signed.yaml"

"$L" sandbox --data deploy/crds --data "$out/verify" > "$out/url" 2> "$out/sandbox.err" &
for _ in $(seq 100); do [ -s "$out/url" ] && break; sleep 0.1; done
url=$(head -1 "$out/url")
curl -sf -X POST -H 'Content-Type: application/json' "$url/api/v1/namespaces" \
  -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kyverno"}}' > /dev/null
health=127.0.0.1:$(port)
"$L" serve --server "$url" --components admission --admission-listen 127.0.0.1:0 \
  --health "$health" --admission-reports=false --registry-timeout 5s > "$out/serve.log" 2>&1 &
for _ in $(seq 300); do curl -sf "http://$health/readyz" > /dev/null && break; sleep 0.1; done
"$P" image "$host" cold/unsigned:1 > /dev/null
one() { # images... -> latency of one pod's review, ms; exits when not admitted
  local args=() i
  for i in "$@"; do args+=(--image "$i"); done
  "$G" pods --server "$url" --clients 1 --requests 1 --violating-every 0 "${args[@]}" --json |
    python3 -c 'import sys,json; d=json.load(sys.stdin); assert d["denied"]==0 and d["error_count"]==0, d; print("%.2f" % d["latency_ms"]["p50"])'
}
# The policy is served: an unsigned image is denied.
if "$G" pods --server "$url" --clients 1 --requests 1 --violating-every 0 \
  --image "$via/cold/unsigned:1" --json | grep -q '"denied": *0'; then
  echo "bench/admission_images_cold.sh: an unsigned image was admitted: $(tail -3 "$out/serve.log")" >&2; exit 1
fi
echo "# one pod per row through the sandbox, $(nproc) cores; N fresh signed images, cold then warm; registry latency ${latency} ms per request"
for rep in $(seq 1 "$reps"); do
  for n in 1 4 8; do
    images=()
    for i in $(seq 1 "$n"); do
      "$P" image "$host" "cold/r$rep-n$n-$i:1" --sign 1 > /dev/null
      images+=("$via/cold/r$rep-n$n-$i:1")
    done
    cold=$(one "${images[@]}")
    warm=$(one "${images[@]}")
    echo "n=$n cold $cold ms warm $warm ms" | tee -a "$out/rows"
  done
done
python3 - "$out/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(int(f[0][2:]), []).append((float(f[2]), float(f[5])))
one = statistics.median(c for c, _ in rows[1])
for n in sorted(rows):
    cold = statistics.median(c for c, _ in rows[n]); warm = statistics.median(w for _, w in rows[n])
    print(f"N={n}: median cold {cold:.2f} ms, warm {warm:.2f} ms; cold(N)/cold(1) {cold / one:.2f} (sequential would be about {n})")
PY
