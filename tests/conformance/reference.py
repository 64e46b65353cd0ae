#!/usr/bin/env python3
"""The differential against the conformance repository's own reference server: runs
the suite's server scenarios (both requirement sets) against
`examples/servers/typescript/everything-server.ts` directly and through mcp-warden
(the server as an HTTP upstream, prefix = false, an anonymous caller,
unknown_arguments = "warn"), prints one table per set, and exits 1 when the gateway
fails a scenario the server passes directly. Not part of CI (the reference server
comes from GitHub, not from a package registry); docs/conformance.md says how to
fetch it.

usage: reference.py --reference CHECKOUT/examples/servers/typescript
                    [--gateway target/debug/mcp-warden] [--sets 2025-11-25,2026-07-28]
Needs `npm install` in tests/conformance (the suite and Node 22) and `npm ci` in the
reference server's folder.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import run as suite

# The reference server listens on every interface (app.listen(PORT)): this preload
# keeps it on loopback.
LOOPBACK = """const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (/^\\d+$/.test(String(args[0])) && (args.length < 2 || typeof args[1] === 'function')) {
    args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, log):
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"error: {proc.args[0]} exited before listening:\n{open(log).read()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"error: nothing listens on {port} after 60 s:\n{open(log).read()[-3000:]}")


def spawn(cmd, log, env=None, cwd=None):
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env=env, cwd=cwd, start_new_session=True)


def stop(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def table(revision, direct, gateway):
    """Prints one set's table; returns the scenarios lost through the gateway."""
    verdict = lambda r: "-" if r is None else ("pass" if not r[1] else f"FAIL({len(r[1])})")
    print(f"\n== --requirements {revision}\n{'scenario':48} {'directly':10} {'through mcp-warden':10}")
    lost = []
    for name in sorted(set(direct) | set(gateway)):
        d, g = direct.get(name), gateway.get(name)
        mark = ""
        if d and not d[1] and (g is None or g[1]):
            lost.append(name)
            mark = "  <-- lost"
        elif g and not g[1] and (d is None or d[1]):
            mark = "  (gained)"
        print(f"{name:48} {verdict(d):10} {verdict(g):10}{mark}")
    passes = lambda r: sum(1 for v in r.values() if not v[1])
    print(f"passed: directly {passes(direct)}/{len(direct)}, through mcp-warden {passes(gateway)}/{len(gateway)}; "
          f"lost {len(lost)}" + (f": {', '.join(lost)}" if lost else ""))
    for name in lost:
        for c in (gateway.get(name) or (0, []))[1]:
            print(f"  {name}: {c['id']}: {c.get('errorMessage')}")
    return lost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, help="the checkout's examples/servers/typescript")
    ap.add_argument("--gateway", default=os.path.join(suite.BIN, "mcp-warden"))
    ap.add_argument("--sets", default=",".join(suite.REQUIREMENTS))
    a = ap.parse_args()
    tsx = os.path.join(a.reference, "node_modules", ".bin", "tsx")
    for path in (tsx, a.gateway, suite.SUITE):
        if not os.path.exists(path):
            sys.exit(f"error: {path} is missing (see docs/conformance.md)")
    work = tempfile.mkdtemp(prefix="warden-reference-")
    preload = os.path.join(work, "loopback.cjs")
    open(preload, "w").write(LOOPBACK)
    procs, lost = [], []
    try:
        ref_port, gw_port = free_port(), free_port()
        env = dict(os.environ, PORT=str(ref_port), NODE_OPTIONS=f"--require {preload}")
        ref_log = os.path.join(work, "reference.log")
        procs.append(spawn([tsx, "everything-server.ts"], ref_log, env, a.reference))
        wait_port(ref_port, procs[-1], ref_log)
        config = os.path.join(work, "gateway.toml")
        open(config, "w").write(f'''[gateway]
anonymous_caller = "conformance"

[[upstream]]
name = "conformance"
url = "http://127.0.0.1:{ref_port}/mcp"
prefix = false
unknown_arguments = "warn"
''')
        gw_log = os.path.join(work, "gateway.log")
        procs.append(spawn([a.gateway, "run", "--config", config, "--http", f"127.0.0.1:{gw_port}"], gw_log))
        wait_port(gw_port, procs[-1], gw_log)
        for revision in a.sets.split(","):
            out = os.path.join(work, revision)
            direct = suite.run_suite(f"http://127.0.0.1:{ref_port}/mcp", os.path.join(out, "direct"), revision)
            gateway = suite.run_suite(f"http://127.0.0.1:{gw_port}/mcp", os.path.join(out, "gateway"), revision)
            lost += table(revision, direct, gateway)
    finally:
        stop(procs)
    print(f"\n(logs and results in {work})")
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
