"""Clients for the fleet test: 2025-11-25 sessions on the official Python MCP SDK
(`streamable_http_client` + `ClientSession`) and 2026-07-28 stateless requests
(plain HTTP POSTs carrying the envelope), each making numbered calls and
recording how every one of them ended.

Every call carries a tag of its own in its `text` argument (the fixture upstream
writes it to its count file, the audit trail records it). Every fourth call also
carries the tag as its idempotency key and is sent a second time once answered
(a repeat, which must get the stored answer and not run again).
"""

import contextlib
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from fleet import API_KEY, META_KEY, TAG, envelope, stateless_headers

ALREADY_RUNNING = "This call is already running. Retry once it finished."
# The gateway's answer to a request whose stream is resumed at a replica other
# than the one that was answering it (docs/fleet.md, "What cannot move").
STREAM_LOST = ("The gateway replica that was answering this request stopped before its answer was sent, so "
               "the answer is lost. The call may or may not have run. Sent again with the same idempotency key, "
               "it answers with its result if it finished, and otherwise says that its outcome is unknown instead "
               "of running twice.")
# The ledger's answer to a key whose attempt died with its replica (I1).
OUTCOME_UNKNOWN = ("Error: The outcome of this call is unknown: it may have run, but the gateway running it "
                   "stopped before recording how it ended. Check whether it took effect, or send it with a new "
                   "idempotency key.")
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001
# A call that has no answer after this long is counted as hanging, not as failed.
CALL_TIMEOUT = 20.0


@dataclass
class Call:
    client: str
    tag: str
    tool: str
    keyed: bool
    repeat: bool
    start: float
    end: float = 0.0
    # "ok" (the upstream's answer or its stored copy), "running" (the ledger's
    # refusal of a key whose call is still running), "unknown" (the ledger's answer
    # to a key whose attempt died with its replica), "failed" (an error), "hung".
    outcome: str = ""
    detail: str = ""
    code: int | None = None  # a JSON-RPC error's code and message
    message: str = ""
    session: str | None = None

    def in_flight_at(self, t: float, until: float | None = None) -> bool:
        """Whether the call was under way at `t` (or at some time up to `until`)."""
        return self.start <= (t if until is None else until) and self.end >= t


@dataclass
class Load:
    """What the clients share: the plan, the calls made, the events between them."""

    url: str
    # Calls (not counting repeats) each client makes; None: until `stop` is set.
    per_client: int | None = None
    # Every `slow_every`-th call is `fx.slow` for `slow_ms` (0: none).
    slow_every: int = 0
    slow_ms: int = 0
    calls: list[Call] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    stop: anyio.Event = field(default_factory=anyio.Event)
    lost: dict[str, str] = field(default_factory=dict)
    # Per session client: the session ids its requests carried; its open session.
    sessions: dict[str, set[str]] = field(default_factory=dict)
    open: dict[str, ClientSession] = field(default_factory=dict)

    def wants(self, i: int) -> bool:
        if self.per_client is not None:
            return i <= self.per_client
        return not self.stop.is_set()

    def mark(self, event: str):
        self.events[event] = time.monotonic()

    def finished(self) -> int:
        return sum(1 for c in self.calls if c.end)

    async def reach(self, finished: int, timeout: float = 120):
        with anyio.fail_after(timeout):
            while self.finished() < finished:
                await anyio.sleep(0.02)

    def plan(self, client: str, i: int) -> tuple[str, str, dict, bool]:
        tag = f"{client}-{i}"
        if self.slow_every and i % self.slow_every == 0:
            return tag, "fx.slow", {"ms": self.slow_ms, TAG: tag}, i % 4 == 0
        return tag, "fx.echo", {TAG: tag}, i % 4 == 0


def expected_text(tool: str, args: dict) -> str:
    if tool == "fx.slow":
        return f"slept {args['ms']} ms"
    if tool == "fx.progress":
        return f"{args['steps']} steps done"
    if tool == "fx.gate":
        return "the gate opened"
    return json.dumps(args, separators=(",", ":"))


def judge(call: Call, args: dict, is_error: bool, texts: list[str]):
    if not is_error and texts == [expected_text(call.tool, args)]:
        call.outcome = "ok"
    elif is_error and texts == [ALREADY_RUNNING]:
        call.outcome = "running"
    elif is_error and texts == [OUTCOME_UNKNOWN]:
        call.outcome = "unknown"
    else:
        call.outcome, call.detail = "failed", f"unexpected answer (isError={is_error}): {texts!r}"[:300]


def leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in leaves(sub)]
    return [e]


# --- 2025-11-25 sessions through the SDK -----------------------------------------


@asynccontextmanager
async def sdk_session(url: str, seen_ids: set[str] | None = None, **kwargs):
    """A ClientSession on the SDK's Streamable HTTP client; notes each session id it sends."""

    async def note(request):
        sid = request.headers.get("mcp-session-id")
        if sid is not None and seen_ids is not None:
            seen_ids.add(sid)

    # One connection per request. HAProxy closes a kept-alive client connection
    # without an answer when the replica behind its request dies (so that a
    # browser would retry), and the SDK's transport does not survive a POST that
    # breaks that way: the whole session ends (mcp 2.3.0). On a fresh connection
    # HAProxy answers 502 instead, which the SDK reports as that call's error.
    client = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {API_KEY}", "Connection": "close"},
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"request": [note]},
    )
    async with client:
        async with streamable_http_client(url, http_client=client) as (r, w):
            async with ClientSession(r, w, **kwargs) as s:
                await s.initialize()
                yield s


