"""A fleet, not a process (issue 15): three mcp-warden replicas sharing one
PostgreSQL database behind HAProxy (round robin, no stickiness, health checks on
/readyz), under 2025-11-25 sessions of the official Python SDK and 2026-07-28
stateless requests, while replicas are killed, drained and reloaded.

Nothing here is timed: the figures test prints throughput and latency for the
issue's note (target/test-output/fleet.txt) and asserts only that every call was
answered."""

import collections
import signal
import subprocess
import time
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from fleet import ROOT, WARDEN, Fleet, Replica, listing, sigkill
from load import (INTERNAL_ERROR, STREAM_LOST, Call, Load, latencies, leaves, percentile, run, sdk_session,
                  session_call, stateless_call)

pytestmark = pytest.mark.anyio

SESSIONS = 6
STATELESS = 6
PER_CLIENT = 200  # calls per client; every fourth is keyed and sent twice
FIGURES_PER_CLIENT = 60
# The harmless change one replica reloads mid-run: a rule hiding a tool nobody calls.
HARMLESS = """
[[rule]]
callers = ["*"]
tools = ["fx.crash"]
effect = "deny"
"""


def show(calls: list[Call], events: dict[str, float], limit: int = 12) -> str:
    """A few calls, with their times relative to the test's events, for a message."""
    first = min(events.values(), default=0.0)
    marks = ", ".join(f"{k} at {v - first:.2f}s" for k, v in sorted(events.items(), key=lambda e: e[1]))
    lines = [f"events: {marks}"]

    def distance(c: Call) -> float:  # how far the call was from the nearest event
        return min((max(c.start - t, t - c.end, 0.0) for t in events.values()), default=0.0)

    for c in sorted(calls, key=distance)[:limit]:
        lines.append(f"  {c.client} {c.tag} {c.tool}{' keyed' if c.keyed else ''}{' repeat' if c.repeat else ''}"
                     f" {c.start - first:.2f}s..{c.end - first:.2f}s {c.outcome}: {c.detail}")
    if len(calls) > limit:
        lines.append(f"  … and {len(calls) - limit} more")
    return "\n".join(lines)


class Checks:
    """Every check of a test is made, and the failed ones are reported together: a
    fleet can fail for several reasons at once, and each is worth reading."""

    def __init__(self):
        self.failed: list[str] = []

    def __call__(self, ok: bool, message):
        if not ok:
            self.failed.append(message() if callable(message) else message)
        return ok

    def done(self):
        assert not self.failed, f"{len(self.failed)} checks failed:\n\n" + "\n\n".join(
            f"[{i + 1}] {m}" for i, m in enumerate(self.failed))


def check_answered(check: Checks, calls: list[Call], events: dict[str, float], what: str, excused=lambda c: False):
    """Every call got the upstream's answer (or is excused). Stateless requests and
    session calls are judged apart: the first need no shared session."""
    for kind, mine in (("stateless requests", [c for c in calls if not c.client.startswith("s")]),
                       ("session calls", [c for c in calls if c.client.startswith("s")])):
        bad = [c for c in mine if c.outcome != "ok" and not excused(c)]
        check(not bad, lambda: f"{len(bad)} {kind} failed {what}:\n" + show(bad, events))


def check_lost(check: Checks, load: Load):
    check(not load.lost, lambda: f"sessions the SDK lost: {load.lost}\n" + show([], load.events))


def answered(calls: list[Call]) -> collections.Counter:
    """Per tag, the calls the fleet answered (with the upstream's answer, its stored
    copy, or the ledger's refusal of a key still running)."""
    return collections.Counter(c.tag for c in calls if c.outcome in ("ok", "running"))


