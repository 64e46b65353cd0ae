"""OpenTelemetry traces: mcp-warden exports OTLP/HTTP protobuf that the
OpenTelemetry project's own classes decode, continues the client's trace (from
`_meta.traceparent` or the HTTP header) and hands the upstream a child context in
`_meta` and, the upstream being an HTTP one, in the `traceparent` header; a
child-process upstream (servers/meta_upstream.py, on the official Python SDK)
gets it in `_meta`."""

import json
import os
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from conftest import HERE, WARDEN
from otel_peers import Gateway, OtlpReceiver, Upstream, attrs

META_UPSTREAM = HERE / "servers" / "meta_upstream.py"

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
KEYS = {"ALICE_KEY": "alice-key-1", "BOB_KEY": "bob-key-1"}


def config_text(up, tmp_path, traces=""):
    return f"""
    [gateway]
    front = "http"

    [[caller]]
    name = "alice"
    api_key_env = "ALICE_KEY"

    [[caller]]
    name = "bob"
    api_key_env = "BOB_KEY"

    [access]
    default = "deny"
    webhook = {{ url = "{up.base}/grant", timeout_ms = 5000 }}

    [[rule]]
    callers = ["bob"]
    tools = ["up.secret"]
    effect = "deny"

    [[rule]]
    callers = ["*"]
    tools = ["up.risky"]
    effect = "ask"

    [[rule]]
    callers = ["*"]
    tools = ["up.*"]
    effect = "allow"

    [[hook]]
    phase = "before"
    url = "{up.base}/hook"
    timeout_ms = 5000

    [[upstream]]
    name = "up"
    url = "{up.base}/mcp"
    unknown_arguments = "warn"

    [store]
    url = "sqlite://{tmp_path}/warden.db"
    {traces}
    """


@pytest.fixture
def peers():
    receiver, up = OtlpReceiver(), Upstream()
    yield receiver, up
    receiver.close()
    up.close()


def start(config, env=None):
    env = {**KEYS, **(env or {})}
    return Gateway(config, env={k: v for k, v in env.items()})


def clean_env(monkeypatch):
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_SERVICE_NAME", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_HEADERS",
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_LOGS_EXPORTER"]:
        monkeypatch.delenv(var, raising=False)


def by_parent(spans, parent):
    return {s.name: s for s in spans if s.parent_span_id == parent.span_id}


