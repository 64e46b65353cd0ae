"""OpenTelemetry traces: mcp-warden exports OTLP/HTTP protobuf that the
OpenTelemetry project's own classes decode, continues the client's trace (from
`_meta.traceparent` or the HTTP header) and hands the upstream a child context in
`_meta` and, the upstream being an HTTP one, in the `traceparent` header."""

import time

import pytest

from otel_peers import Gateway, OtlpReceiver, Upstream, attrs

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
                "OTEL_SERVICE_NAME", "OTEL_SDK_DISABLED"]:
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
