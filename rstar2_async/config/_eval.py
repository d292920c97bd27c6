"""The configuration ``rstar2 eval --config`` reads; every section is optional and
the command line overrides sampling, limits and the endpoint."""

from __future__ import annotations

import msgspec

from sandbox import SandboxConfig

from ._inference import InferenceConfig, LocalServerConfig, PoolConfig
from ._reward import DataConfig, RewardConfig
from ._rollout import RolloutConfig


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
