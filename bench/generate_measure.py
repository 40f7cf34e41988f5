#!/usr/bin/env python3
"""Measures `leash serve --components admission,background` (bench/generate.sh).

    generate_measure.py SANDBOX_URL SERVE_PID TRIGGERS TOTAL

1. The limit: TRIGGERS ConfigMaps created directly, 50 at a time: the
   latency of one object appearing in the API at that concurrency.
2. TRIGGERS namespaces labelled bench=yes created through admission, 50 at
   a time, while a watch records when each one's downstream ConfigMap
   appears: trigger-creation-to-downstream latency (p50, p99), and
   UpdateRequests processed per second (triggers / time until the last
   UpdateRequest is gone).
3. More namespaces up to TOTAL, then the serve process's peak RSS with TOTAL
   downstreams under watch.
Prints one JSON line. Standard library only.
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

url, pid, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
CONCURRENCY = 50


def request(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def create(path, body):
    """Creates until admitted (a denial or a transient error is retried)."""
    for _ in range(100):
        try:
            return request("POST", path, body)
        except urllib.error.HTTPError as e:
            if e.code == 409:
                return None
            time.sleep(0.05)
    sys.exit(f"never created: {path} {body['metadata']['name']}")


def count(path):
    # A whole list: with a label selector, remainingItemCount is not given.
    return len(request("GET", path)["items"])


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def peak_rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed_creates(items):
    """(name, start, end) of each create, CONCURRENCY at a time."""
    def one(item):
        path, body = item
        t = time.time()
        create(path, body)
        return body["metadata"]["name"], t, time.time()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, items))


# The webhook is registered and generating before anything is measured.
create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": "probe", "labels": {"bench": "yes"}}})
deadline = time.time() + 120
while True:
    try:
        request("GET", "/api/v1/namespaces/probe/configmaps/defaults")
        break
    except urllib.error.HTTPError:
        if time.time() > deadline:
            sys.exit("the probe namespace never got its downstream")
        time.sleep(0.1)

# 1. The limit: plain creates of the downstream kind.
request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "direct"}})
direct = timed_creates([("/api/v1/namespaces/direct/configmaps",
                         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:05}"},
                          "data": {"namespace": "direct"}}) for i in range(n)])
direct_lat = [e - s for _, s, e in direct]

# 2. Triggers through admission, downstreams watched.
seen = {}
rv = request("GET", "/api/v1/configmaps?limit=1")["metadata"]["resourceVersion"]
ready = threading.Event()


def watch():
    req = url + ("/api/v1/configmaps?watch=1&labelSelector=generate.kyverno.io/policy-name%3Dbench-generate"
                 f"&resourceVersion={rv}&allowWatchBookmarks=false")
    with urllib.request.urlopen(req, timeout=600) as r:
        ready.set()
        for line in r:
            ev = json.loads(line)
            if ev["type"] == "ADDED":
                ns = ev["object"]["metadata"]["namespace"]
                seen.setdefault(ns, time.time())
            if len(seen) >= n and all(f"t-{i:05}" in seen for i in range(n)):
                return


w = threading.Thread(target=watch, daemon=True)
w.start()
ready.wait(10)
t0 = time.time()
triggers = timed_creates([("/api/v1/namespaces",
                           {"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": f"t-{i:05}", "labels": {"bench": "yes"}}}) for i in range(n)])
w.join(600)
missing = [name for name, _, _ in triggers if name not in seen]
if missing:
    sys.exit(f"{len(missing)} triggers without a downstream, e.g. {missing[:3]}")
gen_lat = [seen[name] - s for name, s, _ in triggers]
last_downstream = max(seen[name] for name, _, _ in triggers)
while count("/apis/kyverno.io/v2/namespaces/kyverno/updaterequests") > 0:
    if time.time() - t0 > 600:
        sys.exit("UpdateRequests left after 600 s")
    time.sleep(0.02)
ur_done = time.time()

# 3. Up to TOTAL downstreams under watch.
more = total - n - 1
timed_creates([("/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace",
                  "metadata": {"name": f"m-{i:05}", "labels": {"bench": "yes"}}}) for i in range(more)])
deadline = time.time() + 600
while count("/api/v1/configmaps?labelSelector=generate.kyverno.io/policy-name%3Dbench-generate") < total:
    if time.time() > deadline:
        sys.exit(f"fewer than {total} downstreams after 600 s")
    time.sleep(0.2)
time.sleep(2)

print(json.dumps({
    "triggers": n,
    "direct_create_p50_ms": round(pct(direct_lat, 50) * 1000, 1),
    "direct_create_p99_ms": round(pct(direct_lat, 99) * 1000, 1),
    "trigger_to_downstream_p50_ms": round(pct(gen_lat, 50) * 1000, 1),
    "trigger_to_downstream_p99_ms": round(pct(gen_lat, 99) * 1000, 1),
    "all_downstreams_s": round(last_downstream - t0, 2),
    "update_requests_per_s": round(n / (ur_done - t0), 1),
    "downstreams": total,
    "peak_rss_mib": round(peak_rss_mib(), 1),
}))
