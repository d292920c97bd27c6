"""Weight sync: one call moves every server of a pool to new weights and a new version.

``await sync.sync(weights, version)`` runs, with the pool admitting no new turn:

1. pause   every server in rotation (``wait``: in-flight requests finish first;
           ``abort``: they end at once and their clients resume them after step 5;
           ``keep``: they freeze and go on after step 5, their KV computed again);
2. load    the new weights (disk: each server reads a safetensors directory;
           broadcast: the learner's rank 0 sends each tensor to all servers at once,
           from a name -> tensor mapping, read back from such a directory, or from
           memory while the directory is written: ``_transports``);
3. flush   prefix caches (cached KV of the old weights is wrong for the new ones);
4. version set the version on the server and on the pool's clients (stamped on
           every request sent from now on; a request keeps the version it was
           sent to, whenever it ends);
5. resume  every paused server, always (shielded), whatever failed before;
6. verify  every server scores a :class:`~backends.Probe` (``_probe``) before the
           pool admits a turn (after step 5: a paused vLLM schedules nothing).

A deadline bounds it all (``timeout_s`` from the start): a server that has not
paused by half of it, or not finished its load, flush and version by all of it, is
taken out of rotation (and loaded when it answers again); the others go on, each
server's steps 2-4 apart from the others' (but a broadcast, a collective: it gets
half the time left, the disk loads of the servers it failed the rest), and the
report names it (``timed_out``).  Steps 5 and 6 get what is left of the deadline, at
least :data:`RESUME_S`, for the servers in time (a late one, likely hung, is not
waited for: it is resumed when it answers again, or by :meth:`WeightSync.release`);
a server that does not answer its resume by then is taken out too.  Cancelled
(SIGTERM), a sync ends within :data:`RESUME_S`: its resumes' time, never 600 s per call.

Guarantees:
- No server is left paused: step 5 runs on every way out, cancellation included;
  a server that cannot be resumed then (it hangs, or its pause missed the deadline)
  is out of rotation, resumed before it comes back, and resumed by
  :meth:`WeightSync.release` when the run ends first (a warning names one that
  still cannot be).
- No server serves a mixed version: a server whose load, flush or version step
  still fails after ``retries`` is taken out of the pool's rotation before resume;
  it is loaded with the current weights when it comes back (the pool calls
  :meth:`WeightSync.on_server_back` before reusing a server that was down, e.g.
  after the fleet restarted it), and only then re-enters rotation.
- ``sync`` raises :class:`WeightSyncError` only if *no* server took the new
  weights and none of them ran out of time (those are loaded with them when they
  answer again); otherwise it returns a :class:`SyncReport` naming the servers it
  retried, those it took out and why (each named), and those of them that ran
  out of time.
- A server that failed the probe stays out until it restarts; one that comes back
  is loaded and verified before it re-enters.
- Its steps end within ``timeout_s`` (plus :data:`RESUME_S` when cancelled, or when
  the deadline passed while a server in time was resuming) whatever the servers do
  (hang, die, stop answering mid-transfer); ``on_version`` and ``restart`` are the
  caller's.

Other pools over the same servers (rollout shards in other processes) follow the
sync: ``hold`` keeps them from admitting new turns during it, ``on_version`` tells
them the new version before the servers resume, and :func:`follow_versions` (``_follow``) keeps a
server out of their rotation until this sync's pool has loaded it.

Not covered: servers that are down when ``sync`` starts are skipped (they are
loaded when they come back); the broadcast transport cannot retry a single
server (the transfer is a collective) and reloads it from disk instead: from the
directory it was given, or ``fallback_dir``.  Once a member has left the
broadcast group (out of rotation at a sync, a failed receive, a restart), every
later sync loads all servers from disk: the group is not re-formed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import Any, Final, final

import anyio

from ._errors import BackendError, WeightSyncError
from ._pool import ServerPool
from ._pool_server import PoolServer
from ._probe import Probe, verify_servers
from ._protocols import PauseMode
from ._sync_round import RETRY_DELAY_S, Round, SyncReport
from ._transports import BroadcastTransport, DiskTransport, PendingWeights, weights_directory

__all__ = ["RESUME_S", "SyncReport", "WeightSync"]

log = logging.getLogger("backends")

RESUME_S: Final = 5.0
"""The least time the resumes get, even past the deadline: a healthy server answers
``/resume`` in milliseconds; one that does not in 5 s is taken out."""


@final
class WeightSync:
    """Moves a pool's servers to new weights; see the module docstring.

    Args:
        pool: the servers (borrowed; the sync installs itself as the pool's
            ``on_server_back`` hook).
        transport: :class:`DiskTransport` or :class:`BroadcastTransport`.
        pause_mode: ``wait`` (in-flight requests finish on the old weights),
            ``abort`` (they stop now and resume on the new weights; their tokens
            carry the older version) or ``keep`` (as ``abort``, frozen on the server
            instead of resumed by the client; vLLM only).
        retries: extra tries of a failing server's step before taking it out.
        restart: optional ``restart(index)`` (e.g. the fleet's) called for a server
            taken out; it comes back through the pool's poller and is loaded then.
        hold: for servers that other pools generate on too (rollout shards in other
            processes, each pool :func:`follow_versions`): ``hold()`` is entered with
            the pool's own hold, for the whole sync, and must keep every other pool
            from admitting a new turn while inside.
        on_version: tells those pools each new version: awaited with ``(version,
            servers)`` (the indexes in ``pool`` that took it) before the servers
            resume, so that what they generate next is stamped with it.
        timeout_s: the deadline of one sync (see the module docstring), and of
            loading one server that comes back (:meth:`on_server_back`).
    """

    def __init__(
        self,
        pool: ServerPool,
        transport: DiskTransport | BroadcastTransport,
        *,
        pause_mode: PauseMode = "wait",
        retries: int = 2,
        restart: Callable[[int], Awaitable[None]] | None = None,
        hold: Callable[[], AbstractAsyncContextManager[None]] | None = None,
        on_version: Callable[[int, list[int]], Awaitable[None]] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: expected > 0, got {timeout_s}")
        self.pool = pool
        self.timeout_s = timeout_s
        self.transport = transport
        self.pause_mode = pause_mode
        self.retries = retries
        self.restart = restart
        self.hold = hold
        self.on_version = on_version
        self._version: int | None = None
        self._source: Any = None  # where the current weights are (or will be) on disk
        # Servers a failed or cancelled load may have left with part of its weights:
        # none re-enters rotation until the current weights are loaded whole.
        self._partial: set[int] = set()
        self._unresumed: set[int] = set()  # paused by a sync that could not resume them
        self._probe: Probe | None = None  # the current weights' probe, to verify a server that comes back
        self._failed_probe: set[int] = set()  # out until they restart: they hold this version, wrongly
        pool.on_server_back = self.on_server_back

    async def sync(self, weights: Any, version: int, probe: Probe | None = None) -> SyncReport:
        """Load ``weights`` (a safetensors directory; for broadcast also a name ->
        tensor mapping or :class:`PendingWeights`) on every server in rotation and
        switch them to ``version``; with ``probe``, verify every server against it
        before the pool admits a turn.  A directory (a pending one too) is remembered
        to load servers that come back later.

        Raises:
            WeightSyncError: no server is in rotation, or none took the weights (or
                passed the probe) and none ran out of time (or there is no directory
                to load those from); the message names each server's failure.

        Cancellation: servers paused so far are resumed (shielded, within the deadline
        or :data:`RESUME_S`); one that may hold partial weights is out of rotation.
        """
        t0 = time.monotonic()
        servers = [s for s in self.pool.servers if self.pool.is_up(s.index)]
        if not servers:
            raise WeightSyncError("no server in rotation to sync")
        if isinstance(weights, (str, Path, PendingWeights)):
            self._source = weights
        elif isinstance(self.transport, BroadcastTransport):
            self._source = self.transport.fallback_dir
        begun = anyio.current_time()
        rnd = Round(begun + self.timeout_s, self.retries)
        ok: list[int] = []
        diff = math.nan
        ended = False  # else cancelled (SIGTERM) or failed: the resumes get RESUME_S, not the deadline
        async with self.pool.held(), self.hold() if self.hold is not None else contextlib.nullcontext():
            try:
                # Half the deadline at most: the others' loads need the rest.
                await rnd.each(servers, partial(self._pause, rnd), by=begun + self.timeout_s / 2)
                live = [s for s in servers if s.index not in rnd.removed]
                self._partial.update(s.index for s in live)  # until each has loaded whole
                try:
                    failures: dict[int, BaseException] | None = None
                    if self.transport.collective(live, weights):
                        start = anyio.current_time()
                        failures = await self.transport.load(live, weights, version, rnd.deadline)
                        rnd.seconds["load"] = anyio.current_time() - start
                    await rnd.each(live, partial(self._settle, rnd, weights, version, failures))
                except BaseException:
                    rnd.removed.update(s.index for s in live if s.index in self._partial)
                    raise
                ok = [s.index for s in servers if s.index not in rnd.removed]
                if ok:
                    self.pool.set_weight_version(version, ok)
                    self._version = version
                    if self.on_version is not None:
                        await self.on_version(version, ok)
                ended = True
            finally:
                for index in rnd.removed:
                    self.pool.set_up(index, False)
                with anyio.CancelScope(shield=True):
                    start = anyio.current_time()
                    await self._resume(rnd, max(rnd.deadline if ended else 0.0, start + RESUME_S))
                    rnd.seconds["resume"] = anyio.current_time() - start
                # A pause that missed the deadline may still reach it (a stopped
                # process reads it once continued): resumed again on its way back.
                self._unresumed.update(s.index for s in rnd.paused if s.index in rnd.removed or s.index in rnd.late)
            if ok and probe is not None:  # still held: no turn is admitted before this passes
                start = anyio.current_time()
                resumed = [i for i in ok if i not in rnd.late and i not in self._unresumed]
                ok, diff = await self._verify(rnd, resumed, weights, version, probe)
                rnd.seconds["verify"] = anyio.current_time() - start
        if not ok:
            if not rnd.late or self._source is None:
                why = "; ".join(rnd.errors[i] for i in sorted(rnd.errors)) or f"removed: {sorted(rnd.removed)}"
                raise WeightSyncError(f"no server took weights version {version}: {why}")
            # Out of time, not failed: each is loaded with this version when it answers
            # again (turns wait for a server meanwhile, up to the pool's unavailable_timeout_s).
            self.pool.set_weight_version(version, [])
            self._version = version
            if self.on_version is not None:
                await self.on_version(version, [])
        if self.restart is not None:
            for index in sorted(rnd.removed):
                await self.restart(index)
        if rnd.late:
            log.warning("weight sync v%d: servers %s missed the %g s deadline; taken out, loaded when they answer again",
                        version, sorted(rnd.late), self.timeout_s)
        t = rnd.seconds
        return SyncReport(
            version=version,
            transport=self.transport.name,
            servers=[i for i in ok if i not in rnd.late],
            retried=sorted(rnd.retried),
            removed=sorted(rnd.removed | rnd.late),
            timed_out=sorted(rnd.late),
            pause_s=t.get("pause", 0.0),
            load_s=t.get("load", 0.0),
            flush_s=t.get("flush", 0.0),
            version_s=t.get("version", 0.0),
            resume_s=t.get("resume", 0.0),
            total_s=time.monotonic() - t0,
            errors=[rnd.errors[i] for i in sorted(rnd.removed | rnd.late) if i in rnd.errors],
            probe_diff_max=diff,
            verify_s=t.get("verify", 0.0),
        )

    async def _verify(self, rnd: Round, ok: list[int], weights: Any, version: int, probe: Probe) -> tuple[list[int], float]:
        """Step 6: the servers in ``ok`` that pass the probe (a failing one reloaded
        once) by the deadline (at least :data:`RESUME_S`), and the largest difference."""

        async def reload(server: PoolServer) -> None:
            await self._pause_one(server)
            try:
                await self.transport.load_one(server, weights)
                await server.admin.reset_prefix_cache()
            finally:
                with anyio.CancelScope(shield=True):
                    await server.admin.resume()

        diff = await rnd.verify([self.pool.servers[i] for i in ok], probe, reload, by=max(rnd.deadline, anyio.current_time() + RESUME_S))
        for index in ok:
            if index in rnd.removed:
                self.pool.set_up(index, False)
                if index not in rnd.late:
                    self._failed_probe.add(index)
        passed = [i for i in ok if i not in rnd.removed]
        self._probe = probe
        if len(passed) < len(ok) and passed and self.on_version is not None:
            await self.on_version(version, passed)  # the other pools drop the failed ones too
        return passed, diff

    async def _pause(self, rnd: Round, server: PoolServer) -> None:
        rnd.paused.append(server)  # resumed even if the pause itself failed half-way
        await rnd.step("pause", server, self._pause_one)

    async def _pause_one(self, server: PoolServer) -> None:
        if self.pause_mode == "wait" and not server.admin.native_wait:
            await self.pool.drained(server.index)
        await server.admin.pause(self.pause_mode)

    async def _settle(
        self, rnd: Round, weights: Any, version: int, failures: dict[int, BaseException] | None, server: PoolServer
    ) -> None:
        """The rest of one server's sync, apart from the others': its load (from
        disk; or again, after a failed broadcast), flush and version."""
        if failures is None or server.index in failures:
            failed = None if failures is None else failures[server.index]
            if not await rnd.step("load", server, lambda s: self.transport.load_one(s, weights), failed=failed):
                return
        self._partial.discard(server.index)
        if await rnd.step("flush", server, lambda s: s.admin.reset_prefix_cache()):
            await rnd.step("version", server, lambda s: s.admin.set_weight_version(str(version)))

    async def _resume(self, rnd: Round, deadline: float) -> None:
        """Resume every paused server by ``deadline`` but the late ones (likely hung:
        not waited for); one that cannot be resumed is out of rotation, resumed and
        loaded when it answers again (:meth:`on_server_back`), or at :meth:`release`."""

        async def one(server: PoolServer) -> None:
            if await self._try_resume(server, deadline):
                return
            if anyio.current_time() >= deadline:
                rnd.late.add(server.index)
            self._unresumed.add(server.index)
            self.pool.set_up(server.index, False)  # unreachable now; resumed and loaded when it returns

        async with anyio.create_task_group() as tg:
            for server in rnd.paused:
                if server.index not in rnd.late:
                    tg.start_soon(one, server)

    async def release(self) -> list[int]:
        """Resume the servers syncs left paused (late or unanswering ones, not back
        yet), each within :data:`RESUME_S`, shielded: at the end of a run, so that a
        server the run does not own is not left paused.  Returns those still
        paused, after a warning naming them."""
        left: list[int] = []

        async def one(server: PoolServer) -> None:
            if not await self._try_resume(server, anyio.current_time() + RESUME_S):
                left.append(server.index)

        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for index in sorted(self._unresumed):
                    tg.start_soon(one, self.pool.servers[index])
        if left:
            log.warning("weight sync: servers %s could not be resumed at the end of the run; they stay paused "
                        "(vLLM: POST /resume; SGLang: POST /continue_generation)", sorted(left))
        return sorted(left)

    async def _try_resume(self, server: PoolServer, deadline: float) -> bool:
        """Resume ``server`` by ``deadline``, a failing call tried again; whether it is."""
        with anyio.CancelScope(deadline=deadline):
            for attempt in range(1 + self.retries):
                try:
                    await server.admin.resume()
                    self._unresumed.discard(server.index)
                    return True
                except BackendError:
                    await anyio.sleep(RETRY_DELAY_S * (attempt + 1))
        return False

    async def on_server_back(self, server: PoolServer) -> None:
        """Before a server re-enters rotation: make sure it serves the current
        version, loading the current weights from disk if it does not (and resume
        it first if a sync could not).

        A server a failed load may have left with part of its weights is loaded
        whatever version it reports; before any sync has completed there is no
        directory to load it from, so it stays out until one has.

        Raises:
            WeightSyncError: it is on another version, or may hold partial weights,
                and no directory holds the current weights; it failed the probe (now,
                or at the sync and has not restarted since); or the load outlasted
                ``timeout_s`` (it stays out of rotation).
            BackendError: the server failed while being loaded.
        """
        with anyio.move_on_after(self.timeout_s) as scope:
            await self._bring_up_to_date(server)
        if scope.cancelled_caught:
            raise WeightSyncError(f"server {server.index}: not loaded within {self.timeout_s:g} s; it stays out of rotation")

    async def _bring_up_to_date(self, server: PoolServer) -> None:
        if server.index in self._unresumed:  # a sync may have left it paused
            await server.admin.resume()
            self._unresumed.discard(server.index)
        partial = server.index in self._partial
        if self._version is None and not partial:
            return
        if not partial and await server.admin.weight_version() == str(self._version):
            if server.index in self._failed_probe:
                raise WeightSyncError(f"server {server.index} failed the probe of version {self._version}; out until it restarts")
            return
        directory = None if self._version is None else await weights_directory(self._source)
        if directory is None:
            state = "may hold partial weights" if partial else f"is not on version {self._version}"
            raise WeightSyncError(f"server {server.index} {state} and no weights dir is known")
        await self.transport.load_one(server, directory)
        await server.admin.reset_prefix_cache()
        await server.admin.set_weight_version(str(self._version))
        self._partial.discard(server.index)
        if self._probe is not None:
            verdict = await verify_servers([server], self._probe, reload=None)
            if verdict.failed:
                self._failed_probe.add(server.index)
                raise WeightSyncError(verdict.failed[server.index])
        self._failed_probe.discard(server.index)
        server.client.weight_version = self._version
