"""Weight sync: one call moves every server of a pool to new weights and a new version.

``await sync.sync(weights, version)`` runs, with the pool admitting no new turn:

1. pause   every server in rotation (``wait``: in-flight requests finish first;
           ``abort``: they end at once and their clients resume them after step 5);
2. load    the new weights (disk: each server reads a safetensors directory;
           broadcast: the learner's rank 0 sends each tensor to all servers at once,
           from a name -> tensor mapping or read back from such a directory);
3. flush   prefix caches (cached KV of the old weights is wrong for the new ones);
4. version set the version on the server and on the pool's clients (stamped on
           every token generated from now on);
5. resume  every paused server, always (shielded), whatever failed before.

Guarantees:
- No server is left paused: step 5 runs on every way out, cancellation included.
- No server serves a mixed version: a server whose load, flush or version step
  still fails after ``retries`` is taken out of the pool's rotation before resume;
  it is loaded with the current weights when it comes back (the pool calls
  :meth:`WeightSync.on_server_back` before reusing a server that was down, e.g.
  after the fleet restarted it), and only then re-enters rotation.
- ``sync`` raises :class:`WeightSyncError` only if *no* server took the new
  weights; otherwise it returns a :class:`SyncReport` naming the servers it
  retried and those it took out.

Not covered: servers that are down when ``sync`` starts are skipped (they are
loaded when they come back); the broadcast transport cannot retry a single
server (the transfer is a collective) and reloads it from disk instead: from the
directory it was given, or ``fallback_dir``.  Once a member has left the
broadcast group (out of rotation at a sync, a failed receive, a restart), every
later sync loads all servers from disk: the group is not re-formed.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal, Protocol, final

import anyio
import msgspec

from ._errors import BackendError, WeightSyncError
from ._pool import PoolServer, ServerPool

__all__ = ["BroadcastTransport", "DiskTransport", "SyncReport", "WeightSync"]

PauseMode = Literal["wait", "abort"]

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


class Transport(Protocol):
    name: str

    async def load(self, servers: Sequence[PoolServer], weights: Any, version: int) -> dict[int, BaseException]:
        """Load ``weights`` into ``servers``; return the failures by server index."""
        ...

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        """Retry one server (raise if this transport cannot)."""
        ...


@final
class DiskTransport:
    """Every server reads the same safetensors directory (any engine; the path must
    be visible to every server, e.g. a shared filesystem)."""

    name: Final = "disk"

    async def load(self, servers: Sequence[PoolServer], weights: Any, version: int) -> dict[int, BaseException]:
        failures: dict[int, BaseException] = {}

        async def one(server: PoolServer) -> None:
            try:
                await self.load_one(server, weights)
            except BackendError as exc:
                failures[server.index] = exc

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)
        return failures

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        await server.admin.load_weights_from_disk(str(Path(weights).resolve()))


class _Sender(Protocol):
    def open(self, master_address: str, master_port: int, world_size: int) -> None: ...
    def broadcast(self, tensor: Any) -> None: ...
    def close(self) -> None: ...


class GlooSender:
    """Rank 0 of a gloo group made from a TCPStore (torch, CPU).  The receivers
    join with the same store address and ``ProcessGroupGloo``; tests use it.
    vLLM's GPU workers join through their own NCCL communicator: use
    :class:`VLLMNcclSender` against them."""

    def __init__(self, timeout_s: float = 300.0) -> None:
        self.timeout_s = timeout_s
        self._group: Any = None
        self._store: Any = None

    def open(self, master_address: str, master_port: int, world_size: int) -> None:
        import torch.distributed as dist

        timeout = timedelta(seconds=self.timeout_s)
        self._store = dist.TCPStore(master_address, master_port, world_size, is_master=True, timeout=timeout)
        self._group = dist.ProcessGroupGloo(self._store, 0, world_size, timeout)

    def broadcast(self, tensor: Any) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self._group.broadcast([tensor.contiguous()], opts).wait()

    def close(self) -> None:
        self._group = self._store = None


class VLLMNcclSender:
    """Rank 0 of vLLM's weight-transfer NCCL group, built the way vLLM's own
    trainer side builds it (``vllm.distributed.weight_transfer.nccl_common.trainer_init``:
    a ``StatelessProcessGroup`` rendezvous and a ``PyNcclCommunicator`` on the
    current CUDA device), unpacked, one broadcast per tensor as the servers'
    ``/update_weights`` receives them.  Needs CUDA and ``vllm`` importable in the
    learner's environment.  Not run in this repository's tests (no GPU there);
    the requests that go with it are checked against vLLM's parser."""

    def __init__(self) -> None:
        self._comm: Any = None

    def open(self, master_address: str, master_port: int, world_size: int) -> None:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        self._comm = trainer_init({"master_address": master_address, "master_port": master_port, "world_size": world_size})

    def broadcast(self, tensor: Any) -> None:
        import torch

        # NCCL sends numel elements from data_ptr(): a view must be made contiguous.
        tensor = tensor.to("cuda", non_blocking=True).contiguous()
        self._comm.broadcast(tensor, src=0, stream=torch.cuda.current_stream())

    def close(self) -> None:
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None


