"""Streaming RL (``run.mode = "streaming"``): rollouts never stop between steps.

One stage is three tasks around the run's one engine:

    admit    feeds problems to ``engine.stream`` while the staleness rule allows
    collect  takes each finished group, downsamples it (GRPO-RoC), resolves its position
    train    the trainer's loop, the same as on-policy: its :class:`RolloutSource`
             (:func:`streaming_rollouts`) hands it the next ``batch_problems`` finished
             groups in stream order (the ones RoC kept) -> GRPO update -> export ->
             weight sync (abort: the turns in flight stop and resume from their tokens
             on the new weights) -> ``trained`` gives the room back to ``admit``

A step's batch is what it is on-policy: the stage's next ``batch_problems`` problems
(stream position p is problem p % B of step p // B's batch, drawn as on-policy draws
it), trained on the groups RoC keeps of them; a step whose groups all had equal
rewards updates nothing.  So ``mode = "streaming"`` changes when groups are generated,
never which data a step trains on.

The staleness rule (AReaL's, counted in groups): at most ``(S + 1) x B`` groups are
started ahead of the learner (in flight, finished but untrained, or in the update
under way), where S is ``run.max_staleness`` and B the stage's ``batch_problems``;
the room an update frees is given back once its sync is done.  Batches are taken in
the order their groups were started, so a group started when the weights were at
version v waits behind fewer than (S + 1) x B others and is trained before version
v + S + 1 exists: no trained group is more than S versions stale, and none is ever
generated only to be dropped.  The price of the order: the learner waits for the
oldest unfinished group even when newer ones are done (while the fleet works on up
to S x B groups more).

Why B finished groups a step, not B kept ones: once the policy solves most problems
RoC drops most groups (the CPU demo keeps ~1 in 16 after its first steps), and
filling a batch with B kept groups then costs several batches of rollouts per step,
while the rule, which must count every group that may be kept, lets only
(S + 1) x B start: the fleet starves (measured on the demo: slower than on-policy).
Counting a dropped group by the keep rate observed so far would start more, but
whenever more of them are kept than expected the youngest are trained more than S
versions after their first token: with S = 1, B = 1 and a keep rate of 0.2 it lets 10
groups start at version v, 3 or more are kept with probability 0.32, and the third is
trained at version v + 2.

State (``StreamState`` in every checkpoint; the queued groups themselves in
``stream-queue.msgpack``): on resume the queued groups are trained as they are, the
groups that were in flight are started again (same positions, new samples), and the
stream goes on from where it stood; a position is never trained twice or lost.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc
import msgspec
from anyio.abc import ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream

from ..config import RunConfig, SamplingConfig, StageConfig
from ..errors import TrainError
from ..selection import RocDecision
from ..types import Group, Problem
from ._data import batch_for_step
from ._stack import RolloutStack, turns_interrupted
from ._state import RolloutResult, StreamState, downsample

__all__ = ["QUEUE_FILE", "StreamingRollouts", "read_queue", "streaming_rollouts"]

QUEUE_FILE: Final = "stream-queue.msgpack"
"""Where a checkpoint keeps the finished, kept, untrained groups of a streaming stage."""

_queue_decoder = msgspec.msgpack.Decoder(dict[int, Group])


def read_queue(data: bytes) -> dict[int, Group]:
    """The queued groups a checkpoint's :data:`QUEUE_FILE` holds, by stream position."""
    return _queue_decoder.decode(data)


