"""The fleet under test: one PostgreSQL database, mcp-warden replicas sharing it
and one configuration file, and HAProxy in front of them.

Every replica is the real binary (`run --http 127.0.0.1:PORT`) in front of the
fixture upstream (`warden-fixture-upstream`), which appends one line per tool
execution to its replica's count file: the tool and the call's tag (its `text`
argument), so that executions can be counted per call and per replica. Its
`gate {file}` tool answers once the file exists: a call held open until the test
has seen what it waits for.
"""

import collections
import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _newest_build() -> pathlib.Path:
    """The newer of the release and the debug build (scripts/test builds debug)."""
    builds = [ROOT / "target" / kind / "mcp-warden" for kind in ("release", "debug")]
    present = [b for b in builds if b.exists()]
    return max(present, key=lambda b: b.stat().st_mtime) if present else builds[1]


WARDEN = pathlib.Path(os.environ.get("MCP_WARDEN_BIN") or _newest_build())
FIXTURE = WARDEN.parent / "warden-fixture-upstream"

CALLER = "fleet"
API_KEY = "fleet-api-key-0123456789"
STATE_SECRET = "fleet-state-secret-shared-by-every-replica"
META_KEY = "warden/idempotencyKey"
TAG = "text"

# The server the test makes its database on: WARDEN_TEST_PG_URL
# (postgres://USER@HOST:PORT; scripts/test sets it to a throwaway cluster when
# the machine has no server), else the machine's on 127.0.0.1:5432.
_PG = urllib.parse.urlsplit(os.environ.get("WARDEN_TEST_PG_URL") or "postgres://postgres@127.0.0.1:5432")
PG_HOST, PG_PORT, PG_USER = _PG.hostname, _PG.port or 5432, _PG.username or "postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(sql: str, db: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", db, "-X", "-q", "-A", "-t",
         "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True, text=True, timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed ({sql!r}): {done.stderr.strip()}")
    return done.stdout


