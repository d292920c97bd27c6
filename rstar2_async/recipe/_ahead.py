"""Where the RL loop's rollouts come from: a :class:`RolloutSource`, on-policy or one
step ahead of the learner here, or a stream (``_streaming``).

``run.max_staleness = 0`` (rStar2's): the rollout of step k+1 starts after the sync of
step k.  ``> 0``: as soon as step k's rollout is taken, step k+1's starts in the
background and overlaps step k's update and sync; its trajectories may come from
weights up to ``max_staleness`` versions old (each keeps its version, and the trainer
drops groups older than the bound).  The trainer's loop reads the same in every mode::

    done = await source.take(step)          # steps 1-5
    ... update, export, sync, record        # steps 6-8, with source.step_metrics()
    source.trained(done)                    # the sync is done
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import anyio

from ..config import SamplingConfig, StageConfig
from ..rollout import RolloutEngine, ShardedEngine
from ..types import Problem
from ._progress import show_progress
from ._state import RolloutResult, downsample

__all__ = ["RolloutSource", "Rollouts", "rollout_batch", "rollouts"]


class RolloutSource(Protocol):
    """What the trainer's RL loop takes each step's groups from."""

    async def take(self, step: int) -> RolloutResult:
        """Step ``step``'s finished groups (and RoC's decisions on them)."""
        ...

    def trained(self, done: RolloutResult) -> None:
        """``done``'s update and sync are over (a stream gives back the room they held)."""
        ...

    def step_metrics(self) -> dict[str, float]:
        """The source's own figures for the step just trained, read once its sync is done."""
        ...

    def checkpoint_files(self) -> dict[str, bytes] | None:
        """What a checkpoint must keep besides the trainer's state (files by name)."""
        ...


class _Pending:
    """A rollout running ahead, in the block's task group."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.done = anyio.Event()
        self.value: RolloutResult | None = None

    async def run(self, rollout: Callable[[int], Awaitable[RolloutResult]]) -> None:
        self.value = await rollout(self.step)
        self.done.set()


class Rollouts:
    """Hands out each step's rollout; see :func:`rollouts`."""

    def __init__(self, rollout: Callable[[int], Awaitable[RolloutResult]], end: int, ahead: bool, tg: anyio.abc.TaskGroup) -> None:
        self._rollout, self._end, self._ahead, self._tg = rollout, end, ahead, tg
        self._pending: _Pending | None = None

    async def take(self, step: int) -> RolloutResult:
        """Step ``step``'s rollout: the one running ahead, or a new one; then start the
        next step's when running ahead."""
        pending, self._pending = self._pending, None
        if pending is not None and pending.step == step:
            await pending.done.wait()
            assert pending.value is not None
            result = pending.value
        else:
            result = await self._rollout(step)
        if self._ahead and step + 1 < self._end:
            self._pending = _Pending(step + 1)
            self._tg.start_soon(self._pending.run, self._rollout)
        return result

    def trained(self, done: RolloutResult) -> None:
        """Nothing to give back: the next rollout is already running, or starts at ``take``."""

    def step_metrics(self) -> dict[str, float]:
        return {}

    def checkpoint_files(self) -> None:
        """None: a rollout running ahead is not kept (the resumed run rolls it out again)."""


@asynccontextmanager
async def rollouts(rollout: Callable[[int], Awaitable[RolloutResult]], *, end: int, ahead: bool) -> AsyncIterator[Rollouts]:
    """Rollouts of steps up to ``end`` (exclusive), made by ``rollout(step)``, one step
    ahead when ``ahead``.  Leaving the block cancels a rollout still running ahead."""
    async with anyio.create_task_group() as tg:
        yield Rollouts(rollout, end, ahead, tg)
        tg.cancel_scope.cancel()


async def rollout_batch(
    engine: RolloutEngine | ShardedEngine,
    stage: StageConfig,
    batch: list[Problem],
    step: int,
    *,
    seed: int,
    sampling: SamplingConfig,
) -> RolloutResult:
    """Roll out one step's batch with ``sampling`` (the step's seed: ``_seeding``);
    GRPO-RoC downsamples each group as it completes."""
    rng = random.Random(f"{seed}/roc/{stage.name}/{step}")
    done = RolloutResult()
    t0, grading0 = time.monotonic(), engine.statistics().grading_ms
    async with anyio.create_task_group() as tg:
        tg.start_soon(show_progress, engine, len(batch) * stage.n_oversample, f"{stage.name} step {step + 1}")
        async with engine.stream(
            batch, stage.n_oversample, sampling=sampling, max_turns=stage.max_turns,
            max_response_tokens=stage.max_response_tokens,
        ) as stream:  # fmt: skip
            async for group in stream:
                done.add(group, downsample(group, stage, rng))
        tg.cancel_scope.cancel()
    done.seconds = time.monotonic() - t0
    done.reward_seconds = (engine.statistics().grading_ms - grading0) / 1000
    return done