async def session_call(load: Load, name: str, s: ClientSession, tool: str, args: dict, keyed: bool = False,
                       repeat: bool = False, progress=None) -> Call:
    """One `tools/call` on a session, recorded in `load.calls`."""
    tag = args[TAG]
    call = Call(name, tag, tool, keyed, repeat, time.monotonic())
    load.calls.append(call)
    try:
        result = await s.call_tool(
            tool, args, read_timeout_seconds=CALL_TIMEOUT, progress_callback=progress,
            meta={META_KEY: tag} if keyed else None,
        )
        texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        judge(call, args, result.is_error, texts)
    except MCPError as e:
        call.outcome = "hung" if e.code == REQUEST_TIMEOUT else "failed"
        call.code, call.message = e.code, e.message
        call.detail = f"JSON-RPC error {e.code}: {e.message}"[:300]
    call.end = time.monotonic()
    ids = load.sessions[name]
    call.session = next(iter(ids)) if len(ids) == 1 else f"{len(ids)} ids"
    return call


async def session_client(load: Load, name: str, opened: anyio.Event, go: anyio.Event):
    load.sessions[name] = set()
    try:
        async with sdk_session(load.url, load.sessions[name]) as s:
            # A client lists the tools first (the SDK would, to check the results
            # against their output schemas); a failure here shows on the calls.
            with contextlib.suppress(MCPError):
                await s.list_tools()
            load.open[name] = s
            opened.set()
            await go.wait()
            i = 0
            while load.wants(i := i + 1):
                tag, tool, args, keyed = load.plan(name, i)
                for repeat in (False, True) if keyed else (False,):
                    await session_call(load, name, s, tool, args, keyed, repeat)
            # Calls the test made on this session beside the loop end before it does.
            while any(c.client == name and not c.end for c in load.calls):
                await anyio.sleep(0.05)
    except Exception as e:  # the SDK's transport gave up: the session is lost
        opened.set()
        load.mark(f"{name} lost")
        load.lost[name] = "; ".join(f"{type(x).__name__}: {x}" for x in leaves(e))[:500]
        # A call it was making when it broke has no answer.
        for call in load.calls:
            if call.client == name and not call.end:
                call.end, call.outcome, call.detail = time.monotonic(), "failed", load.lost[name]
    finally:
        load.open.pop(name, None)


# --- 2026-07-28 stateless requests: plain POSTs ------------------------------------


def _parse(response: httpx2.Response) -> dict:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        raise ValueError("the event stream ended without an answer")
    return response.json()


async def stateless_call(http: httpx2.AsyncClient, url: str, call: Call, args: dict, rid: int):
    meta = envelope()
    if call.keyed:
        meta[META_KEY] = call.tag
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": call.tool, "arguments": args, "_meta": meta}}
    try:
        response = await http.post(url, json=body, headers=stateless_headers("tools/call", call.tool))
        if response.status_code != 200:
            call.outcome, call.detail = "failed", f"HTTP {response.status_code}: {response.text[:200]}"
        else:
            msg = _parse(response)
            if "error" in msg:
                call.code, call.message = msg["error"].get("code"), msg["error"].get("message", "")
                call.outcome, call.detail = "failed", f"JSON-RPC error: {json.dumps(msg['error'])[:250]}"
            else:
                result = msg["result"]
                texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
                judge(call, args, bool(result.get("isError")), texts)
    except httpx2.TimeoutException as e:
        call.outcome, call.detail = "hung", f"no answer within {CALL_TIMEOUT} s ({type(e).__name__})"
    except (httpx2.HTTPError, ValueError) as e:
        call.outcome, call.detail = "failed", f"{type(e).__name__}: {e}"[:300]
    call.end = time.monotonic()


async def stateless_client(load: Load, name: str):
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(CALL_TIMEOUT)) as http:
        i = 0
        while load.wants(i := i + 1):
            tag, tool, args, keyed = load.plan(name, i)
            for repeat in (False, True) if keyed else (False,):
                call = Call(name, tag, tool, keyed, repeat, time.monotonic())
                load.calls.append(call)
                await stateless_call(http, load.url, call, args, i * 2 + repeat)


async def run(load: Load, sessions: int, stateless: int, during=None):
    """Opens the sessions one after the other, then lets every client go; runs
    `during(load)` beside them (the test's events) and waits for all to end."""
    go = anyio.Event()
    async with anyio.create_task_group() as tg:
        for k in range(sessions):
            opened = anyio.Event()
            tg.start_soon(session_client, load, f"s{k + 1}", opened, go)
            with anyio.fail_after(30):
                await opened.wait()
        load.mark("sessions opened")
        for k in range(stateless):
            tg.start_soon(stateless_client, load, f"h{k + 1}")
        go.set()
        if during is not None:
            await during(load)


def latencies(load: Load) -> list[float]:
    return sorted(c.end - c.start for c in load.calls if c.outcome == "ok")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]