def test_a_call_continues_the_clients_trace_and_the_upstream_gets_a_child(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    traces = f'[traces]\nendpoint = "{receiver.endpoint}"\nservice_name = "warden-test"\n'
    gw = start(config(config_text(up, tmp_path, traces)))
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        client_tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        meta = {"traceparent": client_tp, "tracestate": "vendor=1", "warden/idempotencyKey": "k-1"}
        r = gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "hi", "colour": "red"}, meta)
        assert r["result"]["content"][0]["text"] == '{"text": "hi", "colour": "red"}'

        trace = bytes.fromhex(CLIENT_TRACE)
        request = receiver.wait_for(lambda s: s.trace_id == trace and s.name == "tools/call up.echo")[0]
        assert request.parent_span_id == bytes.fromhex(CLIENT_SPAN)
        assert request.kind == request.SPAN_KIND_SERVER
        assert attrs(request)["mcp.method.name"] == "tools/call"
        assert attrs(request)["warden.caller"] == "alice"

        call = receiver.wait_for(lambda s: s.parent_span_id == request.span_id)[0]
        assert call.name == "execute_tool up.echo"
        a = attrs(call)
        assert a["warden.caller"] == "alice"
        assert a["gen_ai.tool.name"] == "up.echo"
        assert a["warden.upstream"] == "up"
        assert a["warden.decision"] == "allowed"
        assert a["warden.outcome"] == "ok"
        assert a["warden.undeclared_keys"] == ["colour"]
        assert a["warden.replayed"] is False

        receiver.wait_for(lambda s: s.parent_span_id == call.span_id and s.name == "tools/call")
        children = by_parent([s for _, s in receiver.spans], call)
        assert set(children) == {"warden.grant_webhook", "warden.hook", "warden.ledger", "tools/call"}
        assert attrs(children["warden.hook"]) == {"warden.hook.index": 0, "warden.hook.decision": "pass"}
        assert attrs(children["warden.ledger"]) == {"warden.ledger.claim": "run"}
        round_trip = children["tools/call"]
        assert round_trip.kind == round_trip.SPAN_KIND_CLIENT
        assert round_trip.start_time_unix_nano >= children["warden.ledger"].start_time_unix_nano
        for _, s in receiver.spans:
            assert s.start_time_unix_nano <= s.end_time_unix_nano

        # The upstream continues the trace under the gateway's round-trip span,
        # in _meta and in the header; the rest of _meta arrives as sent.
        headers, params = up.calls[-1]
        child = f"00-{CLIENT_TRACE}-{round_trip.span_id.hex()}-01"
        assert params["_meta"] == {"traceparent": child, "tracestate": "vendor=1", "warden/idempotencyKey": "k-1"}
        assert headers["traceparent"] == child
        assert headers["tracestate"] == "vendor=1"

        # The same key again: answered from the ledger, and the span says so.
        again = f"00-{'1' * 32}-{CLIENT_SPAN}-01"
        gw.call(KEYS["ALICE_KEY"], 2, "up.echo", {"text": "hi", "colour": "red"},
                {"traceparent": again, "warden/idempotencyKey": "k-1"})
        replay = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex("1" * 32) and s.name.startswith("execute_tool"))[0]
        assert attrs(replay)["warden.replayed"] is True
        ledger = receiver.wait_for(lambda s: s.parent_span_id == replay.span_id and s.name == "warden.ledger")[0]
        assert attrs(ledger)["warden.ledger.claim"] == "replay"
        assert len(up.calls) == 1
        assert receiver.content_types == {"application/x-protobuf"}
        for resource, _ in receiver.spans:
            assert resource["service.name"] == "warden-test"
    finally:
        gw.close()


def test_the_http_header_starts_the_trace_and_refusals_are_spans_too(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    traces = f'[traces]\nendpoint = "{receiver.endpoint}"\n'
    gw = start(config(config_text(up, tmp_path, traces)))
    try:
        bob = KEYS["BOB_KEY"]
        gw.open_session(bob)
        tp = lambda trace: {"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"}

        r = gw.call(bob, 1, "up.secret", {}, headers=tp("2" * 32))
        assert r["error"]["message"] == "Unknown tool 'up.secret'."
        request = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex("2" * 32) and s.kind == s.SPAN_KIND_SERVER)[0]
        assert request.parent_span_id == bytes.fromhex(CLIENT_SPAN)
        assert request.status.code == request.status.STATUS_CODE_ERROR
        call = receiver.wait_for(lambda s: s.parent_span_id == request.span_id)[0]
        assert (attrs(call)["warden.decision"], attrs(call)["warden.outcome"]) == ("unknown_tool", "refused")

        # An ask rule, and a client that cannot be asked: the approval span says refused.
        gw.call(bob, 2, "up.risky", {}, headers=tp("3" * 32))
        call = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex("3" * 32) and s.name == "execute_tool up.risky")[0]
        assert (attrs(call)["warden.decision"], attrs(call)["warden.outcome"]) == ("denied", "refused")
        approval = receiver.wait_for(lambda s: s.parent_span_id == call.span_id and s.name == "warden.approval")[0]
        assert attrs(approval)["warden.approval"] == "refused"

        # _meta names no parent: the header does, and the upstream gets the child.
        gw.call(bob, 3, "up.echo", {"text": "x"}, headers=tp("4" * 32))
        round_trip = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex("4" * 32) and s.kind == s.SPAN_KIND_CLIENT and s.name == "tools/call")[0]
        headers, params = up.calls[-1]
        assert params["_meta"]["traceparent"] == f"00-{'4' * 32}-{round_trip.span_id.hex()}-01"
        assert headers["traceparent"] == params["_meta"]["traceparent"]
    finally:
        gw.close()


