# Sourced by the bench/real_*.sh scripts: starts the real control plane of
# testenv/ (built if missing) for the rest of the calling script, with
# leash's CRDs and deploy/leash.yaml applied.
#
# Sets: out (a temporary directory, removed on exit), cp_pid, KUBECONFIG
# (exported, the admin's), SERVER, $out/ca.pem (the server's CA), and
# $out/leash.kubeconfig (deploy/leash.yaml's ServiceAccount, for `leash
# serve`). Defines sa_token NS NAME (a 2-hour token).
[ -x testenv/bin/controlplane ] && [ -x testenv/bin/kubectl ] || testenv/build.sh kubectl controlplane
export PATH="$PWD/testenv/bin:$PATH"
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"' EXIT

# The control plane ends when the calling script does (its stdin closes).
mkfifo "$out/stdin"
controlplane --exit-on-stdin-close --log "$out/controlplane.log" < "$out/stdin" > "$out/ready" &
cp_pid=$!
exec 3> "$out/stdin"
for _ in $(seq 600); do [ -s "$out/ready" ] && break; sleep 0.1; done
[ -s "$out/ready" ] || { echo "the control plane did not start"; tail "$out/controlplane.log"; exit 1; }
ready=$(head -1 "$out/ready")
field() { python3 -c "import sys,json; print(json.loads(sys.argv[1])['$1'])" "$ready"; }
export KUBECONFIG=$(field kubeconfig)
SERVER=$(field server)
kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$out/ca.pem"

kubectl apply --server-side -f deploy/crds > /dev/null
kubectl wait --for=condition=Established crd --all --timeout=60s > /dev/null
kubectl apply -f deploy/leash.yaml > /dev/null

sa_token() { kubectl create token "$2" -n "$1" --duration=2h; }
cat > "$out/leash.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: real, cluster: {server: "$SERVER", certificate-authority: "$out/ca.pem"}}]
users: [{name: leash, user: {token: "$(sa_token kyverno leash)"}}]
contexts: [{name: real, context: {cluster: real, user: leash}}]
current-context: real
KC
