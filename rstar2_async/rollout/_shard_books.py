"""The parent's books on a sharded rollout (what :class:`ShardedEngine` drives).

Which worker holds which problem of which open stream, which of its trajectories
came back, and what a worker must be told when it starts again.  Synchronous: it
owns no task and no process; messages to a worker are queued on its process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from backends import PoolStatistics

from ..errors import ShardError
from ..types import Group, Problem, Trajectory
from ._engine import RolloutStatistics
from ._shard_process import ShardProcess
from ._shard_wire import (
    Assign,
    Barrier,
    Cancel,
    Close,
    FromWorker,
    GroupDone,
    Held,
    Hold,
    Open,
    Passed,
    Report,
    Reported,
    SetVersion,
    ShardSpec,
    TakeOut,
    ToWorker,
    TrajectoryDone,
)

__all__ = ["ShardBooks"]

_GAUGES: Final = frozenset({"in_flight", "waiting_for_admission", "elapsed_s"})
"""RolloutStatistics fields that are not counters (a dead worker's do not carry over)."""


class Pending:
    """A problem in a worker: its samples, those back filled in.  On the wire it is
    named by ``key`` (its place in the stream), not by its id: a stream may hold one
    problem twice at once (streaming training near an epoch's end)."""

    __slots__ = ("key", "problem", "remaining", "shard", "slots")

    def __init__(self, key: str, problem: Problem, shard: int, slots: list[Trajectory | None]) -> None:
        self.key, self.problem, self.shard, self.slots = key, problem, shard, slots
        self.remaining = slots.count(None)

    def assign(self, stream: int) -> Assign:
        """What the worker is told: the problem and its finished samples under ``key``."""
        done = [msgspec.structs.replace(t, problem_id=self.key) for t in self.slots if t is not None]
        return Assign(stream=stream, problem=msgspec.structs.replace(self.problem, id=self.key), finished=done)


class Stream:
    """One open ``stream`` call: its problems in flight, by wire key."""

    def __init__(
        self,
        open_: Open,
        finished: Mapping[tuple[str, int], Trajectory],
        on_trajectory: Callable[[Trajectory], None] | None,
        send: MemoryObjectSendStream[Group],
    ) -> None:
        self.open, self.finished, self.on_trajectory, self.send = open_, finished, on_trajectory, send
        self.pending: dict[str, Pending] = {}
        self.placed = 0  # problems placed so far: the next one's key
        self.fed = False  # every problem placed
        self.scope = anyio.CancelScope()  # the caller's block: cancelled when the stream fails
        self.error: BaseException | None = None


class Shard:
    """The parent's view of one worker, across its restarts."""

    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec
        self.process: ShardProcess | None = None  # None while (re)starting
        self.capacity = 0  # its engine's max_in_flight
        self.outstanding = 0  # trajectories assigned and not back
        self.acked: set[int] = set()
        self.report: Report | None = None
        self.failures = 0  # deaths since a trajectory last came back
        self.restarts = 0

    def send(self, message: ToWorker) -> None:
        if self.process is not None:
            self.process.send(message)


def _interrupted(report: Report) -> int:
    return 0 if report.pool is None else report.pool.interrupted


def _send(stream: Stream, group: Group) -> None:
    # The caller may have left its block already (its stream is dropped right after).
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        stream.send.send_nowait(group)


class ShardBooks:
    """See the module docstring.  ``changed`` is set (and replaced) on every change
    that may give a waiter room or an acknowledgement."""

    def __init__(self, specs: Sequence[ShardSpec]) -> None:
        self.shards = [Shard(spec) for spec in specs]
        self.streams: dict[int, Stream] = {}
        self.holds: set[int] = set()
        self.barriers: set[int] = set()
        self.broken: ShardError | None = None
        self.changed = anyio.Event()
        self._version: int | None = None  # the last version set on every server
        self._server_versions: dict[int, int] = {}  # set on some since
        self._taken_out: set[int] = set()  # out since a sync could not load them
        self._retired: dict[str, int] = {}  # dead workers' last counters
        self._retired_interrupted = 0

    def broadcast(self, message: ToWorker) -> None:
        for shard in self.shards:
            shard.send(message)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    # -- problems ----------------------------------------------------------------------

    def roomiest(self) -> Shard | None:
        """The worker with the fewest trajectories outstanding, if it has room."""
        shard = min(self.shards, key=lambda s: s.outstanding)
        return shard if shard.outstanding < shard.capacity else None

    def place(self, stream: Stream, problem: Problem, shard: Shard) -> None:
        """Give ``problem`` to ``shard`` (or yield it at once if ``finished`` has it all)."""
        slots = [stream.finished.get((problem.id, i)) for i in range(stream.open.n)]
        if None not in slots:
            _send(stream, Group(problem=problem, trajectories=slots))  # type: ignore[arg-type]
            return
        key = str(stream.placed)
        stream.placed += 1
        pending = stream.pending[key] = Pending(key, problem, shard.spec.shard, slots)
        shard.outstanding += pending.remaining
        shard.send(pending.assign(stream.open.stream))

    def fed(self, stream: Stream) -> None:
        """Every problem of ``stream`` is placed."""
        stream.fed = True
        self.broadcast(Close(stream=stream.open.stream))
        self._end_if_done(stream)

    def drop(self, stream: Stream) -> None:
        """The stream's block is left: forget it, and cancel it in the workers."""
        del self.streams[stream.open.stream]
        for pending in stream.pending.values():
            self.shards[pending.shard].outstanding -= pending.remaining
        stream.pending.clear()
        self.broadcast(Cancel(stream=stream.open.stream))
        self.notify()

    def fail(self, stream: Stream, error: BaseException) -> None:
        if stream.error is None:
            stream.error = error
        stream.scope.cancel()

    def _end_if_done(self, stream: Stream) -> None:
        if stream.fed and not stream.pending:
            stream.send.close()

    def on_message(self, shard: Shard, message: FromWorker) -> None:
        match message:
            case TrajectoryDone(stream=sid, trajectory=t):
                stream = self.streams.get(sid)
                pending = None if stream is None else stream.pending.get(t.problem_id)
                if stream is None or pending is None or pending.shard != shard.spec.shard or pending.slots[t.sample_index]:
                    return  # a stream left, or a late answer: nothing waits for it
                pending.slots[t.sample_index] = t = msgspec.structs.replace(t, problem_id=pending.problem.id)
                pending.remaining -= 1
                shard.outstanding -= 1
                shard.failures = 0
                self.notify()
                if stream.on_trajectory is not None:
                    try:
                        stream.on_trajectory(t)
                    except Exception as exc:  # the caller's: it fails the caller's stream
                        self.fail(stream, exc)
            case GroupDone(stream=sid, key=key, report=report):
                shard.report = report
                stream = self.streams.get(sid)
                pending = None if stream is None else stream.pending.get(key)
                if stream is None or pending is None or pending.remaining:
                    return
                del stream.pending[key]
                _send(stream, Group(problem=pending.problem, trajectories=pending.slots))  # type: ignore[arg-type]
                self._end_if_done(stream)
            case Reported(report=report):
                shard.report = report
            case Held(token=token):
                if token in self.holds:
                    shard.acked.add(token)
                    self.notify()
            case Passed(token=token, report=report):
                shard.report = report
                if token in self.barriers:
                    shard.acked.add(token)
                    self.notify()

    # -- weights -----------------------------------------------------------------------

    def set_weight_version(self, version: int, servers: Sequence[int] | None) -> None:
        if servers is None:
            self._version, self._server_versions = version, {}
            self._taken_out.clear()
        else:
            self._server_versions.update(dict.fromkeys(servers, version))
            self._taken_out.difference_update(servers)
        self.broadcast(SetVersion(version=version, servers=None if servers is None else list(servers)))

    def take_out(self, servers: Sequence[int]) -> None:
        if servers:
            self._taken_out.update(servers)
            self.broadcast(TakeOut(servers=list(servers)))

    # -- the workers' lives ------------------------------------------------------------

    def attach(self, shard: Shard, process: ShardProcess, capacity: int) -> None:
        """A worker is ready: tell it what it must know, in order, before anything new
        (holds, weight versions, open streams and its problems in them), then the
        barriers still waited for (it has heard all the rest when it passes them)."""
        shard.process, shard.capacity, shard.acked = process, capacity, set()
        for token in sorted(self.holds):
            shard.send(Hold(token=token))
        if self._version is not None:
            shard.send(SetVersion(version=self._version, servers=None))
        for version in sorted(set(self._server_versions.values())):
            servers = [s for s, v in self._server_versions.items() if v == version]
            shard.send(SetVersion(version=version, servers=servers))
        if self._taken_out:
            shard.send(TakeOut(servers=sorted(self._taken_out)))
        for stream in self.streams.values():
            shard.send(stream.open)
            for pending in stream.pending.values():
                if pending.shard == shard.spec.shard:
                    shard.send(pending.assign(stream.open.stream))
            if stream.fed:
                shard.send(Close(stream=stream.open.stream))
        for token in sorted(self.barriers):
            shard.send(Barrier(token=token))
        self.notify()

    def detach(self, shard: Shard) -> None:
        """A worker is gone: keep its counters, forget its gauges and acks."""
        shard.process = None
        shard.acked = set()
        if shard.report is not None:
            for name, value in msgspec.structs.asdict(shard.report.rollout).items():
                if name not in _GAUGES:
                    self._retired[name] = self._retired.get(name, 0) + value
            self._retired_interrupted += _interrupted(shard.report)
            shard.report = None

    def break_(self, error: ShardError) -> None:
        """A worker is beyond restarting: every open stream and hold fails with ``error``."""
        self.broken = error
        for stream in self.streams.values():
            self.fail(stream, error)
        self.notify()

    # -- counters ----------------------------------------------------------------------

    def statistics(self, since: float) -> RolloutStatistics:
        total = dict(self._retired)
        for shard in self.shards:
            if shard.report is not None:
                for name, value in msgspec.structs.asdict(shard.report.rollout).items():
                    total[name] = total.get(name, 0) + value
        counts = {f: int(total.get(f, 0)) for f in RolloutStatistics.__struct_fields__ if f != "elapsed_s"}
        return RolloutStatistics(**counts, elapsed_s=time.monotonic() - since)

    def pool_statistics(self) -> list[PoolStatistics]:
        return [s.report.pool for s in self.shards if s.report is not None and s.report.pool is not None]

    def turns_interrupted(self) -> int:
        return self._retired_interrupted + sum(_interrupted(s.report) for s in self.shards if s.report is not None)