def test_the_otel_variables_turn_export_on_and_name_the_service(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "gw-from-env"}
    gw = start(config(config_text(up, tmp_path)), env)
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "new trace"})
        round_trip = receiver.wait_for(lambda s: s.kind == s.SPAN_KIND_CLIENT and s.name == "tools/call")[0]
        resource = [r for r, s in receiver.spans if s is round_trip][0]
        assert resource["service.name"] == "gw-from-env"
        _, params = up.calls[-1]
        assert params["_meta"] == {"traceparent": f"00-{round_trip.trace_id.hex()}-{round_trip.span_id.hex()}-01"}
    finally:
        gw.close()


def test_the_otel_headers_variable_reaches_the_collector_and_never_the_log(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    secret = "k3y=with,commas"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
           # The conventions' form: name=value pairs, values percent-encoded.
           "OTEL_EXPORTER_OTLP_HEADERS": "X-Api-Key=k3y%3Dwith%2Ccommas, x-team=agents, not a header=1,"
                                         "Authorization: Bearer k3y-in-the-wrong-form, Host=elsewhere"}
    gw = start(config(config_text(up, tmp_path)), env)
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "with headers"})
        receiver.wait_for(lambda s: s.name == "tools/call")
        assert receiver.headers, "no export request seen"
        for h in receiver.headers:
            assert (h.get("x-api-key"), h.get("x-team")) == (secret, "agents"), h
        assert not any("not a header" in h for h in receiver.headers)
        assert all(h.get("host", "").startswith("127.0.0.1") for h in receiver.headers)
    finally:
        gw.close()
    log = "".join(gw.log)
    for n in (3, 4):
        assert f"OTEL_EXPORTER_OTLP_HEADERS: entry {n} is not name=value with a valid header name; it is left out" in log, log
    assert "OTEL_EXPORTER_OTLP_HEADERS: entry 5 names 'Host', which the export request sets itself" in log, log
    assert "k3y" not in log, log


def test_traces_are_off_by_default_and_meta_passes_unchanged(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    gw = start(config(config_text(up, tmp_path)), {"OTEL_SERVICE_NAME": "ignored-without-endpoint"})
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        client_tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "x"}, {"traceparent": client_tp})
        gw.call(KEYS["ALICE_KEY"], 2, "up.echo", {"text": "y"})
        headers, params = up.calls[0]
        assert params["_meta"] == {"traceparent": client_tp}
        assert headers["traceparent"] == client_tp
        headers, params = up.calls[1]
        assert "_meta" not in params and "traceparent" not in headers
        time.sleep(1.5)  # longer than the exporter's batch delay
        assert receiver.spans == []
    finally:
        gw.close()


