"""The configuration ``rstar2 eval --config`` reads; every section is optional and
the command line overrides sampling, limits and the endpoint.

``--config`` also takes a training config (``rstar2 train``'s, or a run's
``config.toml``): :func:`eval_sections` keeps the sections an evaluation reads.  A
checkpoint written by ``rstar2 train`` carries the rollout settings it was trained
with in :data:`ROLLOUT_RECORD`, which ``rstar2 eval --model`` starts from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import msgspec

from sandbox import SandboxConfig

from ..errors import ConfigError
from ._inference import InferenceConfig, LocalServerConfig, PoolConfig
from ._io import convert, read_toml, to_toml
from ._reward import DataConfig, RewardConfig
from ._rollout import RolloutConfig
from ._train import TrainConfig

ROLLOUT_RECORD: Final = "rollout.toml"
"""Beside ``config.json`` in every weights directory ``rstar2 train`` exports: a
``[rollout]`` table with the settings those weights were trained with (system prompt,
tools, turns, response budget: the stage's limits applied).  A valid ``--config``."""

_TRAINING_ONLY: Final = ("run", "model", "weight_sync", "learner", "eval", "stages")
"""Sections only a training config has: one of them marks a file as one."""


class EvalConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """An evaluation: how trajectories run, against what, graded how."""

    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)
    """The endpoint (``--endpoint``).  With ``--model`` the started ``[server]`` replaces
    ``base_urls`` and ``mode``; the rest (model name, timeouts, connections) applies."""
    server: LocalServerConfig = msgspec.field(default_factory=LocalServerConfig)
    pool: PoolConfig = msgspec.field(default_factory=PoolConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    reward: RewardConfig = msgspec.field(default_factory=RewardConfig)
    data: DataConfig = msgspec.field(default_factory=DataConfig)


class _RolloutRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rollout: RolloutConfig


def eval_sections(path: str | Path) -> tuple[dict[str, Any], bool]:
    """The sections of the TOML file at ``path`` that an evaluation reads, as
    plain tables (to merge over other settings), and whether it is a training config.

    An eval config gives its own tables.  A training config gives ``[rollout]``
    (with the last stage's ``max_turns`` and ``max_response_tokens``: what its final
    weights were trained with), ``[inference]`` if set, ``[server]``, ``[pool]``,
    ``[sandbox]``, ``[reward]`` and ``[data]``; the rest is checked, then left out.

    Raises:
        ConfigError: the file is missing, not TOML, or a field is invalid.
    """
    data = read_toml(path)
    if not any(key in data for key in _TRAINING_ONLY):
        convert(data, EvalConfig)  # errors name the field, as for any config
        return data, False
    train = convert(data, TrainConfig)
    sections: dict[str, Any] = {
        "rollout": train.stage_rollout(len(train.stages) - 1), "server": train.server, "pool": train.pool,
        "sandbox": train.sandbox, "reward": train.reward, "data": train.data,
    }  # fmt: skip
    if train.inference is not None:
        sections["inference"] = train.inference
    return msgspec.to_builtins(sections), True


def write_rollout_record(weights_dir: Path, rollout: RolloutConfig) -> Path:
    """Write :data:`ROLLOUT_RECORD` into ``weights_dir`` (atomically: a reader sees
    the old file or the new one) and return its path.

    Raises:
        OSError: it cannot be written.
    """
    path = weights_dir / ROLLOUT_RECORD
    tmp = path.with_name(f".{ROLLOUT_RECORD}.tmp-{os.getpid()}")
    head = "# The rollout settings these weights were trained with (rstar2 train); rstar2 eval --model uses them.\n"
    # How the run laid its rollout out over processes is not a setting of the weights.
    tmp.write_text(head + to_toml(_RolloutRecord(msgspec.structs.replace(rollout, shards=0))))
    os.replace(tmp, path)
    return path


def read_rollout_record(model_dir: Path) -> RolloutConfig | None:
    """The rollout settings recorded in ``model_dir`` (:data:`ROLLOUT_RECORD`), or
    None when it has none (a model not trained by ``rstar2 train``).

    Raises:
        ConfigError: the record is there but invalid (its path is in the message).
    """
    path = model_dir / ROLLOUT_RECORD
    if not path.is_file():
        return None
    try:
        return convert(read_toml(path), _RolloutRecord).rollout
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
