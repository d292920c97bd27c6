"""The sampling seeds of a training run's rollouts.

Every RL rollout is seeded from ``run.seed``, the stage and the step, and the engine
seeds each request from that, the problem, the sample and the turn
(:func:`rstar2_async.rollout.derive_seed`): a rerun of the same step (a resumed run, the
same config again) samples the same tokens where the engine allows it, on the same
weights.  ``rollout.sampling``'s temperature and top-p/k apply; its ``seed`` (an
evaluation's) does not.
"""

from __future__ import annotations

import msgspec

from ..config import SamplingConfig, TrainConfig
from ..rollout import derive_seed

__all__ = ["step_sampling", "stream_sampling"]


def step_sampling(config: TrainConfig, stage: str, step: int) -> SamplingConfig:
    """The sampling of step ``step`` (0-based, within the stage) of stage ``stage``."""
    return msgspec.structs.replace(config.rollout.sampling, seed=derive_seed(config.run.seed, "rollout", stage, step))


def stream_sampling(config: TrainConfig, stage: str, first_step: int) -> SamplingConfig:
    """The sampling of a streaming stage's stream, opened at step ``first_step`` (a
    resumed stage opens a new one).  One seed for the whole stream: which weights a
    request meets depends on timing there, so a step is not reproducible anyway; the
    requests are still seeded, each differently."""
    return msgspec.structs.replace(
        config.rollout.sampling, seed=derive_seed(config.run.seed, "stream", stage, first_step)
    )