async def eventually(condition, timeout: float = 30) -> bool:
    """Polls `condition()` (run in a thread) until it is true or `timeout` passed;
    a condition that cannot be asked now (a replica that does not answer) is false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await anyio.to_thread.run_sync(condition):
                return True
        except OSError:
            pass
        await anyio.sleep(0.2)
    return False


async def wait_until(condition, what: str, timeout: float = 30):
    """Polls `condition()` until it is true; fails naming `what`."""
    if not await eventually(condition, timeout):
        raise AssertionError(f"{what} (waited {timeout:.0f} s)")


@asynccontextmanager
async def in_flight_on(load: Load, replicas: list[Replica], label: str):
    """Two calls sent straight to each replica (2026-07-28 requests, recorded in
    `load.calls`), running at its upstream until the test opens their gate (the
    function this yields; on the way out at the latest). No timing: they are
    certainly in flight at whatever the body does before it opens the gate."""
    gate = replicas[0].log.parent / f"gate-{label}"
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60.0)) as http, anyio.create_task_group() as tg:
        sent = []
        for r in replicas:
            for k in range(2):
                c = Call(f"d{label}", f"d{label}-{r.name}-{k}", "fx.gate", False, False, time.monotonic())
                load.calls.append(c)
                sent.append((r, c))
                tg.start_soon(stateless_call, http, r.url, c, {"file": str(gate), "text": c.tag}, k)
        try:
            await wait_until(lambda: all(c.tag in r.executions() for r, c in sent),
                             f"calls sent to {[r.name for r in replicas]} never started there")
            yield gate.touch
        finally:
            gate.touch()


def listed(url: str) -> list[str] | str:
    """The tool names `url` lists, or why it could not be asked."""
    try:
        return listing(url)
    except OSError as e:
        return f"<no listing: {e}>"


async def session_listing(s) -> list[str] | str:
    """The tool names an open session lists, or the error it got."""
    try:
        return [t.name for t in (await s.list_tools()).tools]
    except MCPError as e:
        return f"<no listing: {e.message}>"


def opener_of(fleet: Fleet, session_ids: set[str]) -> str:
    """The replica that answered the session's initialize (HAProxy's log names it)."""
    (sid,) = session_ids
    for entry in fleet.balancer.requests():
        got = entry["returned"]
        if got and entry["method"] == "POST" and (sid.startswith(got) or got.startswith(sid)):
            return entry["server"].split("/")[-1]
    raise AssertionError(f"HAProxy's log has no initialize answered with session {sid[:40]}…")


async def test_calls_survive_a_killed_replica_and_a_reload(fleet):
    load = Load(fleet.balancer.url, per_client=PER_CLIENT)
    planned = (SESSIONS + STATELESS) * PER_CLIENT * 5 // 4
    roles = {}

    async def during(load: Load):
        # The replica that opened the first session dies: the session must go on.
        victim = fleet.replica(opener_of(fleet, load.sessions["s1"]))
        reloader = next(r for r in fleet.replicas if r is not victim)
        roles.update(victim=victim, reloader=reloader, reloader_pid=reloader.proc.pid)
        await load.reach(planned // 5)
        async with anyio.create_task_group() as tg:
            # A call of that session whose answer streams (SSE, with event ids) from
            # the victim when it dies: its client resumes the stream elsewhere.
            # HAProxy deals calls round-robin over three replicas, so a try lands on
            # the victim about one time in three: thirty tries miss it ~1 in 200,000.
            for k in range(30):
                tag, streaming = f"s1-stream-{k}", anyio.Event()

                async def progressed(progress, total, message, streaming=streaming):
                    streaming.set()

                args = {"steps": 1, "pause_ms": 4000, "text": tag}
                tg.start_soon(session_call, load, "s1", load.open["s1"], "fx.progress", args, False, False, progressed)
                with anyio.fail_after(30):
                    # Streaming, or over already (refused, say): then another try.
                    while not streaming.is_set() and not any(c.tag == tag and c.end for c in load.calls):
                        await anyio.sleep(0.02)
                if streaming.is_set() and tag in victim.executions():
                    roles["streamed"] = tag
                    break
            assert "streamed" in roles, f"no streamed call of s1 reached {victim.name} in thirty tries"
            load.mark("kill")
            sigkill(victim)
            load.mark("dead")
            await anyio.sleep(1.0)  # the fleet serves on without it
            roles["victim_runs_before_restart"] = len(victim.executions())
            await anyio.to_thread.run_sync(victim.start)
            load.mark("restart")
            await anyio.to_thread.run_sync(fleet.balancer.wait_status, [victim.name], "UP")
            load.mark("back in rotation")
        await load.reach(planned * 11 // 20)
        async with in_flight_on(load, [reloader], "hup") as open_gate:
            fleet.write_config(HARMLESS)
            load.mark("reload")
            reloader.signal(signal.SIGHUP)
            roles["reloaded"] = await eventually(lambda: "fx.crash" not in listing(reloader.url))
            open_gate()

    await run(load, SESSIONS, STATELESS, during)
    calls, events = load.calls, load.events
    victim, reloader = roles["victim"], roles["reloader"]
    t_kill, t_dead = events["kill"], events["dead"]

    def at_kill(c: Call) -> bool:
        return c.in_flight_at(t_kill, t_dead)

    print(f"\n{len(calls)} calls: {collections.Counter(c.outcome for c in calls)}; "
          f"{sum(at_kill(c) for c in calls)} in flight at the kill of {victim.name}")
    check = Checks()

    # Every call was answered or failed with an error; none hung, no session was lost.
    hung = [c for c in calls if c.outcome == "hung"]
    check(not hung, lambda: f"{len(hung)} calls without an answer:\n" + show(hung, events))
    check_lost(check, load)

    # Only calls in flight on the killed replica may fail (or, for a key, find
    # their first attempt still holding it, or abandoned); at most one per client.
    def excused(c: Call) -> bool:
        if at_kill(c):
            return True
        first = next(f for f in calls if f.tag == c.tag and not f.repeat)
        return c.repeat and c.outcome in ("running", "unknown") and at_kill(first)

    check_answered(check, calls, events, "away from the kill", excused)
    failed_at_kill = collections.Counter(c.client for c in calls
                                         if c.outcome != "ok" and at_kill(c) and c.tag != roles["streamed"])
    print(f"{sum(failed_at_kill.values())} calls in flight at the kill failed: {dict(failed_at_kill)}")
    print(show([c for c in calls if c.outcome != "ok" and at_kill(c)], events))
    check(all(n == 1 for n in failed_at_kill.values()), f"clients that lost several calls at the kill: {failed_at_kill}")

    # The streamed call cut off with its replica: resumed elsewhere, it got the
    # gateway's error saying so (the SDK's own "no answer" would mean it was left
    # hanging until the SDK gave up).
    streamed = next(c for c in calls if c.tag == roles["streamed"])
    check((streamed.outcome, streamed.code, streamed.message) == ("failed", INTERNAL_ERROR, STREAM_LOST),
          f"the call streaming from {victim.name} when it died, resumed elsewhere: {streamed.outcome}: {streamed.detail}")

    # Sessions kept their id and went on; the one the dead replica opened too,
    # while it was down and after it came back. No session stuck to a replica.
    runs = fleet.executions()
    for name, ids in load.sessions.items():
        check(len(ids) == 1, f"session {name} used several session ids: {ids}")
        served_by = {r for c in calls if c.client == name for r in runs.get(c.tag, ())}
        check(len(served_by) >= 2, f"session {name}'s calls ran behind {sorted(served_by)} only")
    s1 = [c for c in calls if c.client == "s1" and c.outcome == "ok"]
    check(any(t_dead < c.start and c.end < events["restart"] for c in s1),
          f"session s1 (opened by {victim.name}) got no answer while {victim.name} was down")
    check(any(c.start > events["back in rotation"] for c in s1), "session s1 got no answer after the restart")
    check(len(victim.executions()) > roles["victim_runs_before_restart"],
          f"{victim.name} served nothing after it was started again")

    # Keyed calls ran exactly once at the upstream, and so did every other call
    # answered: HAProxy sends nothing again that a replica may have started. A
    # call whose only attempt died with the replica ran at most once.
    by_tag = collections.defaultdict(list)
    for c in calls:
        by_tag[c.tag].append(c)
    wrong = []
    for tag, attempts in by_tag.items():
        n = sum(runs.get(tag, {}).values())
        if n > 1 or (n != 1 and any(c.outcome == "ok" for c in attempts)):
            wrong.append(f"{tag}{' (keyed)' if attempts[0].keyed else ''}: ran {n} times, "
                         f"answers {[c.outcome for c in attempts]}")
    check(not wrong, lambda: f"{len(wrong)} calls ran the wrong number of times: {wrong[:10]}")

    # The audit trail in PostgreSQL has one record per answered call (and at most
    # one more for a call the dead replica recorded but could not answer).
    audited = collections.Counter(tag for tag, _, _ in fleet.db.audit())
    said = answered(calls)
    mismatched = []
    for tag, attempts in by_tag.items():
        spare = sum(at_kill(c) for c in attempts)
        if not said[tag] <= audited[tag] <= said[tag] + spare:
            mismatched.append(f"{tag}: {said[tag]} answered, {audited[tag]} audit records")
    stray = set(audited) - set(by_tag)
    print(f"{sum(said.values())} answered calls, {sum(audited.values())} audit records")
    check(not mismatched and not stray,
          lambda: f"audit records ≠ answered calls ({len(mismatched)} calls): {mismatched[:10]}, not ours: {stray}")

    # The reloaded replica is the same process, and runs the new configuration.
    check(reloader.alive() and reloader.proc.pid == roles["reloader_pid"],
          lambda: f"{reloader.name} did not survive SIGHUP:\n{reloader.log_text()[-1500:]}")
    check(roles["reloaded"], f"{reloader.name} still listed fx.crash 30 s after reloading a file that hides it")
    check.done()


async def test_sigterm_drains_a_replica_under_load_without_losing_an_answer(fleet):
    load = Load(fleet.balancer.url, slow_every=3, slow_ms=300)
    draining = fleet.replicas[1]
    status = {}

    async def during(load: Load):
        await load.reach(300)
        # Calls certainly in flight on the draining replica when SIGTERM comes.
        async with in_flight_on(load, [draining], "term") as open_gate:
            load.mark("sigterm")
            draining.signal(signal.SIGTERM)
            # The drain began (its listener is closed) with those calls held: now they end.
            status["closed"] = await eventually(lambda: not draining.accepting())
            open_gate()
            status["exit"] = await anyio.to_thread.run_sync(draining.wait_exit, 60)
            load.mark("exited")
        n = load.finished()
        await load.reach(n + 200)
        load.stop.set()

    await run(load, 4, 4, during)
    calls, events = load.calls, load.events
    print(f"\n{len(calls)} calls: {collections.Counter(c.outcome for c in calls)}; "
          f"{sum(c.in_flight_at(events['sigterm']) for c in calls)} in flight at SIGTERM")

    check = Checks()
    check(status["closed"], f"{draining.name} still took connections 30 s after SIGTERM")
    check(status["exit"] == 0,
          f"{draining.name} after SIGTERM: exit status {status['exit']} (None: still running after 60 s)")
    check_lost(check, load)
    check_answered(check, calls, events, "around the drain")
    runs = fleet.executions()
    twice = {tag: dict(r) for tag, r in runs.items() if sum(r.values()) > 1}
    check(not twice, lambda: f"calls that ran more than once: {list(twice.items())[:10]}")
    missing = sorted({c.tag for c in calls if c.outcome == "ok"} - set(runs))
    check(not missing, lambda: f"answered calls the upstream never ran: {missing[:10]}")
    audited, said = collections.Counter(tag for tag, _, _ in fleet.db.audit()), answered(calls)
    check(audited == said, lambda: "audit records ≠ answered calls (tag: records, answers): " + str(
        {t: (audited[t], said[t]) for t in set(audited) | set(said) if audited[t] != said[t]}))
    check.done()


INVALID = """
[[rule]]
callers = ["*"]
tools = ["fx.garbage"]
effect = "hide"
"""
REMOVES_A_TOOL = INVALID.replace('"hide"', '"deny"')
# What `mcp-warden check` says of INVALID, after the file and the key.
REASON = "'hide' is not an effect"


async def test_reload_under_the_fleet(fleet):
    before = {r.name: listing(r.url) for r in fleet.replicas}
    assert all("fx.garbage" in tools for tools in before.values()), before
    pids = {r.name: r.proc.pid for r in fleet.replicas}
    load = Load(fleet.balancer.url, slow_every=5, slow_ms=200)
    seen = {}

    async def during(load: Load):
        # A 2025-11-25 session open across both reloads (on one replica: what is
        # checked here is the reload, not where sessions are served).
        try:
            async with sdk_session(fleet.replicas[0].url) as watcher:
                assert "fx.garbage" in [t.name for t in (await watcher.list_tools()).tools]
                await load.reach(200)

                # An invalid file: every replica says why, keeps what it has, fails no call.
                fleet.write_config(INVALID)
                checked = subprocess.run([str(WARDEN), "check", "--config", str(fleet.config)],
                                         capture_output=True, text=True)
                assert checked.returncode != 0, checked.stdout
                # "… rule[0].effect: 'hide' is not an effect; use one of: …": the reason.
                reason = checked.stderr.split("effect: ", 1)[1].split(";")[0]
                assert reason == REASON, checked.stderr
                async with in_flight_on(load, fleet.replicas, "bad") as open_gate:
                    load.mark("invalid reload")
                    for r in fleet.replicas:
                        r.signal(signal.SIGHUP)
                    for r in fleet.replicas:
                        seen[f"{r.name} said why"] = await eventually(lambda r=r: reason in r.log_text())
                    open_gate()
                await load.reach(load.finished() + 200)
                seen["after invalid"] = {r.name: await anyio.to_thread.run_sync(listed, r.url) for r in fleet.replicas}
                seen["watcher after invalid"] = await session_listing(watcher)

                # A valid file that removes a tool: gone from the next listings.
                fleet.write_config(REMOVES_A_TOOL)
                async with in_flight_on(load, fleet.replicas, "good") as open_gate:
                    load.mark("valid reload")
                    for r in fleet.replicas:
                        r.signal(signal.SIGHUP)
                    for r in fleet.replicas:
                        seen[f"{r.name} hid it"] = await eventually(lambda r=r: "fx.garbage" not in listing(r.url))
                    open_gate()
                seen["watcher after valid"] = await session_listing(watcher)
                seen["through haproxy"] = [await anyio.to_thread.run_sync(listed, fleet.balancer.url)
                                           for _ in fleet.replicas]
                await load.reach(load.finished() + 200)
        except Exception as e:  # a replica died under the watcher: the checks below say which
            seen["broken"] = "; ".join(f"{type(x).__name__}: {x}" for x in leaves(e))
        finally:
            load.stop.set()

    await run(load, 3, 3, during)
    calls, events = load.calls, load.events
    print(f"\n{len(calls)} calls: {collections.Counter(c.outcome for c in calls)}")

    check = Checks()
    check("broken" not in seen, lambda: f"the test could not go on: {seen['broken']}")
    for r in fleet.replicas:
        check(r.alive() and r.proc.pid == pids[r.name], lambda r=r: f"{r.name} did not survive SIGHUP:\n"
              f"{r.log_text()[-1500:]}")
        check(seen.get(f"{r.name} said why"), f"{r.name} did not log why the invalid file was refused ({REASON!r})")
        check(seen.get(f"{r.name} hid it"), f"{r.name} still lists fx.garbage 30 s after reloading a file that removes it")
    check(seen.get("after invalid") == before, lambda: f"an invalid file changed a listing: {seen.get('after invalid')}")
    check(seen.get("watcher after invalid") == before["r1"], "an invalid file changed an open session's listing")
    check_lost(check, load)
    check_answered(check, calls, events, "across the reloads")
    expected = [t for t in before["r1"] if t != "fx.garbage"]
    check(seen.get("watcher after valid") == expected,
          f"an open session's next listing after the valid reload: {seen.get('watcher after valid')}")
    check(seen.get("through haproxy") == [expected] * len(fleet.replicas),
          f"listings through HAProxy after the valid reload: {seen.get('through haproxy')}")
    check.done()


async def test_figures_one_replica_and_three_behind_haproxy(fleet):
    """Calls/s and latency with one load generator, through one replica directly and
    through HAProxy in front of three, in the same run (for the issue's note)."""
    rows, failed = [], {}
    for clients in ("stateless", "sessions"):
        for target, url in (("one replica, direct", fleet.replicas[0].url),
                            ("three behind HAProxy", fleet.balancer.url)):
            load = Load(url, per_client=FIGURES_PER_CLIENT)
            await run(load, 8 if clients == "sessions" else 0, 0 if clients == "sessions" else 8)
            wall = time.monotonic() - load.events["sessions opened"]
            lat = latencies(load)
            bad = [c for c in load.calls if c.outcome != "ok"]
            if bad:
                failed[f"{clients} through {target}"] = show(bad, load.events, 3)
            rows.append((clients, target, len(load.calls), len(bad), len(load.calls) / wall,
                         percentile(lat, 50) * 1000, percentile(lat, 99) * 1000))
    lines = [f"{'clients':<10} {'target':<22} {'calls':>6} {'failed':>6} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7}"]
    for clients, target, n, bad, rate, p50, p99 in rows:
        lines.append(f"{clients:<10} {target:<22} {n:>6} {bad:>6} {rate:>8.0f} {p50:>7.1f} {p99:>7.1f}")
    lines.append(f"binary: {WARDEN}; 8 concurrent clients in one Python process; every fourth call "
                 "keyed and sent twice (the PostgreSQL ledger); each SDK session request on a new connection")
    text = "\n".join(lines) + "\n"
    out = ROOT / "target" / "test-output"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.txt").write_text(text)
    print("\n" + text)
    assert not failed, "calls that failed while measuring:\n" + "\n".join(f"{k}:\n{v}" for k, v in failed.items())