class Database:
    """A database of its own on the machine's PostgreSQL, dropped afterwards."""

    def __init__(self):
        self.name = f"warden_fleet_{uuid.uuid4().hex[:12]}"
        psql(f"CREATE DATABASE {self.name}")
        self.url = f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{self.name}"

    def drop(self):
        psql(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def audit(self) -> list[tuple[str, str, bool]]:
        """Every audit record: (the call's tag, its outcome, whether it was a replay)."""
        out = psql(
            "SELECT coalesce(record::json->'arguments'->>'text', ''), outcome, "
            "coalesce(record::json->>'replayed', 'false') FROM warden_audit ORDER BY id",
            self.name,
        )
        rows = []
        for line in out.splitlines():
            tag, outcome, replayed = line.split("\t")
            rows.append((tag, outcome, replayed == "true"))
        return rows


def config_text(db: Database, extra: str = "") -> str:
    """The configuration every replica reads (one file, as a ConfigMap would be)."""
    return f"""\
[gateway]
state_secret_env = "FLEET_STATE_SECRET"
stdio_caller = "{CALLER}"
# Behind a proxy every connection comes from its address.
max_connections_per_client = 4096
max_sessions_per_caller = 1000

[store]
url = "{db.url}"

[[caller]]
name = "{CALLER}"
api_key_env = "FLEET_KEY"

[[upstream]]
name = "fx"
command = ["{FIXTURE}"]
timeout_ms = 20000
unknown_arguments = "warn"
{extra}"""


class Replica:
    """One `mcp-warden run --http 127.0.0.1:PORT`; started again on the same port."""

    def __init__(self, name: str, workdir: pathlib.Path, config: pathlib.Path):
        self.name = name
        self.port = free_port()
        self.config = config
        self.log = workdir / f"{name}.log"
        self.counts = workdir / f"count-{name}.txt"
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def start(self, wait: float = 60):
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        offset = self.log.stat().st_size if self.log.exists() else 0
        log = open(self.log, "a")
        env = dict(
            os.environ,
            RUST_LOG=os.environ.get("FLEET_RUST_LOG", "info"),
            FLEET_STATE_SECRET=STATE_SECRET,
            FLEET_KEY=API_KEY,
            FIXTURE_COUNT_FILE=str(self.counts),
            FIXTURE_COUNT_ARG=TAG,
            FIXTURE_GATE="1",
        )
        self.proc = subprocess.Popen(
            [str(WARDEN), "run", "--config", str(self.config), "--http", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
        )
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if "mcp-warden: listening on " in self.log_text(offset):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"replica {self.name} did not start listening:\n{self.log_text(offset)[-3000:]}")

    def log_text(self, offset: int = 0) -> str:
        if not self.log.exists():
            return ""
        with open(self.log, errors="replace") as f:
            f.seek(offset)
            return f.read()

    def signal(self, sig: int):
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        os.kill(self.proc.pid, sig)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status, or None if it is still running after `timeout` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def accepting(self) -> bool:
        """Whether its port takes connections (a draining replica closed it)."""
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def executions(self) -> list[str]:
        """The tags of the calls this replica's upstream ran, in order."""
        if not self.counts.exists():
            return []
        return [line.split(" ", 1)[1] for line in self.counts.read_text().splitlines() if " " in line]

    def stop(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)


HAPROXY_CFG = """\
global
    maxconn 4096
    log stdout len 8192 format raw local0

defaults
    mode http
    log global
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    # A replica's connection is closed after each answer: no request is sent over
    # an idle connection that a draining replica is closing at that moment.
    option http-server-close
    # A request no replica took goes to the next one: a refused connection, or a
    # 503, which a replica answers only to what it did not run (a draining one to
    # a request on a connection it had already accepted). Nothing a replica may
    # have started is sent again.
    retries 3
    option redispatch 1
    retry-on conn-failure 503

frontend mcp
    bind 127.0.0.1:{port}
    capture request header Mcp-Session-Id len 1024
    capture response header Mcp-Session-Id len 1024
    log-format "%s %ST %HM %Tt %tsc %rc {{%hrl}} {{%hsl}}"
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
    default-server inter 300ms fall 3 rise 2
{servers}

listen stats
    bind 127.0.0.1:{stats}
    stats enable
    stats uri /stats
"""


class Balancer:
    """HAProxy: round robin over the replicas, no stickiness, health checks on /readyz."""

    def __init__(self, workdir: pathlib.Path, replicas: list[Replica]):
        self.port = free_port()
        self.stats_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.cfg = workdir / "haproxy.cfg"
        self.log = workdir / "haproxy.log"
        servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in replicas)
        self.cfg.write_text(HAPROXY_CFG.format(port=self.port, stats=self.stats_port, servers=servers))
        check = subprocess.run(["haproxy", "-c", "-q", "-f", str(self.cfg)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        log = open(self.log, "w")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.cfg)], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def servers(self) -> dict[str, dict[str, str]]:
        """Each replica's row of HAProxy's statistics (status, check_status, stot …)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5) as r:
            lines = r.read().decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "replicas" and row.get("svname") not in ("BACKEND", "FRONTEND"):
                rows[row["svname"]] = row
        return rows

    def wait_status(self, names: list[str], status: str, timeout: float = 30):
        """Waits until HAProxy's health checks put every named replica in `status`."""
        deadline = time.monotonic() + timeout
        rows = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                rows = self.servers()
                if all(rows.get(n, {}).get("status") == status for n in names):
                    return
            time.sleep(0.1)
        seen = {n: (rows.get(n, {}).get("status"), rows.get(n, {}).get("check_status"),
                    rows.get(n, {}).get("last_chk")) for n in names}
        raise AssertionError(f"HAProxy's checks on GET /readyz never found {names} {status}: {seen}")

    def requests(self) -> list[dict]:
        """HAProxy's log: one entry per request (replica, status, method, session ids)."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            parts = line.split(" ", 6)
            if len(parts) < 7 or not parts[1].lstrip("-").isdigit():
                continue
            server, status, method, _total, _state, _retries, rest = parts
            captured = rest.split("} {")
            sent = captured[0].strip("{} ")
            returned = captured[1].strip("{} ") if len(captured) > 1 else ""
            out.append({"server": server, "status": int(status), "method": method,
                        "sent": sent, "returned": returned})
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Fleet:
    """Three replicas, their shared database and configuration, and HAProxy."""

    def __init__(self, workdir: pathlib.Path, size: int = 3):
        self.workdir = workdir
        self.db = Database()
        self.config = workdir / "warden.toml"
        self.write_config()
        self.replicas = [Replica(f"r{i + 1}", workdir, self.config) for i in range(size)]
        self.balancer: Balancer | None = None

    def write_config(self, extra: str = ""):
        # Written whole and renamed, as a deployment tool (or a ConfigMap) replaces it.
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(config_text(self.db, extra))
        os.replace(tmp, self.config)

    def write_raw_config(self, text: str):
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def start(self):
        for r in self.replicas:
            r.start()
        self.balancer = Balancer(self.workdir, self.replicas)
        self.balancer.wait_status([r.name for r in self.replicas], "UP")

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    def executions(self) -> dict[str, collections.Counter]:
        """Per tag, how often each replica's upstream ran it."""
        runs: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in self.replicas:
            for tag in r.executions():
                runs[tag][r.name] += 1
        return runs

    def stop(self):
        if self.balancer is not None:
            self.balancer.stop()
        for r in self.replicas:
            r.stop()
        self.db.drop()

    def logs(self) -> str:
        """The tail of every log, for a failing test's message."""
        parts = []
        for r in self.replicas:
            parts.append(f"--- {r.name} ({r.log})\n{r.log_text()[-2000:]}")
        return "\n".join(parts)


def sigkill(replica: Replica):
    replica.signal(signal.SIGKILL)
    replica.wait_exit(10)


def listing(url: str) -> list[str]:
    """The tool names a 2026-07-28 `tools/list` gets from `url` (a replica or HAProxy)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope()}})
    req = urllib.request.Request(url, data=body.encode(), method="POST", headers=stateless_headers("tools/list"))
    with urllib.request.urlopen(req, timeout=20) as r:
        answer = json.loads(r.read())
    return [t["name"] for t in answer["result"]["tools"]]


def envelope() -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "fleet-test", "version": "1.0.0"},
    }


def stateless_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {API_KEY}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers
