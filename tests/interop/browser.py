"""Headless Chromium driven over the DevTools protocol, for console tests that
click: load a page, click a button as a user would (a mouse press and release
at its place on the screen, never a script in the page), read the DOM, keep a
screenshot. Standard library only: a minimal WebSocket client for the
protocol's one connection."""

import base64
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000"]


class _Socket:
    """One WebSocket connection (RFC 6455): text frames out, masked; frames in."""

    def __init__(self, url):
        rest = url.split("://", 1)[1]
        hostport, path = rest.split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            out += chunk
        return out

    def send(self, text):
        data = text.encode()
        head = bytes([0x81])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self):
        self.s.close()


class Browser:
    """One headless Chromium with one page."""

    def __init__(self, headers=None):
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed: scripts/test installs the Debian package")
        self.profile = tempfile.mkdtemp(prefix="warden-chromium-")
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, "--remote-debugging-port=0",
                                      f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = pathlib.Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + 30
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if time.time() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = port_file.read_text().split("\n")[0]
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(p for p in pages if p["type"] == "page")
        self.ws = _Socket(page["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events = []
        self.command("Page.enable")
        if headers:
            self.command("Network.enable")
            self.command("Network.setExtraHTTPHeaders", headers=headers)

    def command(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for_load(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, e in enumerate(self.events):
                if e.get("method") == "Page.loadEventFired":
                    del self.events[: i + 1]
                    return
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError("the page did not load")

    def open(self, url):
        self.events.clear()
        self.command("Page.navigate", url=url)
        self.wait_for_load()
        return self.dom()

    def dom(self, timeout=20):
        """The page's DOM. A page that moves on while it is read (a redirect or a
        form the page submits after its load, as a login does) is read again once
        the next document is there."""
        deadline = time.time() + timeout
        while True:
            try:
                r = self.command("Runtime.evaluate", expression="document.documentElement.outerHTML",
                                 returnByValue=True)
                return r["result"].get("value", "")
            except RuntimeError as e:
                if "navigated or closed" not in str(e) or time.time() > deadline:
                    raise
                time.sleep(0.1)

    def wait_for_url(self, url, timeout=20):
        """Waits until the page is `url` (after redirects and refreshes); its DOM."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.url() == url and self.command("Runtime.evaluate", expression="document.readyState",
                                                      returnByValue=True)["result"].get("value") == "complete":
                    return self.dom()
            except RuntimeError:
                pass  # between two documents
            time.sleep(0.1)
        raise TimeoutError(f"the page never became {url} (it is {self.url()})")

    def wait_for_text(self, text, timeout=20):
        """Waits until the page shows `text`; its DOM."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                dom = self.dom()
                if text in dom:
                    return dom
            except RuntimeError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"the page never showed {text!r}")

    def cookies(self):
        return self.command("Network.getAllCookies")["cookies"]

    def url(self):
        r = self.command("Runtime.evaluate", expression="location.href", returnByValue=True)
        # Between two documents the page may answer nothing yet.
        return r["result"].get("value", "")

    def click(self, selector):
        """Clicks the element `selector` finds with the mouse, at its centre, and
        waits for the page that follows."""
        self.command("Runtime.evaluate", returnByValue=True,
                     expression=f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'center'}})")
        r = self.command("Runtime.evaluate", returnByValue=True, expression=(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"))
        x, y = r["result"]["value"]
        self.events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            self.command("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        self.wait_for_load()
        return self.dom()

    def type(self, selector, text):
        """Types `text` into the field `selector` finds, as keyboard input."""
        self.command("Runtime.evaluate", expression=f"document.querySelector({json.dumps(selector)}).focus()")
        self.command("Input.insertText", text=text)

    def screenshot(self, path):
        r = self.command("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_bytes(base64.b64decode(r["data"]))

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)
