#!/usr/bin/env python3
"""Measures a running `leash serve` against a sandbox (used by bench/serve.sh).

    serve_measure.py SANDBOX_URL SERVE_PID EXPECTED_REPORTS LATENCY_PODS [POLL_SECONDS]

1. Waits until EXPECTED_REPORTS PolicyReports exist and no EphemeralReport is
   left (two counting LISTs every POLL_SECONDS, default 0.05): prints the
   seconds since the serve process started (from /proc).
2. Creates LATENCY_PODS pods one by one (20 per second) while watching
   PolicyReports, and prints p50/p99/max of creation-to-report latency.
3. Prints the serve process's peak RSS (VmHWM) and CPU seconds.
Standard library only.
"""
import json
import os
import sys
import threading
import time
import urllib.request

url, pid, expected, n_pods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
poll = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
TICK = os.sysconf("SC_CLK_TCK")


def get(path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return json.load(r)


def count(path):
    doc = get(path + "?limit=1")
    return len(doc["items"]) + int(doc["metadata"].get("remainingItemCount") or 0)


def proc_start_seconds_ago():
    with open(f"/proc/{pid}/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / TICK


def cpu_seconds():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# 1. The first full scan.
deadline = time.time() + 600
while True:
    reports = count("/apis/wgpolicyk8s.io/v1alpha2/policyreports")
    eph = count("/apis/reports.kyverno.io/v1/ephemeralreports")
    if reports >= expected and eph == 0:
        break
    if time.time() > deadline:
        sys.exit(f"first scan not done after 600 s: {reports} reports, {eph} ephemeral")
    time.sleep(poll)
first_scan = proc_start_seconds_ago()
cpu_first = cpu_seconds()

# 2. Creation-to-report latency.
created = {}
reported = {}
lock = threading.Condition()
rv = get("/apis/wgpolicyk8s.io/v1alpha2/policyreports?limit=1")["metadata"]["resourceVersion"]


def watch():
    req = url + f"/apis/wgpolicyk8s.io/v1alpha2/policyreports?watch=1&resourceVersion={rv}"
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            ev = json.loads(line)
            name = ev["object"].get("scope", {}).get("name", "")
            if ev["type"] in ("ADDED", "MODIFIED") and name.startswith("latency-"):
                with lock:
                    reported.setdefault(name, time.monotonic())
                    lock.notify_all()
                    if len(reported) >= n_pods:
                        return


watcher = threading.Thread(target=watch, daemon=True)
watcher.start()
time.sleep(0.2)
for i in range(n_pods):
    name = f"latency-{i}"
    body = json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                                 "securityContext": {"privileged": i % 2 == 0}}]},
    }).encode()
    req = urllib.request.Request(url + "/api/v1/namespaces/default/pods", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    t0 = time.monotonic()
    urllib.request.urlopen(req, timeout=30).read()
    created[name] = t0
    time.sleep(0.05)
with lock:
    lock.wait_for(lambda: len(reported) >= n_pods, timeout=60)
lat = sorted((reported[n] - created[n]) for n in created if n in reported)
if len(lat) < n_pods:
    sys.exit(f"only {len(lat)} of {n_pods} pods got a report within 60 s")


def pct(p):
    return lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))]


print(json.dumps({
    "first_scan_s": round(first_scan, 2),
    "cpu_s_first_scan": round(cpu_first, 2),
    "peak_rss_mib": round(peak_rss_mib(), 1),
    "latency_p50_ms": round(pct(50) * 1000, 1),
    "latency_p99_ms": round(pct(99) * 1000, 1),
    "latency_max_ms": round(lat[-1] * 1000, 1),
    "cpu_s_total": round(cpu_seconds(), 2),
}))
