"""The operator console on the admin listener, in headless Chromium (Debian
package `chromium`): each page is loaded, its DOM checked for what the test
made happen, and a screenshot kept under target/test-output/console/. No page
or API path opens without an admin caller's credentials once admin callers are
configured, and none ever shows a redacted argument."""

import base64
import json
import os
import pathlib
import re
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT, WARDEN
from otel_peers import TOOLS, Gateway, Upstream

KEYS = {"ALICE_KEY": "alice-admin-key", "BOB_KEY": "bob-plain-key"}
OUT = pathlib.Path(os.environ.get("WARDEN_TEST_OUTPUT", ROOT / "target" / "test-output")) / "console"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = ["/", "/catalogue", "/catalogue?caller=bob", "/calls", "/calls/1", "/pins", "/quotas",
         "/calls?before=2", "/api/overview", "/api/catalogue?caller=bob", "/api/calls", "/api/calls/1",
         "/api/pins", "/api/quotas", "/nope"]


def config_text(up, tmp_path, admin):
    return f"""
    [gateway]
    front = "http"

    [[caller]]
    name = "alice"
    api_key_env = "ALICE_KEY"
    groups = ["ops"]

    [[caller]]
    name = "bob"
    api_key_env = "BOB_KEY"

    [[rule]]
    callers = ["bob"]
    tools = ["up.secret"]
    effect = "deny"

    [[rule]]
    callers = ["*"]
    tools = ["up.risky"]
    effect = "ask"

    [[upstream]]
    name = "up"
    url = "{up.base}/mcp"
    unknown_arguments = "warn"

    [store]
    url = "sqlite://{tmp_path}/warden.db"

    [audit]
    redact = ["password"]

    [admin]
    listen = "127.0.0.1:0"
    {admin}
    """


@pytest.fixture
def upstream():
    up = Upstream()
    yield up
    up.close()


