"""Scenario 4's plain HTTP client: the floor a list client cannot beat.

    python3 bench/plain_list.py URL PATH LIMIT EXPECTED

One keep-alive connection; every page of the list read whole as bytes (items
are not parsed), its continue token taken from the list's metadata, which
precedes the items. Checks that it read ceil(EXPECTED / LIMIT) pages and
prints "objects seconds pages bytes".
"""
import http.client, json, re, sys, time, urllib.parse

url, path, limit, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
cont, pages, nbytes = "", 0, 0
t0 = time.perf_counter()
while True:
    q = f"{path}?limit={limit}" + (f"&continue={urllib.parse.quote(cont)}" if cont else "")
    conn.request("GET", q, headers={"Accept": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"GET {q}: HTTP {r.status}: {body[:200]!r}")
    pages += 1
    nbytes += len(body)
    m = re.search(rb'"continue":"([^"]*)"', body[:1024])
    cont = m.group(1).decode() if m else ""
    if not cont:
        break
elapsed = time.perf_counter() - t0
want = -(-expected // limit)
if pages != want:
    sys.exit(f"{pages} pages, expected {want}")
print(expected, f"{elapsed:.3f}", pages, nbytes)
