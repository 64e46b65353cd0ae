"""The fleet test: mcp-warden replicas sharing PostgreSQL behind HAProxy, driven by
the official Python MCP SDK. Needs the mcp-warden binaries (cargo build), Debian's
`haproxy`, `psql`, PostgreSQL on 127.0.0.1:5432 or WARDEN_TEST_PG_URL (trust auth) and the
interop venv (tests/interop/.venv). scripts/test sets all of that up; docs/fleet.md
says how to run it alone."""

import shutil
import sys

import pytest

from fleet import FIXTURE, PG_HOST, PG_PORT, PG_USER, WARDEN, Fleet, psql


def pytest_sessionstart(session):
    for need in (WARDEN, FIXTURE):
        if not need.exists():
            raise pytest.UsageError(f"{need} is missing: run `cargo build -p mcp-warden` first")
    for tool, how in (("haproxy", "apt-get install -y haproxy"), ("psql", "apt-get install -y postgresql-client")):
        if shutil.which(tool) is None:
            raise pytest.UsageError(f"`{tool}` is missing: run '{how}' as root (scripts/test does)")
    try:
        psql("SELECT 1")
    except Exception as e:  # noqa: BLE001 - any failure means the same thing here
        raise pytest.UsageError(f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT} as {PG_USER}: {e}") from e


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def fleet(tmp_path):
    """Three replicas on one fresh database and one configuration file, HAProxy in
    front; all of it stopped and the database dropped afterwards."""
    f = Fleet(tmp_path)
    try:
        f.start()
        yield f
    except BaseException:
        print(f.logs(), file=sys.stderr)
        raise
    finally:
        f.stop()