class _Stream:
    """The bookkeeping of one stage's stream: positions, the rule, the order."""

    def __init__(self, run: RunConfig, index: int, stage: StageConfig, problems: list[Problem], state: StreamState) -> None:
        self.seed, self.index, self.stage, self.problems, self.state = run.seed, index, stage, problems, state
        self.limit = (run.max_staleness + 1) * stage.batch_problems
        self.kept: dict[int, Group] = {}  # finished and kept, position >= head
        self.dropped: set[int] = {p for p in state.dropped if p >= state.head}  # finished, RoC-dropped
        self.resolved: dict[int, tuple[Group, RocDecision]] = {}  # this step's, for its metrics
        self.in_flight: dict[int, int] = {}  # id(fed problem) -> position
        self.restart = sorted(state.in_flight)  # started before a resume: start again first
        self.updating = 0  # groups in the update under way: their room comes back after its sync
        self._positions: dict[int, int] = {}  # id(kept group) -> position, for the update under way
        self._changed = anyio.Event()
        self._batches: dict[int, list[Problem]] = {}

    # -- what a checkpoint keeps ---------------------------------------------------

    def snapshot(self) -> dict[str, bytes]:
        s = self.state
        s.in_flight = sorted(set(self.in_flight.values()) | set(self.restart))
        s.queued = sorted(self.kept)
        return {QUEUE_FILE: msgspec.msgpack.encode(self.kept)}

    def restore(self, queued: dict[int, Group]) -> None:
        """Take back the queued groups of the checkpoint the state comes from.

        Raises:
            TrainError: some are missing (training on would lose them).
        """
        missing = set(self.state.queued) - set(queued)
        if missing:
            raise TrainError(f"the checkpoint's {QUEUE_FILE} lacks queued stream positions {sorted(missing)}: resuming would lose them")
        self.kept = {p: queued[p] for p in self.state.queued}

    # -- the staleness rule ------------------------------------------------------------

    def outstanding(self) -> int:
        return len(self.in_flight) + len(self.kept) + len(self.dropped) + self.updating

    def may_start(self) -> bool:
        needed = self.stage.steps * self.stage.batch_problems - (self.state.head - self.updating)
        return self.outstanding() < min(self.limit, needed)

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        await self._changed.wait()

    def problem_at(self, position: int) -> Problem:
        """A fresh copy (its identity names the position) of the position's problem."""
        b = self.stage.batch_problems
        step = position // b
        if step not in self._batches:
            self._batches = {step: batch_for_step(self.problems, b, seed=self.seed, stage=self.index, step=step)}
        return msgspec.structs.replace(self._batches[step][position % b])

    def step_metrics(self, interrupted: int) -> dict[str, float]:
        """A step's ``async/`` figures of the stream, read once its sync is done (the
        trained groups' staleness is every mode's: ``_health.update_metrics``)."""
        return {
            "async/turns_interrupted": interrupted,  # by this step's sync, mostly
            "async/groups_in_flight": len(self.in_flight),
            "async/groups_queued": len(self.kept),
        }

    # -- the three tasks -----------------------------------------------------------------

    async def admit(self, send: ObjectSendStream[Problem]) -> None:
        async with send:
            while True:
                while not self.may_start():
                    await self.changed()
                if self.restart:
                    position = self.restart.pop(0)
                else:
                    position = self.state.next_seq
                    self.state.next_seq += 1
                problem = self.problem_at(position)
                self.in_flight[id(problem)] = position
                await send.send(problem)  # taken when the engine has started the previous group

    async def collect(self, groups: MemoryObjectReceiveStream[Group]) -> None:
        seed, name = self.seed, self.stage.name
        async for group in groups:
            position = self.in_flight.pop(id(group.problem))
            decision = downsample(group, self.stage, random.Random(f"{seed}/roc/{name}/{position}"))
            self.resolved[position] = (group, decision)
            if decision.group is None:
                self.dropped.add(position)
                self.state.dropped.append(position)
            else:
                self.kept[position] = decision.group
            self.notify()

    async def next_batch(self) -> RolloutResult:
        """The next B positions' groups, once all are finished (the ones RoC kept are
        trained); waits for the oldest unfinished.  Takes nothing until all B are there
        (a stop while waiting loses none)."""
        head, b = self.state.head, self.stage.batch_problems
        positions = range(head, head + b)
        while not all(p in self.kept or p in self.dropped for p in positions):
            await self.changed()
        take = [p for p in positions if p in self.kept]
        done = RolloutResult()
        for p in positions:
            if p in self.resolved:  # resolved before a resume: counted in that run's metrics
                done.add(*self.resolved.pop(p))
            self.dropped.discard(p)
        done.kept = [self.kept.pop(p) for p in take]
        self._positions = {id(g): p for g, p in zip(done.kept, take)}
        self.state.head = head + b
        self.state.trained += take
        self.updating = b
        return done

    def trained(self, done: RolloutResult) -> None:
        """After the update: give its room back; a group it left out as too stale
        (the rule prevents it; a version the servers lost would not) counts as dropped."""
        trained = {id(g) for g in done.trained}
        for g in done.kept:
            if id(g) not in trained:
                position = self.state.trained.pop(self.state.trained.index(self._positions[id(g)]))
                self.state.dropped.append(position)
        self._positions.clear()
        self.updating = 0
        self.notify()


class StreamingRollouts:
    """A streaming stage's :class:`~._ahead.RolloutSource`: each step's batch is the
    stream's next ``batch_problems`` positions (see the module docstring)."""

    def __init__(self, stream: _Stream, stack: RolloutStack) -> None:
        self._stream, self._stack = stream, stack
        self._interrupted = turns_interrupted(stack)

    async def take(self, step: int) -> RolloutResult:
        """The next batch of the stream, once all its groups are finished (``step`` is
        the trainer's; the stream keeps its own position)."""
        engine = self._stack.engine
        t0, grading0 = time.monotonic(), engine.statistics().grading_ms
        done = await self._stream.next_batch()
        done.seconds, done.reward_seconds = time.monotonic() - t0, (engine.statistics().grading_ms - grading0) / 1000
        return done

    def trained(self, done: RolloutResult) -> None:
        self._stream.trained(done)  # the sync is done: its room goes back to admission

    def step_metrics(self) -> dict[str, float]:
        """The stream's figures, with the turns interrupted since the last step's record
        (none falls between two steps)."""
        before, self._interrupted = self._interrupted, turns_interrupted(self._stack)
        return self._stream.step_metrics(self._interrupted - before)

    def checkpoint_files(self) -> dict[str, bytes]:
        return self._stream.snapshot()


@asynccontextmanager
async def streaming_rollouts(
    stack: RolloutStack,
    index: int,
    stage: StageConfig,
    problems: list[Problem],
    *,
    run: RunConfig,
    state: StreamState,
    queued: dict[int, Group],
    sampling: SamplingConfig,
) -> AsyncIterator[StreamingRollouts]:
    """The stream of stage ``index`` from where ``state`` stands, running while the block
    runs; leaving the block cancels what is still in flight (not needed: a checkpoint
    restarts it).

    ``queued``: the groups a resumed checkpoint kept (empty for a fresh stage);
    ``sampling``: the stream's (its seed: ``_seeding``).

    Raises:
        TrainError: ``queued`` lacks groups the state says are queued.
    """
    stream = _Stream(run, index, stage, problems, state)
    stream.restore(queued)
    feed_send, feed = anyio.create_memory_object_stream[Problem](0)
    async with anyio.create_task_group() as tg, stack.engine.stream(
        feed, stage.n_oversample, sampling=sampling, max_turns=stage.max_turns,
        max_response_tokens=stage.max_response_tokens,
    ) as groups:  # fmt: skip
        tg.start_soon(stream.admit, feed_send)
        tg.start_soon(stream.collect, groups)
        yield StreamingRollouts(stream, stack)
        tg.cancel_scope.cancel()