def chromium(url, name=None):
    """Loads `url` in headless Chromium: (its DOM, its log); with `name`, also a
    screenshot at OUT/name.png."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: scripts/test installs the Debian package")
    OUT.mkdir(parents=True, exist_ok=True)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--window-size=1280,1000"]
    runs = [["--dump-dom"]] + ([[f"--screenshot={OUT / (name + '.png')}"]] if name else [])
    outputs = []
    for extra in runs:
        with tempfile.TemporaryDirectory() as profile:
            r = subprocess.run([CHROMIUM, *flags, f"--user-data-dir={profile}", *extra, url],
                               capture_output=True, text=True, timeout=90)
            outputs.append((r.stdout, r.stderr))
    if name:
        shot = OUT / (name + ".png")
        assert shot.exists() and shot.stat().st_size > 1000, outputs[-1][1][-2000:]
    return outputs[0]


def section(dom, element_id):
    """The HTML of the element with `element_id` (a table or list: its whole text)."""
    m = re.search(rf'<(\w+)[^>]*id="{element_id}".*?</\1>', dom, re.S)
    assert m, f"no #{element_id} in the page"
    return m.group(0)


def basic(key):
    return "Basic " + base64.b64encode(f"admin:{key}".encode()).decode()


def make_calls(gw):
    alice, bob = KEYS["ALICE_KEY"], KEYS["BOB_KEY"]
    gw.open_session(bob)
    gw.open_session(alice)
    r = gw.call(bob, 1, "up.secret", {})
    assert r["error"]["message"] == "Unknown tool 'up.secret'."
    gw.call(bob, 2, "up.echo", {"text": "hi", "password": "hunter2"})
    r = gw.call(alice, 3, "up.risky", {})
    assert r["result"]["isError"] is True


def test_the_console_shows_what_happened_and_only_to_admins(upstream, config, tmp_path):
    admin = 'callers = ["group:ops"]'
    gw = Gateway(config(config_text(upstream, tmp_path, admin)), env=KEYS, admin=True)
    try:
        make_calls(gw)
        # No page or API path without credentials, nor for a caller who is no admin.
        for path in PAGES:
            status, ctype, body = gw.get(path)
            assert status == 401, path
            assert "hunter2" not in body and "up.secret" not in body
            for header in ({"Authorization": f"Bearer {KEYS['BOB_KEY']}"}, {"Authorization": basic(KEYS["BOB_KEY"])}):
                status, _, body = gw.get(path, header)
                assert status == 403, path
                assert "This caller is not one of the [admin] callers." in body
            status, _, _ = gw.get(path, {"Authorization": "Bearer wrong"})
            assert status == 401
        assert gw.get("/metrics")[0] == 200  # scrapers keep the access they had

        # The JSON API: the same data the pages show.
        auth = {"Authorization": f"Bearer {KEYS['ALICE_KEY']}"}
        status, ctype, body = gw.get("/api/calls?caller=bob&outcome=refused", auth)
        assert (status, ctype) == (200, "application/json")
        calls = json.loads(body)["calls"]
        assert [(c["tool"], c["decision"]) for c in calls] == [("up.secret", "unknown_tool")]
        echo = json.loads(gw.get("/api/calls?tool=up.echo", auth)[2])["calls"][0]
        detail = json.loads(gw.get(f"/api/calls/{echo['id']}", auth)[2])
        assert detail["arguments"] == {"text": "hi", "password": "[redacted]"}
        assert detail["unknown_keys"] == ["password"]
        catalogue = json.loads(gw.get("/api/catalogue?caller=bob", auth)[2])
        assert [t["name"] for t in catalogue["tools"]] == ["up.echo", "up.risky"]
        assert catalogue["rules"][0]["decides"] == ["up.secret"]

        # The pages, in a real browser, without credentials: refused.
        base = gw.admin
        for path in ["/", "/catalogue?caller=bob", "/calls", f"/calls/{echo['id']}", "/api/calls"]:
            dom, log = chromium(base + path)
            assert "ERR_INVALID_AUTH_CREDENTIALS" in log, log[-2000:]
            assert "up.secret" not in dom and "Upstreams" not in dom and "hunter2" not in dom
        # A caller who is no admin is told so.
        bob = base.replace("http://", f"http://admin:{KEYS['BOB_KEY']}@")
        dom, _ = chromium(bob + "/calls", "refused-not-admin")
        assert "This caller is not one of the [admin] callers." in dom and "up.secret" not in dom

        # With an admin's credentials (HTTP Basic, as a browser sends them).
        creds = base.replace("http://", f"http://admin:{KEYS['ALICE_KEY']}@")
        dom, _ = chromium(creds + "/", "overview")
        upstreams = section(dom, "upstreams")
        assert "up" in upstreams and "running" in upstreams and "http" in upstreams
        assert "unknown_tool / refused: 1" in section(dom, "per-minute")

        dom, _ = chromium(creds + "/catalogue?caller=bob", "catalogue-bob")
        shown = section(dom, "catalogue")
        assert "up.echo" in shown and "up.risky" in shown
        assert "up.secret" not in shown  # hidden from bob
        rules = section(dom, "rules")
        assert "up.secret" in rules and "deny" in rules

        dom, _ = chromium(creds + "/calls?caller=bob&outcome=refused", "calls-refused")
        rows = section(dom, "calls")
        assert "up.secret" in rows and "unknown_tool" in rows
        assert "hidden from the caller, or no such tool (G2)" in rows
        assert "up.echo" not in rows

        dom, _ = chromium(creds + "/calls", "calls")
        rows = section(dom, "calls")
        assert "up.risky" in rows and "denied" in rows
        dom, _ = chromium(creds + f"/calls/{echo['id']}", "call-detail")
        assert "[redacted]" in section(dom, "arguments")
        assert "hunter2" not in dom
        assert "password" in section(dom, "call")  # named as an undeclared key
    finally:
        gw.close()


def local_non_loopback_ip():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


def test_without_admin_callers_the_console_is_for_loopback_only(upstream, config, tmp_path):
    text = config_text(upstream, tmp_path, "").replace('listen = "127.0.0.1:0"', 'listen = "0.0.0.0:0"')
    gw = Gateway(config(text), env=KEYS, admin=True)
    try:
        make_calls(gw)
        port = gw.admin.rsplit(":", 1)[1]
        gw.admin = f"http://127.0.0.1:{port}"
        for path in PAGES[:-1]:
            assert gw.get(path)[0] == 200, path
        ip = local_non_loopback_ip()
        if ip is None:
            pytest.skip("this machine has no non-loopback address to come from")
        gw.admin = f"http://{ip}:{port}"
        for path in PAGES:
            # Named by an address that is not loopback: refused for its Host (O4) ...
            status, _, body = gw.get(path)
            assert status == 403, path
            assert "this host name is not allowed" in body, body
            # ... and with a loopback Host, for where the client is.
            status, _, body = gw.get(path, headers={"Host": f"127.0.0.1:{port}"})
            assert status == 403, path
            assert "open to loopback clients only" in body, body
    finally:
        gw.close()


GUARD = """
    [[guard]]
    name = "leaks"
    on = ["results"]
    detect = ["secrets"]
    action = "redact"