def test_every_relayed_request_is_a_span_and_the_upstream_continues_it(peers, config, tmp_path, monkeypatch):
    """resources/read and prompts/get go to the upstream that serves them under a
    round-trip span; lists merged over two upstreams get one per upstream."""
    clean_env(monkeypatch)
    receiver, up = peers
    other = Upstream("second")
    traces = f'[traces]\nendpoint = "{receiver.endpoint}"\n'
    text = config_text(up, tmp_path, traces) + f"""
    [[upstream]]
    name = "second"
    url = "{other.base}/mcp"
    """
    gw = start(config(text))
    try:
        alice = KEYS["ALICE_KEY"]
        gw.open_session(alice)
        for i, (method, params, name) in enumerate([
            ("resources/read", {"uri": "note://trace-upstream/1"}, "resources/read note://trace-upstream/1"),
            ("prompts/get", {"name": "greet"}, "prompts/get greet"),
        ]):
            trace = f"{i + 5}" * 32
            tp = f"00-{trace}-{CLIENT_SPAN}-01"
            # One through _meta (with other _meta kept), one through the header.
            if i == 0:
                r = gw.request(alice, 10 + i, method, {**params, "_meta": {"traceparent": tp, "k": "v"}})
            else:
                r = gw.request(alice, 10 + i, method, params, headers={"traceparent": tp})
            assert "result" in r, r
            request = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex(trace) and s.kind == s.SPAN_KIND_SERVER)[0]
            assert request.name == name
            assert request.parent_span_id == bytes.fromhex(CLIENT_SPAN)
            assert attrs(request)["mcp.method.name"] == method
            assert attrs(request)["warden.caller"] == "alice"
            round_trip = receiver.wait_for(lambda s: s.parent_span_id == request.span_id)[0]
            assert (round_trip.name, round_trip.kind) == (method, round_trip.SPAN_KIND_CLIENT)
            assert attrs(round_trip) == {"mcp.method.name": method, "warden.upstream": "up"}
            got_method, headers, sent = [r for r in up.requests if r[0] == method][-1]
            child = f"00-{trace}-{round_trip.span_id.hex()}-01"
            assert sent["_meta"]["traceparent"] == child
            assert headers["traceparent"] == child
            if i == 0:
                assert sent["_meta"] == {"traceparent": child, "k": "v"}

        # resources/list over both upstreams: one round trip to each, under the request.
        trace = "7" * 32
        r = gw.request(alice, 20, "resources/list", {"_meta": {"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"}})
        assert [x["uri"] for x in r["result"]["resources"]] == ["note://trace-upstream/1", "note://second/1"]
        request = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex(trace) and s.kind == s.SPAN_KIND_SERVER)[0]
        assert request.name == "resources/list"
        trips = receiver.wait_for(lambda s: s.parent_span_id == request.span_id and len([
            x for _, x in receiver.spans if x.parent_span_id == request.span_id]) == 2)
        by_upstream = {attrs(s)["warden.upstream"]: s for s in trips}
        assert set(by_upstream) == {"up", "second"}
        for peer, name in [(up, "up"), (other, "second")]:
            _, headers, sent = [r for r in peer.requests if r[0] == "resources/list"][-1]
            child = f"00-{trace}-{by_upstream[name].span_id.hex()}-01"
            assert sent["_meta"]["traceparent"] == child
            assert headers["traceparent"] == child
    finally:
        gw.close()
        other.close()


def test_after_hooks_are_child_spans_of_the_call(peers, config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = peers
    traces = f'[traces]\nendpoint = "{receiver.endpoint}"\n'
    text = config_text(up, tmp_path, traces) + f"""
    [[hook]]
    phase = "after"
    url = "{up.base}/after"
    timeout_ms = 5000
    """
    gw = start(config(text))
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        trace = "8" * 32
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "x"}, {"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"})
        call = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex(trace) and s.name == "execute_tool up.echo")[0]
        after = receiver.wait_for(lambda s: s.parent_span_id == call.span_id and s.name == "warden.after_hook")[0]
        assert after.kind == after.SPAN_KIND_INTERNAL
        assert attrs(after) == {"warden.hook.index": 0}
        assert after.status.code != after.status.STATUS_CODE_ERROR
        before = receiver.wait_for(lambda s: s.parent_span_id == call.span_id and s.name == "warden.hook")[0]
        assert attrs(before)["warden.hook.index"] == 0
    finally:
        gw.close()


