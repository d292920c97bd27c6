"""LearnerConfig: rStar2 defaults, bounds named in errors, every field documented."""

from __future__ import annotations

import ast
import inspect

import msgspec
import pytest

from rstar2_async.config import ConfigError, LearnerConfig, convert


def test_defaults_are_rstar2s() -> None:
    c = LearnerConfig()
    assert (c.lr, c.warmup_steps, c.clip_low, c.clip_high, c.kl_coef, c.entropy_coef, c.mini_batches) == (
        1e-6, 20, 0.2, 0.28, 0.0, 0.0, 1,
    )  # fmt: skip
    assert c.clip_c == 3.0  # verl's clip_ratio_c, which rStar2 trains with
    assert LearnerConfig(clip_c=0).clip_c == 0 and LearnerConfig(clip_c=None).clip_c is None  # off


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"lr": -1}, "learner.lr: expected float > 0, got -1"),
        ({"zero_stage": 4}, "learner.zero_stage: expected int >= 0 and <= 3, got 4"),
        ({"precision": "fp16"}, 'learner.precision: expected one of "bf16", "fp32", got "fp16"'),
        ({"micro_batch_tokens": 0}, "learner.micro_batch_tokens: expected int >= 1, got 0"),
        ({"clip_low": 1.5}, "learner.clip_low: expected float > 0 and < 1, got 1.5"),
        ({"learning_rate": 1e-6}, "unknown field `learning_rate`"),
        ({"clip_low": 0.3, "clip_high": 0.2}, "learner.clip_high (0.2) < learner.clip_low (0.3)"),
        ({"clip_c": 0.5}, "learner.clip_c (0.5) must be > 1"),
        ({"clip_c": -1}, "learner.clip_c: expected float >= 0 or none, got -1"),
    ],
)
def test_errors_name_the_field(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        convert(data, LearnerConfig, prefix="learner")
    assert message in str(err.value)


def test_every_field_has_a_docstring() -> None:
    tree = ast.parse(inspect.getsource(LearnerConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
    }
    assert documented == set(LearnerConfig.__struct_fields__)


def test_round_trips_through_toml() -> None:
    c = LearnerConfig(zero_stage=3, precision="fp32", tis_cap=2.0)
    assert msgspec.toml.decode(msgspec.toml.encode(c), type=LearnerConfig) == c
