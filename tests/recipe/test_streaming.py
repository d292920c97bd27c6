"""The stream of a streaming stage: the staleness rule, stream order, and resume.

The engine is a test double that takes problems from the stage's feed and finishes
their groups in a random order the test controls; the stream's bookkeeping, the
feed and RoC are the real ones.  (tests/integration/test_train_pipeline.py runs a
streaming stage through the real stack and kills it.)"""

from __future__ import annotations

import random

import anyio
import anyio.lowlevel
import msgspec
import pytest

from rstar2_async.config import RunConfig, StageConfig
from rstar2_async.errors import TrainError
from rstar2_async.recipe import StreamState
from rstar2_async.recipe._state import oldest_version
from rstar2_async.recipe._streaming import QUEUE_FILE, _Stream, read_queue
from rstar2_async.types import Group, Problem, Trajectory, Turn

pytestmark = pytest.mark.anyio

B, N = 3, 4  # groups per step, samples per group
PROBLEMS = [Problem(id=f"p{i}", problem="q", answer="1") for i in range(7)]


def stage(steps: int) -> StageConfig:
    return StageConfig(name="rl", kind="rl", data="unused", steps=steps, batch_problems=B, n_oversample=N, n_keep=2, roc_min_per_class=1)


class FakeEngine:
    """Test double of the rollout engine: takes what the feed offers, and finishes
    one started group at random each time the staleness rule stops admission (so
    groups finish out of order, as long and short trajectories do)."""

    def __init__(self, stream: _Stream, rng: random.Random, version: list[int]) -> None:
        self.stream, self.rng, self.version = stream, rng, version
        self.started: list[tuple[Problem, int]] = []
        self.finished: list[Group] = []
        self.send, self.groups = anyio.create_memory_object_stream[Group](100)

    async def take(self, feed: anyio.abc.ObjectReceiveStream[Problem]) -> None:
        async for problem in feed:
            self.started.append((problem, self.version[0]))

    async def finish(self) -> None:
        while True:
            while self.stream.may_start() or not self.started or len(self.started) < len(self.stream.in_flight):
                await anyio.lowlevel.checkpoint()
            problem, version = self.started.pop(self.rng.randrange(len(self.started)))
            rewards = [float(self.rng.random() < 0.5) for _ in range(N)]  # some groups all equal: dropped
            turn = Turn(start=0, num_generated=1, num_appended=0, weight_version=version, finish="stop")
            trajectories = [
                Trajectory(problem.id, i, [1], [2], [1], [-0.5], [turn], "answer", version, reward=r)
                for i, r in enumerate(rewards)
            ]
            group = Group(problem, trajectories)
            self.finished.append(group)
            await self.send.send(group)


async def run_steps(stream: _Stream, steps: range, rng: random.Random, version: list[int], trained: list[tuple[int, int]]) -> None:
    """The trainer's side for ``steps``: take a batch, 'update' (the version moves),
    give the room back; records (staleness, position) of every trained group."""
    engine = FakeEngine(stream, rng, version)
    feed_send, feed = anyio.create_memory_object_stream[Problem](0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.admit, feed_send)
        tg.start_soon(engine.take, feed)
        tg.start_soon(stream.collect, engine.groups)
        tg.start_soon(engine.finish)
        for _ in steps:
            positions_before = list(stream.state.trained)
            done = await stream.next_batch()
            assert stream.outstanding() <= stream.limit
            new = stream.state.trained[len(positions_before):]
            assert new == sorted(new) and (not positions_before or new[0] > positions_before[-1])  # stream order
            trained += [(version[0] - oldest_version(g, version[0]), p) for g, p in zip(done.kept, new)]
            for _ in range(20):  # the update takes a while: the fleet goes on meanwhile
                await anyio.lowlevel.checkpoint()
            version[0] += 1  # the update and its sync
            done.trained = done.kept
            stream.trained(done)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("staleness", [0, 1, 2])