def test_spans_are_exported_when_the_gateway_stops(peers, config, tmp_path, monkeypatch):
    """With a batch delay of ten minutes, nothing would leave before the gateway
    ends: what arrives was sent by the flush at shutdown, on SIGTERM (HTTP
    front) and at the end of input (stdio front)."""
    clean_env(monkeypatch)
    receiver, up = peers
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    path = config(config_text(up, tmp_path))
    gw = start(path, env)
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "x"}, {"traceparent": f"00-{'9' * 32}-{CLIENT_SPAN}-01"})
        assert receiver.spans == []
    finally:
        gw.close()  # SIGTERM
    assert gw.proc.returncode == 0
    names = {s.name for _, s in receiver.spans if s.trace_id == bytes.fromhex("9" * 32)}
    assert {"tools/call up.echo", "execute_tool up.echo", "tools/call"} <= names

    receiver.spans.clear()
    proc = subprocess.Popen([WARDEN, "run", "--config", path, "--stdio"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, **KEYS, **env}, text=True)
    tp = f"00-{'a' * 32}-{CLIENT_SPAN}-01"
    for msg in [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "up.echo", "arguments": {"text": "y"}, "_meta": {"traceparent": tp}}},
    ]:
        proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()
    answer = None
    while answer is None:
        msg = json.loads(proc.stdout.readline())
        answer = msg if msg.get("id") == 1 else None
    assert answer["result"]["content"][0]["text"] == '{"text": "y"}'
    assert receiver.spans == []
    proc.stdin.close()  # end of input
    assert proc.wait(30) == 0
    names = {s.name for _, s in receiver.spans if s.trace_id == bytes.fromhex("a" * 32)}
    assert {"tools/call up.echo", "execute_tool up.echo", "tools/call"} <= names


def test_the_traces_endpoint_variable_is_used_as_it_is_and_samplers_choose(config, tmp_path, monkeypatch):
    clean_env(monkeypatch)
    receiver, up = OtlpReceiver(path="/collector/traces"), Upstream()
    try:
        path = config(config_text(up, tmp_path))
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.endpoint}/collector/traces",
               # The base URL would get /v1/traces, which this receiver refuses.
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_TRACES_SAMPLER": "parentbased_always_off"}
        gw = start(path, env)
        try:
            alice = KEYS["ALICE_KEY"]
            gw.open_session(alice)
            gw.call(alice, 1, "up.echo", {"text": "no parent: not recorded"})
            gw.call(alice, 2, "up.echo", {"text": "sampled parent"}, {"traceparent": f"00-{'b' * 32}-{CLIENT_SPAN}-01"})
            gw.call(alice, 3, "up.echo", {"text": "unsampled parent"}, {"traceparent": f"00-{'c' * 32}-{CLIENT_SPAN}-00"})
        finally:
            gw.close()  # exports what was recorded
        traces = {s.trace_id.hex() for _, s in receiver.spans}
        assert traces == {"b" * 32}
        # Not recorded, so the upstream got the client's context as it was sent.
        assert [p.get("_meta") for _, p in up.calls] == [
            None, {"traceparent": f"00-{'b' * 32}-{[s for _, s in receiver.spans if s.name == 'tools/call' and s.kind == s.SPAN_KIND_CLIENT][0].span_id.hex()}-01"},
            {"traceparent": f"00-{'c' * 32}-{CLIENT_SPAN}-00"}]

        receiver.spans.clear()
        env["OTEL_TRACES_SAMPLER"] = "always_off"
        gw = start(path, env)
        try:
            gw.open_session(KEYS["ALICE_KEY"])
            gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "x"}, {"traceparent": f"00-{'d' * 32}-{CLIENT_SPAN}-01"})
        finally:
            gw.close()
        assert receiver.spans == []
    finally:
        receiver.close()
        up.close()


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_a_stdio_upstream_gets_the_round_trip_span_as_parent_in_meta(config, tmp_path, monkeypatch, protocol):
    clean_env(monkeypatch)
    receiver = OtlpReceiver()
    text = f"""
    [gateway]
    front = "http"

    [[caller]]
    name = "alice"
    api_key_env = "ALICE_KEY"

    [[upstream]]
    name = "child"
    command = ["{sys.executable}", "{META_UPSTREAM}"]
    protocol = "{protocol}"
    timeout_ms = 20000

    [traces]
    endpoint = "{receiver.endpoint}"
    """
    gw = start(config(text))
    try:
        alice = KEYS["ALICE_KEY"]
        gw.open_session(alice)
        client_tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        r = gw.call(alice, 1, "child.seen_meta", {}, {"traceparent": client_tp, "tracestate": "vendor=1", "k": "v"})
        seen = json.loads(r["result"]["content"][0]["text"])
        call = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex(CLIENT_TRACE) and s.name == "execute_tool child.seen_meta")[0]
        round_trip = receiver.wait_for(lambda s: s.parent_span_id == call.span_id and s.name == "tools/call")[0]
        assert round_trip.kind == round_trip.SPAN_KIND_CLIENT
        assert attrs(round_trip)["warden.upstream"] == "child"
        child = f"00-{CLIENT_TRACE}-{round_trip.span_id.hex()}-01"
        # The child process continues the trace under the round trip; the rest
        # of _meta arrives as sent (2026-07-28 adds the request's envelope keys).
        assert (seen.pop("traceparent"), seen.pop("tracestate"), seen.pop("k")) == (child, "vendor=1", "v")
        if protocol == "2025-11-25":
            assert seen == {}
        else:
            assert set(seen) == {"io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/clientInfo",
                                 "io.modelcontextprotocol/protocolVersion"}, seen

        # No context from the client: the gateway's own trace, still under the round trip.
        r = gw.call(alice, 2, "child.seen_meta", {})
        seen = json.loads(r["result"]["content"][0]["text"])
        round_trip = receiver.wait_for(lambda s: s.trace_id != bytes.fromhex(CLIENT_TRACE)
                                      and s.kind == s.SPAN_KIND_CLIENT and s.name == "tools/call")[0]
        assert seen["traceparent"] == f"00-{round_trip.trace_id.hex()}-{round_trip.span_id.hex()}-01"
        assert "tracestate" not in seen
    finally:
        gw.close()
        receiver.close()


