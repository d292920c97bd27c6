"""What a sharded rollout's parent and its worker processes say to each other.

Each message is a frame: a 4-byte big-endian length, then msgpack.  Over the
worker's stdin travel, first a :class:`ShardSpec`, then :data:`ToWorker` messages;
over its stdout, first :class:`Ready` (the factory's stack is up), then
:data:`FromWorker` messages.  EOF on its stdin ends the worker.

A problem's trajectories travel one at a time as they finish (:class:`TrajectoryDone`),
so that the parent holds every finished one even if the worker dies before the
group is complete; :class:`GroupDone` then says the group is, without repeating it.
On the wire a problem is named by ``(stream, key)``: the parent gives each problem
it places a key unique in its stream (as the problem's and its trajectories' id in
the worker) and gives the trajectories back their problem's id, since a stream may
hold one problem twice at once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

import msgspec

from backends import PoolStatistics, ServerPool

from ..config import SamplingConfig
from ..types import Problem, Trajectory
from ._engine import RolloutEngine, RolloutStatistics

HEADER: Final = struct.Struct(">I")
"""Frame header: payload length in bytes."""


class ShardSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Parent -> worker, once at start: what the worker builds."""

    factory: str
    """``"module:function"``: called with this spec, returns an async context manager
    that yields a :class:`ShardStack` (loaded like tools and rewards)."""
    config: bytes
    """The factory's own configuration (e.g. msgspec JSON); opaque to the mechanism."""
    shard: int
    """This worker's index, ``0 <= shard < shards``."""
    shards: int
    """How many workers."""

    def share(self, count: int) -> range:
        """The indexes, of ``count`` servers in all, that this worker serves: every
        ``shards``-th from ``shard``.  A factory that builds a pool picks its servers
        with this, in this order: :meth:`ShardedEngine.set_weight_version` maps the
        fleet's indexes to the worker's pool by it."""
        return range(self.shard, count, self.shards)


@dataclass
class ShardStack:
    """What a factory yields inside the worker; everything in it is closed when its
    block ends (the factory's own block owns it)."""

    engine: RolloutEngine
    pool: ServerPool | None
    """The worker's servers (``None``: nothing to hold or version)."""


ShardFactory = Callable[[ShardSpec], AbstractAsyncContextManager[ShardStack]]


class Report(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A worker's counters now (worker -> parent, inside other messages)."""

    rollout: RolloutStatistics
    pool: PoolStatistics | None


# -- parent -> worker ----------------------------------------------------------------


class Open(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """A stream starts: the worker opens its engine's stream with these options."""

    stream: int
    n: int
    sampling: SamplingConfig | None
    max_turns: int | None
    max_response_tokens: int | None


class Assign(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """Run ``problem`` in ``stream``; ``finished`` holds the samples already done
    (the parent has them: only the others come back)."""

    stream: int
    problem: Problem
    finished: list[Trajectory]


class Close(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """No more problems for ``stream``: its engine stream ends once they are done."""

    stream: int


class Cancel(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """The parent left ``stream``'s block: cancel what still runs of it."""

    stream: int


class Hold(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """Admit no new turn until ``Release(token)``; acknowledged by ``Held(token)``."""

    token: int


class Release(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    token: int


class SetVersion(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """``pool.set_weight_version``; ``servers`` are the fleet's indexes (None: all)."""

    version: int
    servers: list[int] | None


class TakeOut(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """Take the fleet's ``servers`` out of the worker's rotation (a sync could not
    load them): its pool takes one back only once its ``on_server_back`` allows
    (``backends.follow_versions``: once it reports the version the worker was told)."""

    servers: list[int]


class Barrier(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """Answered by ``Passed(token)`` once every message before it took effect."""

    token: int


ToWorker = Open | Assign | Close | Cancel | Hold | Release | SetVersion | TakeOut | Barrier


# -- worker -> parent ----------------------------------------------------------------


class Ready(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """The factory's stack is up; ``capacity`` is its engine's ``max_in_flight``."""

    capacity: int


class TrajectoryDone(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    stream: int
    trajectory: Trajectory


class GroupDone(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """Every trajectory of ``(stream, key)`` has been sent; ``report`` counts it."""

    stream: int
    key: str
    report: Report


class Reported(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """The counters, every :data:`REPORT_INTERVAL_S` (progress between groups)."""

    report: Report


class Held(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """``Hold(token)`` took effect: the worker's pool admits no new turn."""

    token: int


class Passed(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag=True):
    """``Barrier(token)`` was reached; ``report``: the counters then (its pool's
    weight versions among them)."""

    token: int
    report: Report


FromWorker = Ready | TrajectoryDone | GroupDone | Reported | Held | Passed

REPORT_INTERVAL_S: Final = 1.0
"""How often a worker reports its counters between groups: often enough for a
progress bar, rare enough to cost nothing (a report is well under a kilobyte)."""

SPEC_DECODER: Final = msgspec.msgpack.Decoder(ShardSpec)
TO_WORKER: Final = msgspec.msgpack.Decoder(ToWorker)  # type: ignore[arg-type]
FROM_WORKER: Final = msgspec.msgpack.Decoder(FromWorker)  # type: ignore[arg-type]
_encoder: Final = msgspec.msgpack.Encoder()


def frame(message: msgspec.Struct) -> bytes:
    """One length-prefixed message, ready to write."""
    payload = _encoder.encode(message)
    return HEADER.pack(len(payload)) + payload


def local_servers(spec: ShardSpec, servers: Sequence[int], count: int) -> list[int]:
    """The worker's own pool indexes of the fleet's ``servers`` it serves (see
    :meth:`ShardSpec.share`); ``count``: the servers in its pool."""
    mine = [(s - spec.shard) // spec.shards for s in servers if s % spec.shards == spec.shard]
    return [i for i in mine if i < count]
