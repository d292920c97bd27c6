"""Typed configuration of every part, loaded from TOML with errors that name the field.

One struct per section; a process's config composes them (:class:`TrainConfig` for
``rstar2 train``, :class:`EvalConfig` for ``rstar2 eval``).  Every field has a
docstring and bounds; :func:`load_toml` and :func:`convert` turn a violation into
``section.field: expected ..., got ...`` (a :class:`rstar2_async.errors.ConfigError`).
Importing this package imports neither torch nor any engine.
"""

from ..errors import ConfigError
from ._eval import ROLLOUT_RECORD, EvalConfig, eval_sections, read_rollout_record, write_rollout_record
from ._inference import InferenceConfig, LocalServerConfig, PoolConfig, WeightSyncConfig
from ._io import convert, load_toml, read_toml, to_toml
from ._learner import LearnerConfig
from ._memory import USABLE_FRACTION, MemoryPlan, ModelShape, plan_memory
from ._reward import DataConfig, RewardConfig
from ._rollout import RolloutConfig, SamplingConfig, check_shards, shard_share
from ._train import (
    EvalSection,
    ModelConfig,
    RunConfig,
    StageConfig,
    TinyModelConfig,
    TrainConfig,
)

__all__ = [
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "EvalSection",
    "InferenceConfig",
    "LearnerConfig",
    "LocalServerConfig",
    "MemoryPlan",
    "ModelConfig",
    "ModelShape",
    "PoolConfig",
    "ROLLOUT_RECORD",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "SamplingConfig",
    "StageConfig",
    "TinyModelConfig",
    "TrainConfig",
    "USABLE_FRACTION",
    "WeightSyncConfig",
    "check_shards",
    "convert",
    "eval_sections",
    "load_toml",
    "plan_memory",
    "read_rollout_record",
    "read_toml",
    "shard_share",
    "to_toml",
    "write_rollout_record",
]
