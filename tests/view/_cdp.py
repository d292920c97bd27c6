"""A small Chrome DevTools Protocol client for the browser test: Debian's headless
Chromium, driven over one websocket (wsproto, which hypercorn brings), synchronously.

Playwright and Selenium are not used: both fetch browsers or drivers from the network."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import urlopen

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request, TextMessage

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


class Page:
    """One tab: ``call`` sends a CDP command and returns its result (events are skipped)."""

    def __init__(self, ws_url: str) -> None:
        u = urlparse(ws_url)
        self._sock = socket.create_connection((u.hostname, u.port), timeout=120)
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._sock.sendall(self._ws.send(Request(host=f"{u.hostname}:{u.port}", target=u.path)))
        self._next = 0
        self._text = ""
        for event in self._events():
            if isinstance(event, AcceptConnection):
                return
        raise ConnectionError("the browser closed the devtools connection")

    def _events(self) -> Iterator[Any]:
        while True:
            data = self._sock.recv(1 << 16)
            self._ws.receive_data(data or None)
            for event in self._ws.events():
                if isinstance(event, Ping):
                    self._sock.sendall(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    raise ConnectionError("the browser closed the devtools connection")
                yield event
            if not data:
                return

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        self._sock.sendall(self._ws.send(TextMessage(json.dumps({"id": self._next, "method": method, "params": params}))))
        for event in self._events():
            if isinstance(event, Message):
                self._text += event.data
                if not event.message_finished:
                    continue
                message, self._text = json.loads(self._text), ""
                if message.get("id") == self._next:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message["result"]
        raise ConnectionError("the browser closed the devtools connection")

    def js(self, expression: str) -> Any:
        """Evaluate ``expression`` (awaiting a promise) in the page; its JSON value."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, condition: str, timeout_ms: int = 30000) -> Any:
        """Resolve when the JS ``condition`` is truthy (checked on every animation frame),
        returning its value; fails after ``timeout_ms`` of the browser's clock."""
        return self.js(f"""new Promise((resolve, reject) => {{
            const until = performance.now() + {timeout_ms};
            const check = () => {{
                let v; try {{ v = ({condition}); }} catch (e) {{ v = null; }}
                if (v) resolve(v);
                else if (performance.now() > until) reject(new Error("timed out waiting for: " + {json.dumps(condition)}));
                else requestAnimationFrame(check);
            }};
            check();
        }})""")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]))


@contextmanager
def browser(profile: Path, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """A headless Chromium with one tab open, closed on exit."""
    exe = find_browser()
    assert exe is not None
    args = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
        "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env={**os.environ, "HOME": str(profile)})
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                break
        else:
            raise RuntimeError(f"{exe} exited with {proc.wait()} before listening")
        port = urlparse(found.group(1)).port
        targets = json.loads(urlopen(f"http://127.0.0.1:{port}/json/list", timeout=60).read())
        page = Page(next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"))
        page.call("Page.enable")
        yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # Terminated, Chromium leaves its singleton socket's directory in /tmp
        # (org.chromium.Chromium.*, one a run); the profile links to the socket.
        if (link := profile / "SingletonSocket").is_symlink():
            shutil.rmtree(Path(os.readlink(link)).parent, ignore_errors=True)