@pytest.mark.parametrize("seed", range(3))
async def test_batches_keep_the_bound_and_resume_loses_and_repeats_nothing(staleness: int, seed: int) -> None:
    rng, version, trained = random.Random(seed), [1], []
    run = RunConfig(max_staleness=staleness, seed=seed)
    steps = stage(8)
    first = _Stream(run, 1, steps, PROBLEMS, StreamState())
    await run_steps(first, range(4), rng, version, trained)  # then the run is killed
    files = first.snapshot()
    assert files.keys() == {QUEUE_FILE}
    saved = msgspec.json.decode(msgspec.json.encode(first.state), type=StreamState)  # as the checkpoint has it
    assert set(saved.queued) == set(first.kept) and set(saved.in_flight) == set(first.in_flight.values())

    resumed = _Stream(run, 1, steps, PROBLEMS, saved)
    resumed.restore(read_queue(files[QUEUE_FILE]))
    await run_steps(resumed, range(4, 8), rng, version, trained)

    positions = [p for _, p in trained]
    assert len(set(positions)) == len(positions) and positions == resumed.state.trained  # none trained twice
    # Each step's batch is its B positions: every one of the 8 steps' trained or dropped.
    assert set(positions) | {p for p in resumed.state.dropped if p < 8 * B} == set(range(8 * B))
    assert max(s for s, _ in trained) <= staleness  # no trained group staler than the bound
    # Every started position is trained, dropped, or still in the stream: none lost.
    started = set(range(resumed.state.next_seq))
    accounted = set(positions) | set(resumed.state.dropped) | set(resumed.in_flight.values()) | set(resumed.kept)
    assert started == accounted and not set(positions) & set(resumed.state.dropped)


async def test_a_checkpoint_without_the_queued_groups_is_refused() -> None:
    rng, version, trained = random.Random(0), [1], []
    run = RunConfig(max_staleness=1, seed=0)
    first = _Stream(run, 1, stage(6), PROBLEMS, StreamState())
    await run_steps(first, range(2), rng, version, trained)
    first.snapshot()
    assert first.state.queued  # the rule let the fleet run ahead: finished groups wait
    resumed = _Stream(run, 1, stage(6), PROBLEMS, first.state)
    with pytest.raises(TrainError, match="lacks queued stream positions"):
        resumed.restore({})  # as if the checkpoint had left them out: they would be lost


async def test_at_most_s_plus_one_batches_are_started_ahead() -> None:
    run = RunConfig(max_staleness=1, seed=0)
    stream = _Stream(run, 1, stage(10), PROBLEMS, StreamState())
    feed_send, feed = anyio.create_memory_object_stream[Problem](0)
    taken: list[Problem] = []

    async def take() -> None:  # an engine that starts everything and finishes nothing
        async for problem in feed:
            taken.append(problem)

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.admit, feed_send)
        tg.start_soon(take)
        await anyio.wait_all_tasks_blocked()
        assert len(taken) == 2 * B and stream.state.next_seq == 2 * B  # and no more
        tg.cancel_scope.cancel()
    assert {id(p) for p in taken} == set(stream.in_flight)  # each a fresh object naming its position


async def test_groups_roc_dropped_hold_their_room_until_their_step_is_taken() -> None:
    """A dropped group still belongs to its step's batch: admission counts it until the
    learner passes it, so the fleet never runs more than S + 1 batches ahead."""
    run = RunConfig(max_staleness=1, seed=0)
    stream = _Stream(run, 1, stage(10), PROBLEMS, StreamState())
    feed_send, feed = anyio.create_memory_object_stream[Problem](0)
    groups_send, groups = anyio.create_memory_object_stream[Group](100)

    async def finish_all_dropped() -> None:  # every group all-wrong: RoC drops it
        async for problem in feed:
            turn = Turn(start=0, num_generated=1, num_appended=0, weight_version=1, finish="stop")
            trajectories = [Trajectory(problem.id, i, [1], [2], [1], [-0.5], [turn], "answer", 1, reward=0.0) for i in range(N)]
            await groups_send.send(Group(problem, trajectories))

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.admit, feed_send)
        tg.start_soon(finish_all_dropped)
        tg.start_soon(stream.collect, groups)
        await anyio.wait_all_tasks_blocked()
        assert stream.state.next_seq == 2 * B and stream.dropped == set(range(2 * B))
        done = await stream.next_batch()  # a step of B dropped groups: nothing to train
        assert done.kept == [] and len(done.groups) == B and stream.state.head == B
        stream.trained(done)
        await anyio.wait_all_tasks_blocked()
        assert stream.state.next_seq == 3 * B  # its B positions' room came back, no more
        tg.cancel_scope.cancel()