def test_an_approval_that_waits_and_is_accepted_is_a_span_of_the_call(peers, config, tmp_path, monkeypatch):
    """The client (the official SDK, 2025-11-25, over HTTP) is asked mid-call and
    approves; the call then goes upstream."""
    clean_env(monkeypatch)
    receiver, up = peers
    traces = f'[traces]\nendpoint = "{receiver.endpoint}"\n'
    gw = start(config(config_text(up, tmp_path, traces)))
    trace = "e" * 32
    asked = []

    async def approve(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def call():
        headers = {"Authorization": f"Bearer {KEYS['ALICE_KEY']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
            async with streamable_http_client(gw.url, http_client=client) as (r, w):
                async with ClientSession(r, w, elicitation_callback=approve) as s:
                    await s.initialize()
                    return await s.call_tool("up.risky", {}, meta={"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"})

    try:
        result = anyio.run(call)
        assert not result.is_error
        assert [c.text for c in result.content] == ["{}"]
        assert asked == ["Allow the call to 'up.risky' with these arguments?\n{}"]
        assert len(up.calls) == 1

        call_span = receiver.wait_for(lambda s: s.trace_id == bytes.fromhex(trace) and s.name == "execute_tool up.risky")[0]
        assert (attrs(call_span)["warden.decision"], attrs(call_span)["warden.outcome"]) == ("allowed", "ok")
        approval = receiver.wait_for(lambda s: s.parent_span_id == call_span.span_id and s.name == "warden.approval")[0]
        assert approval.kind == approval.SPAN_KIND_INTERNAL
        assert attrs(approval) == {"warden.approval": "approved"}
        assert approval.status.code != approval.status.STATUS_CODE_ERROR
        # The approval came first: the upstream was asked only once it ended.
        round_trip = receiver.wait_for(lambda s: s.parent_span_id == call_span.span_id and s.name == "tools/call")[0]
        assert approval.end_time_unix_nano <= round_trip.start_time_unix_nano
    finally:
        gw.close()


def test_audit_records_reach_the_collector_as_log_records_with_their_calls_trace(peers, config, tmp_path, monkeypatch):
    """T5: each audit record as an OTLP log record: the JSON line as its body
    (redacted as in the store), attributes to filter on, the call's trace."""
    clean_env(monkeypatch)
    receiver, up = peers
    extra = f"""
    [traces]
    endpoint = "{receiver.endpoint}"
    service_name = "warden-test"

    [audit]
    otlp = "{receiver.endpoint}"
    redact = ["text"]
    """
    gw = start(config(config_text(up, tmp_path, extra)), {"OTEL_BLRP_SCHEDULE_DELAY": "50"})
    try:
        gw.open_session(KEYS["BOB_KEY"])
        tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        gw.call(KEYS["BOB_KEY"], 1, "up.echo", {"text": "s3cret-value"}, {"traceparent": tp})
        refused = gw.call(KEYS["BOB_KEY"], 2, "up.secret", {})
        assert "error" in refused or refused["result"].get("isError"), refused

        def audit(r):
            return r.event_name == "mcp_warden.audit"

        records = receiver.wait_for_logs(audit, count=2)
        by_tool = {json.loads(r.body.string_value)["tool"]: r for r in records}
        echo, secret = by_tool["up.echo"], by_tool["up.secret"]
        body = json.loads(echo.body.string_value)
        assert body["caller"] == "bob" and body["decision"] == "allowed" and body["outcome"] == "ok"
        assert body["arguments"] == {"text": "[redacted]"}
        assert "s3cret-value" not in str(receiver.logs)
        assert attrs(echo) == {"mcp.tool.name": "up.echo", "warden.decision": "allowed",
                               "warden.outcome": "ok", "warden.caller": "bob", "warden.upstream": "up"}
        assert echo.severity_number == 9 and echo.severity_text == "INFO"
        assert echo.time_unix_nano > 0 and echo.observed_time_unix_nano == echo.time_unix_nano

        # The record's trace and span are its call's (the span the trace shows).
        call = receiver.wait_for(lambda s: s.name == "execute_tool up.echo")[0]
        assert echo.trace_id == bytes.fromhex(CLIENT_TRACE) == call.trace_id
        assert echo.span_id == call.span_id
        # Hidden from bob, so absent for him (G2): refused as unknown.
        assert attrs(secret)["warden.decision"] == "unknown_tool"

        for resource, scope, _ in receiver.logs:
            assert resource["service.name"] == "warden-test"
            assert scope == "mcp-warden"
        assert receiver.content_types == {"application/x-protobuf"}
    finally:
        gw.close()


def test_audit_records_do_not_follow_the_base_endpoint_alone(peers, config, tmp_path, monkeypatch):
    """T5: OTEL_EXPORTER_OTLP_ENDPOINT turns traces on, not the export of
    records; OTEL_EXPORTER_OTLP_LOGS_ENDPOINT does, used as it is."""
    clean_env(monkeypatch)
    receiver, up = peers
    gw = start(config(config_text(up, tmp_path)), {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                                   "OTEL_BSP_SCHEDULE_DELAY": "50"})
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "hi"})
        receiver.wait_for(lambda s: s.name == "execute_tool up.echo")
    finally:
        gw.close()
    assert receiver.logs == []

    gw = start(config(config_text(up, tmp_path)), {
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": receiver.endpoint + "/v1/logs",
        "OTEL_BLRP_SCHEDULE_DELAY": "50"})
    try:
        gw.open_session(KEYS["ALICE_KEY"])
        gw.call(KEYS["ALICE_KEY"], 1, "up.echo", {"text": "hi"})
        [record] = receiver.wait_for_logs(lambda r: r.event_name == "mcp_warden.audit")
        assert json.loads(record.body.string_value)["caller"] == "alice"
        assert record.trace_id == b""  # traces are off: no trace to name
    finally:
        gw.close()
