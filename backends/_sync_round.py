"""One weight sync's bookkeeping (:class:`Round`) and its report (:class:`SyncReport`):
which servers it paused, retried, took out (and why), and which of those ran out of
its deadline; and the steps it runs on each server, concurrently, with retries, each
bounded by the deadline, the probe's verification included."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, final

import anyio
import msgspec

from ._errors import BackendError
from ._pool_server import PoolServer
from ._probe import Probe, ProbeVerdict, verify_servers

__all__ = ["RETRY_DELAY_S", "Round", "SyncReport"]

RETRY_DELAY_S: Final = 0.5
"""Pause between retries of one server's step: long enough for a transient
connection reset to clear, short next to a reload (seconds)."""


class SyncReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one sync did and how long each phase took (seconds, wall clock)."""

    version: int
    transport: str
    servers: list[int]
    """Servers that now serve ``version``."""
    retried: list[int]
    """Servers that needed more than one try of some step."""
    removed: list[int]
    """Servers taken out of rotation (loaded later, when they come back)."""
    pause_s: float
    load_s: float
    flush_s: float
    version_s: float
    resume_s: float
    total_s: float
    timed_out: list[int] = []
    """Of ``removed``, the servers that missed the deadline (``timeout_s``)."""
    errors: list[str] = []
    """Why each server in ``removed`` was taken out (loud: it names the server)."""
    probe_diff_max: float = math.nan
    """The largest ``|server - learner|`` log-prob on the probe over the servers that
    took the weights (NaN without a probe)."""
    verify_s: float = 0.0


Step = Callable[[PoolServer], Awaitable[None]]


@final
class Round:
    """A sync's servers' fates.  ``removed`` are out of this sync (taken out of
    rotation at its end); ``late`` are those of them that missed the deadline;
    ``paused`` are resumed at its end, whatever happened; ``seconds`` holds each
    step's longest time on one server."""

    def __init__(self, deadline: float, retries: int) -> None:
        self.deadline = deadline
        self.retries = retries
        self.paused: list[PoolServer] = []
        self.retried: set[int] = set()
        self.removed: set[int] = set()
        self.late: set[int] = set()
        self.errors: dict[int, str] = {}  # the last failure of each server, naming it
        self.seconds: dict[str, float] = {}

    async def each(self, servers: Sequence[PoolServer], run: Step, by: float | None = None) -> None:
        """``run`` on every server concurrently, each within ``by`` (default: the
        deadline); a server that runs out of time is removed and late (``run``
        removes those that fail)."""

        async def one(server: PoolServer) -> None:
            with anyio.CancelScope(deadline=self.deadline if by is None else by) as scope:
                await run(server)
            if scope.cancelled_caught:
                self.removed.add(server.index)
                self.late.add(server.index)
                self.errors[server.index] = f"server {server.index} ({server.url}): missed the sync's deadline"

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)

    async def step(self, name: str, server: PoolServer, run: Step, *, failed: BaseException | None = None) -> bool:
        """``run`` on ``server`` with retries (``failed``: its first try already
        failed so); False, and the server removed, when every try failed."""
        start = anyio.current_time()
        try:
            if failed is None:
                try:
                    await run(server)
                    return True
                except BackendError as exc:
                    failed = exc
            self.retried.add(server.index)
            self.errors[server.index] = f"server {server.index} ({server.url}): {name}: {failed}"
            for _ in range(self.retries):
                await anyio.sleep(RETRY_DELAY_S)
                try:
                    await run(server)
                    self.errors.pop(server.index, None)
                    return True
                except BackendError as exc:
                    self.errors[server.index] = f"server {server.index} ({server.url}): {name}: {exc}"
            self.removed.add(server.index)
            return False
        finally:
            self.seconds[name] = max(self.seconds.get(name, 0.0), anyio.current_time() - start)

    async def verify(self, servers: Sequence[PoolServer], probe: Probe, reload: Step, *, by: float) -> float:
        """Score ``probe`` on every server, each by ``by`` (one beyond the tolerance
        reloaded once with ``reload``); those that still fail are removed, their reason
        kept.  Returns the largest difference (NaN if none was scored)."""
        verdicts: list[ProbeVerdict] = []

        async def one(server: PoolServer) -> None:
            verdicts.append(await verify_servers([server], probe, reload=reload))

        await self.each(servers, one, by=by)
        for verdict in verdicts:
            self.retried.update(verdict.retried)
            self.errors.update(verdict.failed)
            self.removed.update(verdict.failed)
        return max((d for v in verdicts for d in v.diffs.values()), default=math.nan)