@final
class BroadcastTransport:
    """The learner's rank 0 broadcasts each tensor to every server at once.

    ``weights`` is a mapping of parameter name to tensor (on rank 0), or a
    safetensors directory (a Hugging Face export): its tensors are memory-mapped and
    sent as stored (names and dtypes included), so the servers end up with exactly
    the bytes a reload of that directory would give them, and a server the
    broadcast failed on is reloaded from it.  The group is
    formed on the first sync and kept: rank 0 is the sender, then each server's
    workers in pool order (a vLLM server joins with ``tensor x pipeline parallel``
    ranks from its ``rank_offset`` on).  A server that leaves the group (out of
    rotation at a sync, a failed receive, a restart) is not taken back: from then
    on every sync loads all servers from the directory, or ``fallback_dir``.

    Args:
        master_address, master_port: the rendezvous the servers connect to; the
            address must be reachable from every server.
        ranks_per_server: each server's worker count (one number for all, or one
            per server in pool order); a wrong count hangs the rendezvous.
        sender: the collective on rank 0 (default :class:`GlooSender`).
        fallback_dir: a directory where the learner also saved the weights; used to
            retry a single server through the disk path when ``weights`` is a
            mapping (optional).
    """

    def __init__(
        self,
        *,
        master_address: str = "127.0.0.1",
        master_port: int,
        ranks_per_server: int | Sequence[int] = 1,
        sender: _Sender | None = None,
        fallback_dir: str | None = None,
    ) -> None:
        self.master_address = master_address
        self.master_port = master_port
        self.ranks_per_server = ranks_per_server
        self.sender = sender or GlooSender()
        self.fallback_dir = fallback_dir
        self._members: tuple[int, ...] | None = None
        self._left: set[int] = set()  # members whose receiving side may be gone
        self.name = "broadcast"
        """What the last load used: ``broadcast``, or ``disk`` once a member left."""

    async def _open(self, servers: Sequence[PoolServer]) -> None:
        members = tuple(s.index for s in servers)
        per = self.ranks_per_server
        sizes = [per] * len(servers) if isinstance(per, int) else [per[s.index] for s in servers]
        offsets = list(itertools.accumulate(sizes, initial=1))
        world = offsets.pop()
        async with anyio.create_task_group() as tg:
            for server, offset in zip(servers, offsets):
                tg.start_soon(lambda s=server, r=offset: s.admin.init_weight_transfer(
                    master_address=self.master_address, master_port=self.master_port, rank_offset=r, world_size=world
                ))
            await anyio.to_thread.run_sync(self.sender.open, self.master_address, self.master_port, world)
        self._members = members

    async def load(self, servers: Sequence[PoolServer], weights: Any, version: int) -> dict[int, BaseException]:
        members = tuple(s.index for s in servers)
        if self._members is not None:
            self._left.update(set(self._members) - set(members))
        if self._left:
            # A member that was out of rotation, failed a receive or was restarted
            # may have lost its side of the group, and a broadcast to a rank that
            # never joins hangs: the group is not re-formed, every later sync
            # loads from disk.
            directory = self._directory(weights)
            if directory is None:
                raise WeightSyncError(f"servers {sorted(self._left)} left the broadcast group and there is no "
                                      "directory to load from: pass a directory or fallback_dir")
            self.name = "disk"
            return await DiskTransport().load(servers, directory, version)
        if self._members is None:
            await self._open(servers)
        tensors: Mapping[str, Any] = _read_safetensors(weights) if isinstance(weights, (str, Path)) else weights
        names = list(tensors)
        dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors.values()]
        shapes = [list(t.shape) for t in tensors.values()]
        failures: dict[int, BaseException] = {}

        async def receive(server: PoolServer) -> None:
            try:
                await server.admin.start_weight_update()
                await server.admin.receive_weights(names, dtypes, shapes)
                await server.admin.finish_weight_update(str(version))
            except BackendError as exc:
                failures[server.index] = exc

        def send() -> None:
            for t in tensors.values():
                self.sender.broadcast(t)

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(receive, server)
            await anyio.to_thread.run_sync(send)
        return failures

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        self._left.add(server.index)
        directory = self._directory(weights)
        if directory is None:
            raise WeightSyncError(f"server {server.index}: a broadcast cannot be retried for one server (no fallback_dir)")
        await server.admin.load_weights_from_disk(directory)

    def _directory(self, weights: Any) -> str | None:
        return str(Path(weights).resolve()) if isinstance(weights, (str, Path)) else self.fallback_dir