"""

REFUSALS = ["unknown_tool", "rate_limited", "denied", "unknown_tool", "flow_denied"]


def bulk_record(i, t):
    """The i-th of the 10,000 records, at `t` ms: the row as the gateway writes it
    (its JSON, and the columns the console counts from)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t / 1000)) + f".{t % 1000:03d}Z"
    outcome = "refused" if i % 7 == 0 else ("tool_error" if i % 11 == 0 else "ok")
    decision = REFUSALS[i % 5] if outcome == "refused" else "allowed"
    upstream = ["up", "db", "search"][i % 3] if outcome != "refused" else None
    duration = 0.1 if outcome == "refused" else float(1 + (i * 37) % 200) * (1 + i % 3)
    findings = ([{"guard": "leaks", "detector": "secrets", "kind": ["aws_key", "github_token"][i % 2],
                  "path": "/content/0/text", "count": 1, "action": "redact"}] if i % 13 == 0 and outcome == "ok" else [])
    record = {"time": stamp, "session": "bulk", "caller": f"c{i % 50}", "tool": f"up.t{i % 30}",
              "upstream": upstream, "arguments": {"n": i}, "reason": None, "unknown_keys": [],
              "unknown_mode": None, "decision": decision, "outcome": outcome, "duration_ms": duration,
              "idempotency_key": None, "replayed": False}
    if findings:
        record["findings"] = findings
    return (t, record["caller"], record["tool"], outcome, json.dumps(record), decision, upstream, duration,
            json.dumps(findings) if findings else None)


