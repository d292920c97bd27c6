"""A training run's rollout seeds: a pure function of run.seed, the stage and the step."""

from __future__ import annotations

from rstar2_async.config import TrainConfig, convert
from rstar2_async.recipe._seeding import step_sampling, stream_sampling


def config(seed: int) -> TrainConfig:
    raw = {"run": {"seed": seed}, "model": {"path": "m"}, "stages": [{"name": "rl", "kind": "rl", "data": "x"}]}
    return convert({**raw, "rollout": {"sampling": {"temperature": 0.7, "seed": 99}}}, TrainConfig)


def test_each_step_of_each_run_has_its_own_seed_and_a_rerun_the_same() -> None:
    a, b = config(0), config(1)
    seeds = {step_sampling(c, stage, step).seed for c in (a, b) for stage in ("rl-8k", "rl-12k") for step in range(3)}
    assert len(seeds) == 12 and 99 not in seeds  # rollout.sampling.seed (an evaluation's) is not the run's
    assert step_sampling(config(0), "rl-8k", 2) == step_sampling(a, "rl-8k", 2)
    assert step_sampling(a, "rl-8k", 2).temperature == 0.7
    assert stream_sampling(a, "rl-8k", 0).seed not in seeds
