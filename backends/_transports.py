"""How new weights reach the servers: the transports a :class:`WeightSync` loads with.

- :class:`DiskTransport`: every server reads the same safetensors directory.
- :class:`BroadcastTransport`: the learner's rank 0 sends each tensor to every server
  at once over a collective (gloo for tests and CPU, vLLM's NCCL group on GPUs).

What a transport is given as ``weights``: a safetensors directory; for broadcast also
a name -> tensor mapping, or :class:`PendingWeights`, tensors in memory whose
directory is still being written (the broadcast sends them at once; a server that
must load from disk waits for the directory).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Protocol, final

import anyio

from ._errors import BackendError, WeightSyncError
from ._pool import PoolServer

__all__ = [
    "BroadcastTransport", "DiskTransport", "GlooSender", "PendingWeights", "Transport", "VLLMNcclSender",
    "weights_directory",
]

log = logging.getLogger("backends")


@final
class PendingWeights:
    """Weights in memory (name -> tensor) and the directory where the same weights are
    being written.  The writer calls :meth:`written` once it is done (with the error,
    if it failed); :meth:`directory` waits for that.

    Lets the broadcast transport send an export without waiting for it to reach the
    disk: only a server that must load from disk (a failed receive, a member that
    left the group, one that comes back later) waits for the directory.
    """

    def __init__(self, tensors: Mapping[str, Any], directory: str | Path) -> None:
        self.tensors = tensors
        self._directory = str(Path(directory).resolve())
        self._done = anyio.Event()
        self._error: BaseException | None = None

    def written(self, error: BaseException | None = None) -> None:
        """The directory is complete (``error`` is None) or will never be (the writer's error)."""
        self._error = error
        self._done.set()

    async def directory(self) -> str:
        """The directory, once written.

        Raises:
            WeightSyncError: the write failed (chained to its error).
        """
        await self._done.wait()
        if self._error is not None:
            raise WeightSyncError(f"{self._directory}: the export failed: {self._error}") from self._error
        return self._directory


async def weights_directory(weights: Any) -> str | None:
    """Where ``weights`` are on disk: a directory given as such, a
    :class:`PendingWeights`' once written, None for a plain tensor mapping."""
    if isinstance(weights, PendingWeights):
        return await weights.directory()
    if isinstance(weights, (str, Path)):
        return str(Path(weights).resolve())
    return None


class Transport(Protocol):
    name: str

    def collective(self, servers: Sequence[PoolServer], weights: Any) -> bool:
        """Whether this sync's load is one collective over ``servers`` (:meth:`load`);
        False: each server loads on its own (:meth:`load_one`)."""
        ...

    async def load(
        self, servers: Sequence[PoolServer], weights: Any, version: int, deadline: float = math.inf
    ) -> dict[int, BaseException]:
        """Load ``weights`` into ``servers`` by ``deadline`` (the event loop's clock);
        return the failures by server index (a server out of time is one)."""
        ...

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        """Load one server on its own (raise if this transport cannot)."""
        ...


@final
class DiskTransport:
    """Every server reads the same safetensors directory (any engine; the path must
    be visible to every server, e.g. a shared filesystem)."""

    name: Final = "disk"

    def collective(self, servers: Sequence[PoolServer], weights: Any) -> bool:
        return False

    async def load(
        self, servers: Sequence[PoolServer], weights: Any, version: int, deadline: float = math.inf
    ) -> dict[int, BaseException]:
        failures: dict[int, BaseException] = {}

        async def one(server: PoolServer) -> None:
            with anyio.CancelScope(deadline=deadline) as scope:
                try:
                    await self.load_one(server, weights)
                except BackendError as exc:
                    failures[server.index] = exc
            if scope.cancelled_caught:
                failures[server.index] = _late(server)

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)
        return failures

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        directory = await weights_directory(weights)
        if directory is None:
            raise WeightSyncError("the disk transport loads a directory, not tensors: export them first")
        await server.admin.load_weights_from_disk(directory)


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

    ``weights`` is a mapping of parameter name to tensor (on rank 0), a safetensors
    directory (a Hugging Face export: its tensors are memory-mapped and sent as
    stored, names and dtypes included, so the servers end up with exactly the bytes a
    reload of that directory would give them, and a server the broadcast failed on
    is reloaded from it), or :class:`PendingWeights` (its tensors are sent at once; a
    server that must be reloaded waits for its directory).  The group is
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
            await anyio.to_thread.run_sync(
                self.sender.open, self.master_address, self.master_port, world, abandon_on_cancel=True
            )
        self._members = members

    async def load(
        self, servers: Sequence[PoolServer], weights: Any, version: int, deadline: float = math.inf
    ) -> dict[int, BaseException]:
        """Broadcast ``weights`` to ``servers`` (forming the group on the first call)
        within half the time left before ``deadline``.  The send runs in a worker
        thread that this bound abandons (a collective cannot be interrupted; gloo's
        own timeout ends it later): a
        receiver that dies or stops mid-transfer costs at most that.  Then the
        group is taken for broken (every member has left: later syncs load from
        disk), and the servers that did not receive it all are failures, which
        the sync loads from disk in the other half (one that cannot be, e.g. the
        stopped one, stays out and is loaded when it answers again)."""
        members = tuple(s.index for s in servers)
        now = anyio.current_time()
        half = now + (deadline - now) / 2  # the rest for the disk loads of its failures
        if self._members is None:
            with anyio.CancelScope(deadline=half) as scope:
                await self._open(servers)
            if scope.cancelled_caught:  # the rendezvous hung: a member never joined
                self._left.update(members)
                return {s.index: _late(s) for s in servers}
        tensors: Mapping[str, Any] = (
            weights.tensors if isinstance(weights, PendingWeights)
            else _read_safetensors(weights) if isinstance(weights, (str, Path))
            else weights
        )  # fmt: skip
        names = list(tensors)
        dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors.values()]
        shapes = [list(t.shape) for t in tensors.values()]
        failures: dict[int, BaseException] = {}
        received: set[int] = set()

        async def receive(server: PoolServer) -> None:
            try:
                await server.admin.start_weight_update()
                await server.admin.receive_weights(names, dtypes, shapes)
                await server.admin.finish_weight_update(str(version))
                received.add(server.index)
            except BackendError as exc:
                failures[server.index] = exc

        def send() -> None:
            for t in tensors.values():
                self.sender.broadcast(t)

        sent = False
        with anyio.CancelScope(deadline=half):
            async with anyio.create_task_group() as tg:
                for server in servers:
                    tg.start_soon(receive, server)
                try:
                    await anyio.to_thread.run_sync(send, abandon_on_cancel=True)
                    sent = True
                except Exception as exc:  # noqa: BLE001 - the collective failed: a receiver is gone
                    log.warning("weight broadcast failed: %s: %s", type(exc).__name__, exc)
                    tg.cancel_scope.cancel()  # the receivers wait for tensors that will not come
        if not sent:  # failed, or abandoned mid-collective: the group is broken, no one has it all
            self._left.update(members)
            received.clear()
        for server in servers:
            if server.index not in received and server.index not in failures:
                failures[server.index] = _late(server)
        return failures

    def collective(self, servers: Sequence[PoolServer], weights: Any) -> bool:
        """True while every member of the group is among ``servers``.  Once one
        has left (out of rotation at a sync, a failed receive, a restart), its
        side of the group may be gone, and a broadcast to a rank that never joins
        hangs: the group is not re-formed, every later sync loads from disk
        (``name`` becomes ``disk``).

        Raises:
            WeightSyncError: a member left and ``weights`` names no directory to
                load from, nor is there a ``fallback_dir``.
        """
        if self._members is not None:
            self._left.update(set(self._members) - {s.index for s in servers})
        if not self._left:
            return True
        if not isinstance(weights, (str, Path, PendingWeights)) and self.fallback_dir is None:
            raise WeightSyncError(f"servers {sorted(self._left)} left the broadcast group and there is no "
                                  "directory to load from: pass a directory or fallback_dir")
        self.name = "disk"
        return False

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        self._left.add(server.index)
        directory = await self._directory(weights)
        if directory is None:
            raise WeightSyncError(f"server {server.index}: a broadcast cannot be retried for one server (no fallback_dir)")
        await server.admin.load_weights_from_disk(directory)

    async def _directory(self, weights: Any) -> str | None:
        if isinstance(weights, (str, Path, PendingWeights)):
            return await weights_directory(weights)
        return self.fallback_dir


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


def _late(server: PoolServer) -> WeightSyncError:
    return WeightSyncError(f"server {server.index}: not loaded by the sync's deadline")
