"""rStar2's stage 3 filter: which problems the current policy solves every time.

The groups are read off the engine's stream as they finish and each is reduced to its
verdict at once, so the filter holds a set of problem ids, not the token lists of
``problems x hard_filter_samples`` trajectories (about 7 GB at the recipe's sizes:
42K problems x 8 samples x up to 12K tokens, as Python lists).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import StageConfig
from ..rollout import RolloutEngine, ShardedEngine
from ..types import Problem

__all__ = ["solved_every_time"]


async def solved_every_time(engine: RolloutEngine | ShardedEngine, problems: Sequence[Problem], stage: StageConfig) -> set[str]:
    """The ids of the problems all of whose ``stage.hard_filter_samples`` samples earn a
    reward above 0.5, sampled with the stage's limits.  A sample that stopped at an
    infrastructure failure (after the engine's re-rolls) has no reward: its problem
    is not counted solved (it stays in the stage; a problem wrongly kept costs a group
    RoC drops, one wrongly removed is lost to the stage)."""
    solved: set[str] = set()
    limits = {"max_turns": stage.max_turns, "max_response_tokens": stage.max_response_tokens}
    async with engine.stream(problems, stage.hard_filter_samples, **limits) as groups:
        async for group in groups:
            if min(group.rewards) > 0.5:
                solved.add(group.problem.id)
    return solved
