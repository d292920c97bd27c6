"""Shared bits of the sandbox tests: small pools, a service that can be killed, waiting
on outside state, files to hide."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from sandbox import SandboxConfig, SandboxPool, SandboxService

# Small and quick: two workers, tight limits, short grace; warm-up kept tiny.  No spare:
# the tests count a pool's processes, and a spare starts in the background (test_faults
# has the spares' own tests).
FAST = dict(workers=2, spares=0, hang_grace_s=1.0, start_timeout_s=60.0, warmup="", memory_mb=1024)


def config(**overrides: object) -> SandboxConfig:
    return SandboxConfig(**{**FAST, **overrides})  # type: ignore[arg-type]


def dead_address() -> str:
    """A loopback URL where nothing listens: connections are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


@dataclass
class LiveService:
    """A real sandbox service on loopback, in this process."""

    pool: SandboxPool
    url: str
    scope: anyio.CancelScope
    stopped: anyio.Event

    async def kill(self) -> None:
        """Gone, as a killed process is: returns once the listener and every connection are closed."""
        self.scope.cancel()
        await self.stopped.wait()


@asynccontextmanager
async def live_service(secret: str | None = None, **overrides: object) -> AsyncIterator[LiveService]:
    """A :class:`SandboxService` over its own pool (``config(**overrides)``) on a free port."""
    async with SandboxPool(config(**overrides)) as pool, anyio.create_task_group() as tg:
        service, scope, stopped = SandboxService(pool, port=0, secret=secret), anyio.CancelScope(), anyio.Event()

        async def serve(*, task_status: anyio.abc.TaskStatus[int]) -> None:
            try:
                with scope:
                    await service.serve(task_status=task_status)
            finally:
                stopped.set()

        port = await tg.start(serve)
        yield LiveService(pool, f"http://127.0.0.1:{port}", scope, stopped)
        tg.cancel_scope.cancel()


async def wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll a condition on outside state (processes) that no event can signal."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def project_file() -> str:
    return str(Path(__file__).resolve().parents[2] / "pyproject.toml")


def home_file() -> str | None:
    home = Path(os.path.expanduser("~"))
    try:
        for p in home.iterdir():
            if p.is_file():
                return str(p)
    except OSError:
        pass
    return None
