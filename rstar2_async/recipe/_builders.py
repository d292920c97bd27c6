"""The parts a rollout is assembled from, shared by the run's own stack (``_stack``)
and each rollout shard's (``_shard_stack``): one builder per part, from its config."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final, Literal

import httpx

from backends import (
    BroadcastTransport,
    ChatClient,
    DiskTransport,
    FleetConfig,
    GlooSender,
    RetryPolicy,
    ServerPool,
    ServerSpec,
    TokenBackend,
    VLLMNcclSender,
)
from httpgate import read_secret
from sandbox import SandboxConfig, open_sandbox

from ..config import ConfigError, InferenceConfig, LocalServerConfig, PoolConfig, RewardConfig, RolloutConfig, WeightSyncConfig
from ..reward import Grader
from ..rollout import ChatTokenizer, RolloutEngine

__all__ = ["CHAT_RETRIES", "Engine", "api_key", "client_timeout", "fleet_config", "rollout_engine", "server_pool", "weight_transport"]

Engine = Literal["vllm", "sglang"]
"""What a pool's servers speak (launched servers: the fleet's engine; endpoints: vLLM)."""

TOKEN_RETRIES: Final = 1
"""``inference.max_retries`` when omitted, in token mode: one quick retry on the same
server (a reset connection), then the pool moves the turn."""
CHAT_RETRIES: Final = 5
"""``inference.max_retries`` when omitted, in chat mode (the OpenAI SDK's retries,
against one endpoint: nothing else to move to)."""


async def rollout_engine(
    stack: AsyncExitStack,
    *,
    backend: TokenBackend | ChatClient,
    tokenizer: ChatTokenizer | None,
    rollout: RolloutConfig,
    sandbox: SandboxConfig,
    reward: RewardConfig,
) -> tuple[RolloutEngine, Grader]:
    """An engine over ``backend`` with its own sandbox (workers, or a client of the
    services of ``sandbox.urls``) and grader, both entered into ``stack`` (closed with it).

    Raises:
        ConfigError: ``sandbox.api_key_file`` cannot be read or is empty.
        PluginError: a tool or the reward function does not load.
        sandbox.SandboxBroken: sandbox workers could not start (e.g. no bubblewrap).
        sandbox.ServiceError: no service of ``sandbox.urls`` answers, or one refuses the secret.
        GraderBrokenError: grading workers could not start.
    """
    try:
        opened = open_sandbox(sandbox)
    except ValueError as e:  # the secret file
        raise ConfigError(f"{e}; write the secret there or leave the field out") from e
    pool_sandbox = await stack.enter_async_context(opened)
    grader = await stack.enter_async_context(
        Grader(workers=reward.workers, timeout=reward.timeout_s, function=reward.function, mode=reward.grading or "strict")
    )
    engine = RolloutEngine(backend=backend, sandbox=pool_sandbox, config=rollout, tokenizer=tokenizer, reward=grader)
    return engine, grader


def api_key(inference: InferenceConfig) -> str | None:
    """The servers' key: ``inference.api_key_file``'s content, else ``$inference.api_key_env``.

    Raises:
        ConfigError: the file is missing, unreadable or empty.
    """
    try:
        return read_secret(file=inference.api_key_file, env=inference.api_key_env)
    except ValueError as e:
        raise ConfigError(f"inference.api_key_file: {e}; write the key there or leave the field out") from e


def client_timeout(inference: InferenceConfig) -> httpx.Timeout:
    return httpx.Timeout(inference.read_timeout_s, connect=inference.connect_timeout_s, pool=inference.pool_timeout_s)


def fleet_config(
    model_dir: Path, local: LocalServerConfig, inference: InferenceConfig, weight_sync: WeightSyncConfig, log_dir: Path | None
) -> FleetConfig:
    return FleetConfig(
        model=str(model_dir),
        engine=local.engine,  # type: ignore[arg-type]  # "transformers" never gets here
        num_servers=local.num_servers,
        gpu_ids=local.gpu_ids,
        tensor_parallel_size=local.tensor_parallel_size,
        served_model_name=inference.model,
        max_model_len=local.max_model_len,
        kv_cache_gib=local.kv_cache_gib,
        # the user's own come last and win; the transfer flag is vLLM's
        extra_args=(_transfer_args(weight_sync) if local.engine == "vllm" else []) + local.extra_args,
        log_dir=str(log_dir / "servers") if log_dir else None,
    )


def server_pool(inference: InferenceConfig, pool: PoolConfig, engine: Engine) -> ServerPool:
    """A pool over ``inference.base_urls``, every server speaking ``engine``."""
    return ServerPool(
        [ServerSpec(url=url, engine=engine) for url in inference.base_urls],
        model=inference.model,
        api_key=api_key(inference),
        policy=pool.policy,
        order=pool.order or "budget",
        affinity_slack=pool.affinity_slack,
        affinity_queue_slack=pool.affinity_queue_slack,
        expected_new_tokens=pool.expected_new_tokens,
        hold_reports=pool.hold_reports,
        hold_headroom=pool.hold_headroom,
        reserve_new_tokens=pool.reserve_new_tokens,
        expected_reservations=pool.expected_reservations,
        headroom=pool.headroom,
        default_capacity_tokens=pool.default_capacity_tokens,
        poll_interval_s=pool.poll_interval_s,
        stall_timeout_s=pool.stall_timeout_s,
        request_timeout_s=pool.request_timeout_s,
        unavailable_timeout_s=pool.unavailable_timeout_s,
        max_failovers=pool.max_failovers,
        retry=RetryPolicy(
            max_retries=TOKEN_RETRIES if inference.max_retries is None else inference.max_retries,
            initial_s=inference.backoff_initial_s,
            max_s=inference.backoff_max_s,
        ),
        timeout=client_timeout(inference),
        max_connections=inference.max_connections,
    )


def weight_transport(config: WeightSyncConfig, local: LocalServerConfig) -> DiskTransport | BroadcastTransport:
    if config.transport == "disk":
        return DiskTransport()
    assert config.master_port is not None  # WeightSyncConfig checks it
    ranks = config.ranks_per_server
    if ranks is None:  # launched servers; TrainConfig requires it for external ones
        ranks = local.tensor_parallel_size
    return BroadcastTransport(
        master_address=config.master_address,
        master_port=config.master_port,
        ranks_per_server=ranks,
        sender=VLLMNcclSender() if config.sender == "nccl" else GlooSender(timeout_s=config.timeout_s),
    )


def _transfer_args(config: WeightSyncConfig) -> list[str]:
    """vLLM arguments of launched servers: without a transfer engine they refuse
    ``/init_weight_transfer_engine``."""
    if config.transport == "broadcast" and config.sender == "nccl":
        return ["--weight-transfer-config", '{"backend": "nccl"}']
    return []