def _read_safetensors(directory: str | Path) -> dict[str, Any]:
    """The tensors of a safetensors directory by name.  Memory-mapped, not copied:
    each tensor's pages are read as it is sent (from the page cache when the learner
    has just written them), so rank 0 never holds a second copy of the model."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        tensors |= load_file(path)
    if not tensors:
        raise WeightSyncError(f"{directory}: no *.safetensors files to broadcast")
    return tensors


@final
class WeightSync:
    """Moves a pool's servers to new weights; see the module docstring.

    Args:
        pool: the servers (borrowed; the sync installs itself as the pool's
            ``on_server_back`` hook).
        transport: :class:`DiskTransport` or :class:`BroadcastTransport`.
        pause_mode: ``wait`` (in-flight requests finish on the old weights) or
            ``abort`` (they stop now and resume on the new weights; their tokens
            carry the older version).
        retries: extra tries of a failing server's step before taking it out.
        restart: optional ``restart(index)`` (e.g. the fleet's) called for a server
            taken out; it comes back through the pool's poller and is loaded then.
    """

    def __init__(
        self,
        pool: ServerPool,
        transport: DiskTransport | BroadcastTransport,
        *,
        pause_mode: PauseMode = "wait",
        retries: int = 2,
        restart: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.pool = pool
        self.transport = transport
        self.pause_mode = pause_mode
        self.retries = retries
        self.restart = restart
        self._version: int | None = None
        self._dir: str | None = None
        pool.on_server_back = self.on_server_back

    async def sync(self, weights: Any, version: int) -> SyncReport:
        """Load ``weights`` (a safetensors directory; for broadcast also a name ->
        tensor mapping) on every server in rotation and switch them to ``version``.
        A directory is remembered to load servers that come back later.

        Raises:
            WeightSyncError: no server is in rotation, or none took the weights.

        Cancellation: servers paused so far are resumed (shielded); a server that
        may hold partial weights is taken out of rotation.
        """
        t0 = time.monotonic()
        servers = [s for s in self.pool.servers if self.pool.is_up(s.index)]
        if not servers:
            raise WeightSyncError("no server in rotation to sync")
        if isinstance(weights, (str, Path)):
            self._dir = str(Path(weights).resolve())
        elif isinstance(self.transport, BroadcastTransport):
            self._dir = self.transport.fallback_dir
        retried: set[int] = set()
        removed: set[int] = set()
        paused: list[PoolServer] = []
        times = dict.fromkeys(("pause", "load", "flush", "version", "resume"), 0.0)
        async with self.pool.held():
            try:
                start = time.monotonic()
                await self._each(servers, self._pause, retried, removed, paused)
                times["pause"] = time.monotonic() - start
                start = time.monotonic()
                live = [s for s in servers if s.index not in removed]
                try:
                    failures = await self.transport.load(live, weights, version)
                except BaseException:
                    removed.update(s.index for s in live)  # may hold partial weights
                    raise
                for server in live:
                    if server.index in failures:
                        retried.add(server.index)
                        if not await self._retry(lambda s: self.transport.load_one(s, weights), server):
                            removed.add(server.index)
                times["load"] = time.monotonic() - start
                start = time.monotonic()
                await self._each([s for s in servers if s.index not in removed],
                                 lambda s: s.admin.reset_prefix_cache(), retried, removed)
                times["flush"] = time.monotonic() - start
                start = time.monotonic()
                await self._each([s for s in servers if s.index not in removed],
                                 lambda s: s.admin.set_weight_version(str(version)), retried, removed)
                ok = [s.index for s in servers if s.index not in removed]
                if ok:
                    self.pool.set_weight_version(version, ok)
                    self._version = version
                times["version"] = time.monotonic() - start
            finally:
                for index in removed:
                    self.pool.set_up(index, False)
                with anyio.CancelScope(shield=True):
                    start = time.monotonic()
                    await self._resume(paused)
                    times["resume"] = time.monotonic() - start
        if not ok:
            raise WeightSyncError(f"no server took weights version {version} (removed: {sorted(removed)})")
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
        )

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
        paused: list[PoolServer] | None = None,
    ) -> None:
        """Run ``step`` on every server concurrently, with retries; failures are removed."""

        async def one(server: PoolServer) -> None:
            if paused is not None:
                paused.append(server)  # resume even if the pause itself failed half-way
            try:
                await step(server)
            except BackendError:
                retried.add(server.index)
                if not await self._retry(step, server):
                    removed.add(server.index)

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)

    async def _retry(self, step: Callable[[PoolServer], Awaitable[None]], server: PoolServer) -> bool:
        for _ in range(self.retries):
            await anyio.sleep(_RETRY_DELAY_S)
            try:
                await step(server)
                return True
            except BackendError:
                continue
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
        version, loading the current weights from disk if it does not.

        Raises:
            WeightSyncError: it is on another version and no directory holds the
                current weights (it stays out of rotation).
            BackendError: the server failed while being loaded.
        """
        if self._version is None:
            return
        if await server.admin.weight_version() == str(self._version):
            return
        if self._dir is None:
            raise WeightSyncError(f"server {server.index} is not on version {self._version} and no weights dir is known")
        await self.transport.load_one(server, self._dir)
        await server.admin.reset_prefix_cache()
        await server.admin.set_weight_version(str(self._version))
        server.client.weight_version = self._version
