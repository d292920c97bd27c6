"""The ASGI app of ``rstar2 view``: the page's static assets and a small JSON API.

    GET /                  the page (assets/index.html; the rest under /assets/)
    GET /api/run           the run's name, its trajectory sources and steps
    GET /api/metrics       metrics.jsonl records from ?since=N on (the page polls it)
    GET /api/table         one page of a source's trajectories (filters: :class:`Query`)
    GET /api/trajectory    one record: ?source=&i=
    GET /api/group         one problem's samples at one step: ?source=&step=&problem=

Read-only over the run directory.  File reads run in a worker thread, one at a time
(the reader's tables are not thread-safe), so a large search never stalls the loop.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl

import anyio
import anyio.abc
import anyio.to_thread
import msgspec
import sniffio

from ._source import Query, RunReader

__all__ = ["ASSETS", "ViewApp", "asset_text", "serve"]

ASSETS: Final = ("index.html", "app.js", "charts.js", "app.css")
"""The page's files (package data under ``rstar2_async/view/assets``)."""

_TYPES: Final = {"html": "text/html", "js": "text/javascript", "css": "text/css"}

Send = Callable[[dict[str, Any]], Awaitable[None]]


def asset_text(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


class ViewApp:
    """An ASGI application over one run directory (``RunReader`` checks it first)."""

    def __init__(self, run_dir: Path) -> None:
        self.reader = RunReader(run_dir)
        self._lock = anyio.CapacityLimiter(1)
        self._assets = {name: asset_text(name).encode() for name in ASSETS}

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict]], send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()  # startup: nothing to start
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        params = dict(parse_qsl(scope.get("query_string", b"").decode()))
        if scope["method"] != "GET":
            await _respond(send, 405, b'{"error":"read-only: GET only"}', "application/json")
        elif path == "/" or path.startswith("/assets/"):
            name = "index.html" if path == "/" else path.removeprefix("/assets/")
            body = self._assets.get(name)
            if body is None:
                await _respond(send, 404, b"not found", "text/plain")
            else:
                await _respond(send, 200, body, _TYPES[name.rsplit(".", 1)[1]])
        elif path.startswith("/api/") and hasattr(self, "_api_" + path.removeprefix("/api/")):
            handler = getattr(self, "_api_" + path.removeprefix("/api/"))
            try:
                result = await anyio.to_thread.run_sync(partial(handler, params), limiter=self._lock)
            except (KeyError, IndexError, ValueError, msgspec.DecodeError) as exc:  # a bad query, a bad line
                message = f"{type(exc).__name__}: {exc}"
                await _respond(send, 400, msgspec.json.encode({"error": message}), "application/json")
            else:
                await _respond(send, 200, msgspec.json.encode(result), "application/json")
        else:
            await _respond(send, 404, b'{"error":"no such page"}', "application/json")

    # -- the API (in a worker thread) -------------------------------------------------

    def _api_run(self, params: dict[str, str]) -> dict[str, Any]:
        sources = self.reader.sources()
        steps = self.reader.table("train").steps() if "train" in sources else {}
        return {"name": self.reader.run_dir.name, "sources": sources, "steps": sorted(steps), "trajectories": sum(steps.values())}

    def _api_metrics(self, params: dict[str, str]) -> dict[str, Any]:
        since = int(params.get("since", 0))
        records = self.reader.metrics()
        return {"records": records[since:], "total": len(records)}

    def _api_table(self, params: dict[str, str]) -> dict[str, Any]:
        query = msgspec.convert({k: v for k, v in params.items() if v != ""}, Query, strict=False)
        return self.reader.table(query.source).page(query)

    def _api_trajectory(self, params: dict[str, str]) -> Any:
        return self.reader.table(params.get("source", "train")).record(int(params["i"]))

    def _api_group(self, params: dict[str, str]) -> Any:
        return self.reader.group(params.get("source", "train"), int(params["step"]), params["problem"])


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode() + b"; charset=utf-8"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve(run_dir: Path, host: str, port: int, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve :class:`ViewApp` with hypercorn (on asyncio or trio, whichever runs) until
    cancelled.  ``started`` gets the URL once the socket listens (port 0: any free port).

    Raises:
        RunDirError: the run directory is missing or empty (before anything listens).
        OSError: the address is taken."""
    from hypercorn.config import Config

    app = ViewApp(run_dir)
    sock = socket.create_server((host, port))
    url = f"http://{host}:{sock.getsockname()[1]}/"
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns the listening socket from here
    config.accesslog = config.errorlog = None
    config.graceful_timeout = 2.0  # the page's requests are short: Ctrl-C stops at once
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as hypercorn_serve
    else:
        from hypercorn.asyncio import serve as hypercorn_serve
    stop, stopped = anyio.Event(), anyio.Event()

    async def run_server() -> None:
        # Shielded: hypercorn stops through its trigger (closing its connections in
        # order); cancelling it from outside leaves its own task group half torn down.
        with anyio.CancelScope(shield=True):
            try:
                await hypercorn_serve(app, config, shutdown_trigger=stop.wait, mode="asgi")
            finally:
                stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_server)
        task_status.started(url)
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()
            with anyio.CancelScope(shield=True):
                await stopped.wait()