def test_ten_thousand_audit_records(upstream, config, tmp_path):
    """Fills the trail with 10,000 records (the last ten minutes: every one of
    them counts in the charts) and loads every page. Each page's time is
    printed for the record (issue 30's bar: 100 ms); it is not a test of speed,
    which a shared 2-core machine cannot time, unless WARDEN_CONSOLE_BAR_MS
    names a bar to hold (for a run on a quiet machine)."""
    path = config(config_text(upstream, tmp_path, "") + GUARD)
    gw = Gateway(path, env=KEYS, admin=True)
    make_calls(gw)
    gw.close()
    db = sqlite3.connect(tmp_path / "warden.db")
    now = int(time.time() * 1000)
    rows = [bulk_record(i, now - i * 50) for i in range(10_000)]
    db.executemany("INSERT INTO audit (time_ms, caller, tool, outcome, record, decision, upstream, duration_ms, findings)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    gw = Gateway(path, env=KEYS, admin=True)
    bar = float(os.environ["WARDEN_CONSOLE_BAR_MS"]) if os.environ.get("WARDEN_CONSOLE_BAR_MS") else None
    try:
        slow = []
        for page in ["/", "/charts", "/approvals", "/calls", "/calls?caller=c7&outcome=refused", "/calls?limit=1000",
                     "/calls/5000", "/catalogue?caller=bob", "/pins", "/quotas", "/api/calls?since=1h",
                     "/api/overview", "/api/charts"]:
            gw.get(page)  # once to warm the connection's statement cache, then timed
            took = []
            for _ in range(5):
                start = time.perf_counter()
                status, _, body = gw.get(page)
                took.append((time.perf_counter() - start) * 1000)
                assert status == 200, page
            took.sort()
            print(f"10,000 records: GET {page} took {took[2]:.1f} ms median of 5, worst {took[-1]:.1f} ms ({len(body)} bytes)")
            if bar is not None and took[2] > bar:
                slow.append((page, took[2]))
        assert not slow, f"pages over {bar} ms with 10,000 records: {slow}"
        charts = json.loads(gw.get("/api/charts")[2])
        # Every bulk record falls in the window, and so do make_calls' three.
        assert sum(sum(m["outcomes"].values()) for m in charts["per_minute"]) == 10_003
        refused = {r["reason"]: r["calls"] for r in charts["refusals"]}
        assert refused["unknown_tool"] == sum(1 for i in range(0, 10_000, 7) if i % 5 in (0, 3)) + 1
        assert [u["upstream"] for u in charts["latency"]] == ["db", "search", "up"]
        assert {f["kind"] for f in charts["findings"]} == {"aws_key", "github_token"}
        dom, _ = chromium(gw.admin + "/charts", "charts")
        for part in ["per-minute", "refusals", "latency", "findings"]:
            assert f'<svg id="{part}-chart"' in dom and f'<table id="{part}-table">' in dom, part
        assert "rate_limited" in section(dom, "refusals-table")
        calls = json.loads(gw.get("/api/calls?caller=c7&outcome=refused")[2])["calls"]
        assert calls and all(c["caller"] == "c7" and c["outcome"] == "refused" for c in calls)
        assert len(json.loads(gw.get("/api/calls?limit=1000")[2])["calls"]) == 1000

        # Paging: c7 has 200 calls; pages of 50 follow each other without a gap
        # or an overlap, and the last full page points at an empty one.
        seen, before, pages = [], None, 0
        while True:
            query = "/api/calls?caller=c7&limit=50" + (f"&before={before}" if before else "")
            start = time.perf_counter()
            page = json.loads(gw.get(query)[2])
            took = (time.perf_counter() - start) * 1000
            if pages == 3:
                print(f"10,000 records: GET {query} (4th page) took {took:.1f} ms")
            ids = [c["id"] for c in page["calls"]]
            assert ids == sorted(ids, reverse=True)
            assert not seen or not ids or ids[0] < seen[-1]
            seen += ids
            if page["next_before"] is None:
                break
            assert page["next_before"] == ids[-1]
            before, pages = page["next_before"], pages + 1
        assert len(seen) == 200 == len(set(seen)) and pages == 4

        dom, _ = chromium(gw.admin + "/calls?caller=c7&limit=50", "calls-paged")
        older = re.search(r'<a href="([^"]+)" rel="next">Older calls</a>', dom)
        assert older, section(dom, "main")
        href = older.group(1).replace("&amp;", "&")
        assert href == f"/calls?caller=c7&limit=50&before={seen[49]}"
        dom, _ = chromium(gw.admin + href)
        rows = section(dom, "calls")
        assert f'href="/calls/{seen[50]}"' in rows and f'href="/calls/{seen[49]}"' not in rows
        assert '<a href="/calls?caller=c7&amp;limit=50">Newest calls</a>' in section(dom, "paging")
    finally:
        gw.close()


QUOTAS_AND_PINS = """
    [[quota]]
    callers = ["*"]
    tools = ["up.*"]
    rate = "10/hour"
    burst = 10

    [[quota]]
    callers = ["bob"]
    tools = ["up.echo"]
    concurrency = 2
"""


def test_the_pins_and_quotas_pages_show_their_state(upstream, config, tmp_path):
    text = config_text(upstream, tmp_path, "").replace(
        'unknown_arguments = "warn"', 'unknown_arguments = "warn"\n    pins = "report"') + QUOTAS_AND_PINS
    path = config(text)
    gw = Gateway(path, env=KEYS, admin=True)
    try:
        dom, _ = chromium(gw.admin + "/pins", "pins-no-lock")
        assert "No pins lock (warden.pins.json beside the config)" in section(dom, "lock")
        assert "no lock" in section(dom, "pins")
        dom, _ = chromium(gw.admin + "/quotas")
        assert section(dom, "quotas").count("no caller has used it") == 2
    finally:
        gw.close()

    # Lock the tools as listed now; then the upstream changes one and adds one.
    locked = subprocess.run([WARDEN, "pins", "lock", "--config", path], capture_output=True, text=True,
                            env={**os.environ, **KEYS}, timeout=60)
    assert locked.returncode == 0, locked.stderr
    upstream.tools[0]["description"] = "Echo, now louder."
    upstream.tools.append({"name": "fresh", "description": "New.", "inputSchema": {"type": "object"}})

    gw = Gateway(path, env=KEYS, admin=True)
    try:
        bob = KEYS["BOB_KEY"]
        gw.open_session(bob)
        for i in range(2):
            assert "result" in gw.call(bob, i + 1, "up.echo", {"text": "x"})
        pins = json.loads(gw.get("/api/pins")[2])
        echo_was = next(t for t in TOOLS if t["name"] == "echo")["description"]
        assert pins == {"lock": "warden.pins.json", "present": True, "upstreams": [{
            "upstream": "up", "mode": "report", "locked_tools": 3, "listed": True,
            "drift": [{"tool": "up.echo", "change": "changed: description", "approve": "up.echo",
                       "reject": "up.echo", "rejected": False,
                       "fields": [{"field": "description", "locked": echo_was, "listed": "Echo, now louder."}]},
                      {"tool": "up.fresh", "change": "added", "approve": "up.fresh",
                       "reject": "up.fresh", "rejected": False,
                       "fields": [{"field": "name", "locked": None, "listed": "fresh"},
                                  {"field": "description", "locked": None, "listed": "New."},
                                  {"field": "inputSchema", "locked": None, "listed": {"type": "object"}}]}]}]}
        quotas = json.loads(gw.get("/api/quotas")[2])
        assert quotas["rates_shared"] is False
        assert [(q["quota"], q["callers"], q["tools"], q["rate"], q["burst"], q["concurrency"])
                for q in quotas["quotas"]] == [
            (1, ["*"], ["up.*"], "10 calls per hour", 10, None),
            (2, ["bob"], ["up.echo"], None, None, 2)]
        # Two calls of bob's took 2 of the burst; none is in flight any more.
        assert quotas["quotas"][0]["use"] == [{"caller": "bob", "in_flight": None, "available": 8, "burst": 10}]
        assert quotas["quotas"][1]["use"] == []

        dom, _ = chromium(gw.admin + "/pins", "pins")
        assert "The pins lock warden.pins.json holds" in section(dom, "lock")
        rows = section(dom, "pins")
        assert "report" in rows and '<a href="#review-up.echo">up.echo</a>: changed: description' in rows
        assert '<a href="#review-up.fresh">up.fresh</a>: added' in rows
        dom, _ = chromium(gw.admin + "/quotas", "quotas")
        rows = section(dom, "quotas")
        assert "bob: 8 of 10 calls available now" in rows
        assert "10 calls per hour (burst 10)" in rows
        # Keyboard: every page starts with a skip link to the content, and the
        # navigation reaches the new pages.
        assert '<a class="skip" href="#main">Skip to content</a>' in dom
        assert '<a href="/pins">Pins</a><a href="/quotas">Quotas</a>' in dom
    finally:
        gw.close()
