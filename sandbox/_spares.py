"""Spare workers: started before they are needed, so a replacement costs its slot nothing.

Starting a worker (a jail, an interpreter, numpy and sympy) takes about a second
of CPU.  A pool slot whose worker died takes a ready spare instead and goes on
at once; the keeper starts the spare's successor in the background.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from ._errors import SandboxBroken
from ._process import WorkerProcess

log = logging.getLogger("sandbox")

RETRY_FIRST_S = 0.5
"""Pause after a spare failed to start; it doubles with each failure in a row (slots
still start their own meanwhile)."""
RETRY_MAX_S = 30.0
"""The longest pause between failed starts (a machine out of fds or memory for a while)."""


class Spares:
    """Up to ``target`` started, idle workers.  A policy plus one task, :meth:`keep`,
    which the pool runs in its task group.

    Resource handling: :meth:`keep` owns the spares it started; when it is cancelled
    (the pool closes) it closes every spare not taken.  A taken spare belongs to the
    taker.
    """

    def __init__(self, target: int, start: Callable[[], Awaitable[WorkerProcess]]) -> None:
        self.target = target
        self._start = start
        self._ready: list[WorkerProcess] = []
        self._taken_event = anyio.Event()
        self.taken = 0
        """Spares handed out by :meth:`take`."""
        self.died = 0
        """Spares that exited while waiting (killed, crashed)."""

    def __len__(self) -> int:
        return len(self._ready)

    def take(self) -> WorkerProcess | None:
        """A ready spare that is alive (not exited, not stopped), or None (none ready).
        Dead ones are left to the keeper, woken here, which closes and replaces them."""
        for spare in self._ready:
            if spare.alive():
                self._ready.remove(spare)
                self.taken += 1
                self._taken_event.set()
                return spare
        self._taken_event.set()
        return None

    async def keep(self) -> None:
        """Keep ``target`` spares ready until cancelled; replace those that die waiting."""
        pause = RETRY_FIRST_S
        try:
            while True:
                for dead in [w for w in self._ready if not w.alive()]:
                    self._ready.remove(dead)
                    self.died += 1
                    log.warning("sandbox spare worker died or stopped while waiting (exit %s); replacing it", dead.process.returncode)
                    await dead.aclose()
                if len(self._ready) < self.target:
                    try:
                        self._ready.append(await self._start())
                        pause = RETRY_FIRST_S
                    except (SandboxBroken, OSError) as e:  # OSError: out of fds, memory, processes
                        log.warning("sandbox spare worker failed to start (next try in %.1fs): %s", pause, str(e).splitlines()[0])
                        await anyio.sleep(pause)
                        pause = min(pause * 2, RETRY_MAX_S)
                    continue
                await self._until_taken_or_dead()
        finally:
            ready, self._ready = self._ready, []
            for spare in ready:
                await spare.aclose()

    async def _until_taken_or_dead(self) -> None:
        self._taken_event = anyio.Event()
        async with anyio.create_task_group() as watch:

            async def exits(spare: WorkerProcess) -> None:
                await spare.wait_exit()
                watch.cancel_scope.cancel()

            for spare in self._ready:
                watch.start_soon(exits, spare)
            await self._taken_event.wait()
            watch.cancel_scope.cancel()
