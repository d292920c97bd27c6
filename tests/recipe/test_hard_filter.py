"""rStar2's stage 3 filter: problems the current policy solves every time are dropped
(the pipeline test runs the stage through the real stack; here the decision itself)."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest

from rstar2_async.config import TrainConfig, convert
from rstar2_async.errors import TrainError
from rstar2_async.recipe import Trainer
from rstar2_async.types import Group, Problem, Trajectory

pytestmark = pytest.mark.anyio


class FakeEngine:
    """Test double of the rollout engine: each problem's rewards are given; each
    trajectory carries ``tokens`` response tokens, made as its group is sent."""

    def __init__(self, rewards: dict[str, list[float]], tokens: int = 0) -> None:
        self.rewards, self.tokens = rewards, tokens
        self.engine = self  # stands for the rollout stack too
        self.calls: list[tuple[list[str], int, int | None]] = []

    @asynccontextmanager
    async def stream(
        self, problems: Sequence[Problem], n: int, *, max_turns: int | None, max_response_tokens: int | None
    ) -> AsyncIterator[AsyncIterator[Group]]:
        self.calls.append(([p.id for p in problems], n, max_response_tokens))

        async def groups() -> AsyncIterator[Group]:
            for p in problems:
                ids = [7] * self.tokens
                yield Group(p, [Trajectory(p.id, i, [], ids[:], [], [], [], "answer", 0, reward=r) for i, r in enumerate(self.rewards[p.id][:n])])

        yield groups()


def trainer(tmp_path: Path) -> Trainer:
    stage = {"name": "hard", "kind": "rl", "data": "unused.jsonl", "hard_filter_samples": 2, "max_response_tokens": 99}
    config = convert({"run": {"out_dir": str(tmp_path)}, "model": {"tiny": {}}, "stages": [stage]}, TrainConfig)
    return Trainer(config, resume=False)


async def test_problems_solved_every_time_are_dropped_once_and_remembered(tmp_path: Path) -> None:
    t = trainer(tmp_path)
    stage = t.config.stages[0]
    problems = [Problem(id=f"p{i}", problem="q", answer="1") for i in range(4)]
    engine = FakeEngine({"p0": [1.0, 1.0], "p1": [1.0, 0.0], "p2": [0.0, 0.0], "p3": [1.0, 1.0]})
    hard = await t._hard_problems(engine, stage, problems)  # type: ignore[arg-type]
    assert [p.id for p in hard] == ["p1", "p2"]
    assert engine.calls == [(["p0", "p1", "p2", "p3"], 2, 99)]  # with the stage's limits
    assert t.state.hard_problems == {"hard": ["p1", "p2"]}  # checkpointed with the state
    # Resumed (the state came back from a checkpoint): the same set, without sampling again.
    assert [p.id for p in await t._hard_problems(engine, stage, problems)] == ["p1", "p2"]  # type: ignore[arg-type]
    assert len(engine.calls) == 1


async def test_a_stage_with_nothing_hard_is_a_clear_error(tmp_path: Path) -> None:
    t = trainer(tmp_path)
    engine = FakeEngine({"p0": [1.0, 1.0]})
    with pytest.raises(TrainError, match="solves every problem"):
        await t._hard_problems(engine, t.config.stages[0], [Problem(id="p0", problem="q", answer="1")])  # type: ignore[arg-type]


async def test_the_filter_keeps_verdicts_not_trajectories(tmp_path: Path) -> None:
    """60 problems x 4 samples x 50,000 tokens is ~100 MB of token lists: the filter
    drops each group once judged, so it never holds more than a few."""
    t = trainer(tmp_path)
    problems = [Problem(id=f"p{i}", problem="q", answer="1") for i in range(60)]
    engine = FakeEngine({p.id: [1.0, 1.0, 1.0, float(i % 2)] for i, p in enumerate(problems)}, tokens=50_000)
    stage = msgspec.structs.replace(t.config.stages[0], hard_filter_samples=4)
    tracemalloc.start()
    try:
        hard = await t._hard_problems(engine, stage, problems)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [p.id for p in hard] == [f"p{i}" for i in range(0, 60, 2)]
    assert peak < 10 * 2**20, peak  # one group's lists are 1.6 MB; all of them, 96 MB
