"""Peers for the trace and console tests, each a real HTTP server on a thread:

- `OtlpReceiver`: an OTLP/HTTP receiver of traces and logs that decodes what it
  gets with the OpenTelemetry project's own protobuf classes (PyPI
  `opentelemetry-proto`);
- `Upstream`: a small Streamable HTTP MCP server that records the headers and the
  `_meta` of each tools/call it runs, and also serves a grant webhook (`/grant`)
  and a before-hook webhook (`/hook`);
- `Gateway`: mcp-warden started on an HTTP front, and a client for it.
"""

import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import WARDEN


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a peer that hung up (the gateway stopping) is no test failure


def _serve(handler):
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def send(self, status, body=b"", content_type="application/json", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


class OtlpReceiver:
    """Collects every span exported to http://127.0.0.1:<port>/v1/traces (or
    `path`), and every log record exported to /v1/logs."""

    def __init__(self, path="/v1/traces"):
        self.spans = []  # (resource attributes, span)
        self.logs = []  # (resource attributes, scope name, log record)
        self.content_types = set()
        self.headers = []  # each export request's headers, names lowercased
        lock = threading.Lock()
        me = self

        class H(_Handler):
            def do_POST(self):
                data = self.body()
                if self.path == "/v1/logs":
                    return self.logs_request(data)
                if self.path != path:
                    return self.send(404)
                me.content_types.add(self.headers.get("Content-Type"))
                me.headers.append({k.lower(): v for k, v in self.headers.items()})
                request = ExportTraceServiceRequest.FromString(data)
                with lock:
                    for rs in request.resource_spans:
                        resource = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            for span in ss.spans:
                                me.spans.append((resource, span))
                self.send(200, b"", "application/x-protobuf")

            def logs_request(self, data):
                me.content_types.add(self.headers.get("Content-Type"))
                request = ExportLogsServiceRequest.FromString(data)
                with lock:
                    for rl in request.resource_logs:
                        resource = {kv.key: kv.value.string_value for kv in rl.resource.attributes}
                        for sl in rl.scope_logs:
                            for record in sl.log_records:
                                me.logs.append((resource, sl.scope.name, record))
                self.send(200, b"", "application/x-protobuf")

        self.server = _serve(H)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"

    def wait_for_logs(self, predicate, count=1, timeout=10.0):
        """The log records that `predicate` holds for, once there are `count` of them."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [r for _, _, r in self.logs if predicate(r)]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"fewer than {count} such log records within {timeout}s; {len(self.logs)} seen")

    def wait_for(self, predicate, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [s for _, s in self.spans if predicate(s)]
            if found:
                return found
            time.sleep(0.05)
        names = sorted({s.name for _, s in self.spans})
        raise AssertionError(f"no such span within {timeout}s; spans seen: {names}")

    def close(self):
        self.server.shutdown()


def attrs(span):
    """A span's attributes as a plain dict."""
    out = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [x.string_value for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, kind)
    return out


TOOLS = [
    {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "secret", "description": "Hidden from bob.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "risky", "description": "Needs approval.", "inputSchema": {"type": "object", "properties": {}}},
]


class Upstream:
    """A Streamable HTTP MCP server (JSON answers) with tools, a resource and a
    prompt; records each tools/call (`calls`) and every other request it is
    sent after initialize (`requests`: method, headers, params). `tools` may be
    changed between runs (the pins tests do)."""

    def __init__(self, name="trace-upstream"):
        self.calls = []  # (headers dict, params)
        self.requests = []  # (method, headers dict, params)
        self.tools = [dict(t) for t in TOOLS]
        self.after_events = []
        me = self

        class H(_Handler):
            def do_GET(self):
                self.send(405)

            def do_DELETE(self):
                self.send(200)

            def do_POST(self):
                msg = json.loads(self.body() or b"null")
                if self.path == "/grant":
                    return self.send(200, b'{"decisions": {}}')
                if self.path == "/hook":
                    return self.send(200, b'{"decision": "pass"}')
                if self.path == "/after":
                    me.after_events.append(msg)
                    return self.send(200, b"{}")
                if not isinstance(msg, dict) or "id" not in msg:
                    return self.send(202)
                method, params = msg.get("method"), msg.get("params") or {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                if method != "initialize":
                    me.requests.append((method, headers, params))
                if method == "initialize":
                    result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                              "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                              "serverInfo": {"name": name, "version": "1"}}
                elif method == "tools/list":
                    result = {"tools": me.tools}
                elif method == "resources/list":
                    uri = f"note://{name}/1"
                    result = {"resources": [{"uri": uri, "name": f"{name} note"}]}
                elif method == "resources/read":
                    result = {"contents": [{"uri": params.get("uri"), "text": "a note"}]}
                elif method == "prompts/list":
                    result = {"prompts": [{"name": "greet"}]}
                elif method == "prompts/get":
                    result = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}]}
                elif method == "tools/call":
                    me.calls.append(({k.lower(): v for k, v in self.headers.items()}, params))
                    text = json.dumps(params.get("arguments") or {})
                    result = {"content": [{"type": "text", "text": text}]}
                else:
                    result = {}
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
                self.send(200, body, headers=[("Mcp-Session-Id", "up-1")])

        self.server = _serve(H)
        self.base = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()


class Gateway:
    """mcp-warden on an HTTP front (port 0), with an MCP client over plain HTTP."""

    def __init__(self, config_path, env=None, admin=False):
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [WARDEN, "run", "--config", config_path, "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=full_env, text=True)
        self.log = []
        self.url = self.admin = None
        found = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on (http://\S+/mcp)", line)
                if m:
                    self.url = m.group(1)
                m = re.search(r"admin listener on (http://\S+)/", line)
                if m:
                    self.admin = m.group(1)
                if self.url and (self.admin or not admin):
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(30):
            self.close()
            raise AssertionError("the gateway did not start:\n" + "".join(self.log))
        self.sessions = {}

    def post(self, msg, key, headers=None):
        """POSTs one message as `key`'s caller; returns the JSON-RPC response (or None)."""
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {key}", "MCP-Protocol-Version": "2025-06-18"}
        if key in self.sessions:
            h["Mcp-Session-Id"] = self.sessions[key]
        h.update(headers or {})
        req = urllib.request.Request(self.url, json.dumps(msg).encode(), h, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            sid = r.headers.get("Mcp-Session-Id")
            if sid:
                self.sessions[key] = sid
            data = r.read().decode()
            if r.headers.get("Content-Type", "").startswith("text/event-stream"):
                for line in data.splitlines():
                    if line.startswith("data:") and '"id"' in line:
                        return json.loads(line[5:])
                return None
            return json.loads(data) if data else None

    def open_session(self, key):
        self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "trace-test", "version": "1"}}}, key)
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, key)

    def request(self, key, id, method, params, headers=None):
        return self.post({"jsonrpc": "2.0", "id": id, "method": method, "params": params}, key, headers)

    def call(self, key, id, name, arguments, meta=None, headers=None):
        params = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        return self.post({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params},
                         key, headers)

    def get(self, path, headers=None):
        """GETs an admin path; (status, content type, body)."""
        req = urllib.request.Request(self.admin + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read().decode()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
