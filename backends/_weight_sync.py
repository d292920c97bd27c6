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
6. verify  (with a :class:`~backends.Probe`, ``_probe``) every server scores it before
           the pool admits a turn (a paused vLLM schedules nothing, so after step 5;
           with ``abort``/``keep`` the interrupted turns go on beside the probe).

Guarantees:
- No server is left paused: step 5 runs on every way out, cancellation included.
- No server serves a mixed version: a server whose load, flush or version step
  still fails after ``retries`` is taken out of the pool's rotation before resume;
  it is loaded with the current weights when it comes back (the pool calls
  :meth:`WeightSync.on_server_back` before reusing a server that was down, e.g.
  after the fleet restarted it), and only then re-enters rotation.
- ``sync`` raises :class:`WeightSyncError` only if *no* server took the new
  weights (its message names every server's failure); otherwise it returns a
  :class:`SyncReport` naming the servers it retried and those it took out, and why.
- A server that failed the probe stays out until it restarts; one that comes back
  is loaded and verified before it re-enters.

Other pools over the same servers (rollout shards in other processes) follow the
sync: ``hold`` keeps them from admitting new turns during it, ``on_version`` tells
them the new version before the servers resume, and :func:`follow_versions` keeps a
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
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final, final

import anyio
import msgspec

from ._errors import BackendError, WeightSyncError
from ._pool import PoolServer, ServerPool
from ._probe import Probe, verify_servers
from ._protocols import PauseMode
from ._transports import BroadcastTransport, DiskTransport, PendingWeights, weights_directory

__all__ = ["SyncReport", "WeightSync", "follow_versions"]

_RETRY_DELAY_S: Final = 0.5
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
    errors: list[str] = []
    """Why each server in ``removed`` was taken out (loud: it names the server)."""
    probe_diff_max: float = math.nan
    """The largest ``|server - learner|`` log-prob on the probe over the servers that
    took the weights (NaN without a probe)."""
    verify_s: float = 0.0


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
    ) -> None:
        self.pool = pool
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
                passed the probe); the message names each server's failure.

        Cancellation: servers paused so far are resumed (shielded); a server that
        may hold partial weights is taken out of rotation.
        """
        t0 = time.monotonic()
        servers = [s for s in self.pool.servers if self.pool.is_up(s.index)]
        if not servers:
            raise WeightSyncError("no server in rotation to sync")
        if isinstance(weights, (str, Path, PendingWeights)):
            self._source = weights
        elif isinstance(self.transport, BroadcastTransport):
            self._source = self.transport.fallback_dir
        retried: set[int] = set()
        removed: set[int] = set()
        errors: dict[int, str] = {}
        paused: list[PoolServer] = []
        times = dict.fromkeys(("pause", "load", "flush", "version", "resume", "verify"), 0.0)
        diff = math.nan
        async with self.pool.held(), self.hold() if self.hold is not None else contextlib.nullcontext():
            try:
                start = time.monotonic()
                await self._each(servers, self._pause, retried, removed, errors, paused)
                times["pause"] = time.monotonic() - start
                start = time.monotonic()
                live = [s for s in servers if s.index not in removed]
                try:
                    failures = await self.transport.load(live, weights, version)
                except BaseException:
                    removed.update(s.index for s in live)
                    self._partial.update(s.index for s in live)
                    raise
                for server in live:
                    if server.index in failures:
                        retried.add(server.index)
                        errors[server.index] = f"server {server.index} ({server.url}): {failures[server.index]}"
                        if not await self._retry(lambda s: self.transport.load_one(s, weights), server, errors):
                            removed.add(server.index)
                            self._partial.add(server.index)
                times["load"] = time.monotonic() - start
                start = time.monotonic()
                await self._each([s for s in servers if s.index not in removed],
                                 lambda s: s.admin.reset_prefix_cache(), retried, removed, errors)
                times["flush"] = time.monotonic() - start
                start = time.monotonic()
                await self._each([s for s in servers if s.index not in removed],
                                 lambda s: s.admin.set_weight_version(str(version)), retried, removed, errors)
                ok = [s.index for s in servers if s.index not in removed]
                if ok:
                    self.pool.set_weight_version(version, ok)
                    self._version = version
                    if self.on_version is not None:
                        await self.on_version(version, ok)
                times["version"] = time.monotonic() - start
            finally:
                for index in removed:
                    self.pool.set_up(index, False)
                with anyio.CancelScope(shield=True):
                    start = time.monotonic()
                    await self._resume(paused)
                    times["resume"] = time.monotonic() - start
            if ok and probe is not None:  # still held: no turn is admitted before this passes
                start = time.monotonic()
                ok, diff = await self._verify(ok, weights, version, probe, retried, removed, errors)
                times["verify"] = time.monotonic() - start
        if not ok:
            why = "; ".join(errors[i] for i in sorted(errors)) or f"removed: {sorted(removed)}"
            raise WeightSyncError(f"no server took weights version {version}: {why}")
        if self.restart is not None:
            for index in sorted(removed):
                await self.restart(index)
        return SyncReport(
            version=version,
            transport=self.transport.name,
            servers=ok,
            retried=sorted(retried),
            removed=sorted(removed),
            pause_s=times["pause"],
            load_s=times["load"],
            flush_s=times["flush"],
            version_s=times["version"],
            resume_s=times["resume"],
            total_s=time.monotonic() - t0,
            errors=[errors[i] for i in sorted(removed) if i in errors],
            probe_diff_max=diff,
            verify_s=times["verify"],
        )

    async def _verify(
        self, ok: list[int], weights: Any, version: int, probe: Probe,
        retried: set[int], removed: set[int], errors: dict[int, str],
    ) -> tuple[list[int], float]:  # fmt: skip
        """Step 6: the servers in ``ok`` that pass the probe (each failing one reloaded
        once first), and the largest difference."""

        async def reload(server: PoolServer) -> None:
            await self._pause(server)
            try:
                await self.transport.load_one(server, weights)
                await server.admin.reset_prefix_cache()
            finally:
                with anyio.CancelScope(shield=True):
                    await server.admin.resume()

        verdict = await verify_servers([self.pool.servers[i] for i in ok], probe, reload=reload)
        retried.update(verdict.retried)
        for index, why in verdict.failed.items():
            removed.add(index)
            errors[index] = why
            self._failed_probe.add(index)
            self.pool.set_up(index, False)
        passed = [i for i in ok if i not in verdict.failed]
        self._probe = probe
        if verdict.failed and passed and self.on_version is not None:
            await self.on_version(version, passed)  # the other pools drop the failed ones too
        return passed, verdict.diff_max

    async def _pause(self, server: PoolServer) -> None:
        if self.pause_mode == "wait" and not server.admin.native_wait:
            await self.pool.drained(server.index)
        await server.admin.pause(self.pause_mode)

    async def _each(
        self,
        servers: Sequence[PoolServer],
        step: Callable[[PoolServer], Awaitable[None]],
        retried: set[int],
        removed: set[int],
        errors: dict[int, str],
        paused: list[PoolServer] | None = None,
    ) -> None:
        """Run ``step`` on every server concurrently, with retries; failures are removed
        (their last error kept in ``errors``)."""

        async def one(server: PoolServer) -> None:
            if paused is not None:
                paused.append(server)  # resume even if the pause itself failed half-way
            try:
                await step(server)
            except BackendError as exc:
                retried.add(server.index)
                errors[server.index] = f"server {server.index} ({server.url}): {exc}"
                if not await self._retry(step, server, errors):
                    removed.add(server.index)

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)

    async def _retry(
        self, step: Callable[[PoolServer], Awaitable[None]], server: PoolServer, errors: dict[int, str]
    ) -> bool:
        for _ in range(self.retries):
            await anyio.sleep(_RETRY_DELAY_S)
            try:
                await step(server)
                errors.pop(server.index, None)
                return True
            except BackendError as exc:
                errors[server.index] = f"server {server.index} ({server.url}): {exc}"
        return False

    async def _resume(self, paused: Sequence[PoolServer]) -> None:
        async def one(server: PoolServer) -> None:
            for attempt in range(1 + self.retries):
                try:
                    await server.admin.resume()
                    return
                except BackendError:
                    await anyio.sleep(_RETRY_DELAY_S * (attempt + 1))
            self.pool.set_up(server.index, False)  # unreachable now; loaded when it returns

        async with anyio.create_task_group() as tg:
            for server in paused:
                tg.start_soon(one, server)

    async def on_server_back(self, server: PoolServer) -> None:
        """Before a server re-enters rotation: make sure it serves the current
        version, loading the current weights from disk if it does not, and passes the
        current probe.

        A server a failed load may have left with part of its weights is loaded
        whatever version it reports; before any sync has completed there is no
        directory to load it from, so it stays out until one has.

        Raises:
            WeightSyncError: it is on another version, or may hold partial weights,
                and no directory holds the current weights, or it failed the probe (now,
                or at the sync and has not restarted since): it stays out of rotation.
            BackendError: the server failed while being loaded.
        """
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


def follow_versions(pool: ServerPool) -> None:
    """Make ``pool`` follow a :class:`WeightSync` of another pool over the same
    servers (a rollout shard's pool, moved by the trainer's sync): a server that was
    down re-enters ``pool``'s rotation only once it reports the version ``pool`` was
    told (:meth:`ServerPool.set_weight_version`), i.e. once the sync's own pool has
    loaded it; until then each poll leaves it out.  Before the first version
    (``weight_version == 0``: the servers hold their initial weights) any server is
    taken back, as :meth:`WeightSync.on_server_back` does before its first sync.
    Installs itself as ``pool.on_server_back``.
    """

    async def check(server: PoolServer) -> None:
        expected = pool.weight_version
        if expected and await server.admin.weight_version() != str(expected):
            raise WeightSyncError(f"server {server.index} is not on version {expected} yet")

    pool.on_server_back = check
