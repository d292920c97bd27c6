"""Assembling the run's one rollout engine from configuration: servers, sandbox, reward.

One async context manager owns every resource it starts (server processes or an
in-process model, sandbox workers, grading workers, HTTP pools) and stops them all
on exit, cancellation included.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from backends import (
    BroadcastTransport,
    ChatClient,
    DiskTransport,
    Fleet,
    FleetConfig,
    GlooSender,
    RetryPolicy,
    ServerPool,
    ServerSpec,
    ServerUnavailable,
    TokenBackend,
    TransformersBackend,
    VLLMNcclSender,
    WeightSync,
)
from httpgate import read_secret, transport_for
from sandbox import SandboxConfig, SandboxPool

from ..config import (
    ConfigError,
    InferenceConfig,
    LocalServerConfig,
    PoolConfig,
    RewardConfig,
    RolloutConfig,
    WeightSyncConfig,
)
from ..reward import Grader
from ..rollout import ChatTokenizer, HFChatTokenizer, RolloutEngine

__all__ = ["RolloutStack", "check_reachable", "rollout_stack"]


@dataclass
class RolloutStack:
    """What :func:`rollout_stack` started; everything is closed when its block ends."""

    engine: RolloutEngine
    """The run's one engine: every rollout and evaluation goes through it."""
    grader: Grader
    pool: ServerPool | None
    """Token mode against servers: the servers behind the engine."""
    sync: WeightSync | None
    """Token mode against servers: moves them to the weights exported in a directory
    (read by the servers, or broadcast from this process: ``weight_sync.transport``)."""
    fleet: Fleet | None
    """Servers this stack launched (``model_dir`` runs)."""


async def check_reachable(inference: InferenceConfig) -> None:
    """Fail fast, with the address in the message, when no endpoint answers at all
    (a wrong URL or a dead server would otherwise surface as many failed turns).

    Raises:
        backends.ServerUnavailable: none of ``inference.base_urls`` accepts a connection.
    """
    errors = []
    timeout = httpx.Timeout(inference.connect_timeout_s)
    for url in inference.base_urls:
        async with httpx.AsyncClient(transport=transport_for(url), timeout=timeout, trust_env=False) as http:
            try:
                await http.get(url.rstrip("/") + "/models")
                return  # any HTTP answer (even 401/404) means something is listening
            except httpx.TransportError as exc:
                errors.append(f"{url}: {type(exc).__name__}: {exc or 'no answer'}")
    raise ServerUnavailable("no inference endpoint is reachable: " + "; ".join(errors))


@asynccontextmanager
async def rollout_stack(
    *,
    rollout: RolloutConfig,
    inference: InferenceConfig,
    sandbox: SandboxConfig,
    model_dir: Path | None = None,
    tokenizer_dir: Path | None = None,
    local_server: LocalServerConfig | None = None,
    pool: PoolConfig | None = None,
    reward: RewardConfig | None = None,
    log_dir: Path | None = None,
    weight_sync: WeightSyncConfig | None = None,
) -> AsyncIterator[RolloutStack]:
    """Start what a rollout needs and yield it.

    - ``model_dir`` given: ``local_server`` says how it is served: ``num_servers``
      vLLM or SGLang servers launched on it (a :class:`Fleet`, restarted if they die),
      or the model in this process (``engine = "transformers"``); token mode with the
      model's own tokenizer.
    - ``inference.mode == "tokens"``: a :class:`ServerPool` over
      ``inference.base_urls`` with the tokenizer from ``tokenizer_dir``.
    - ``inference.mode == "chat"``: the OpenAI SDK against ``inference.base_urls[0]``.

    With a pool, ``sync`` uses ``weight_sync`` (default: disk).  The broadcast group
    is formed on the first sync, from this process, which must then be the
    learner's rank 0.

    Raises:
        ConfigError: token mode against endpoints without ``tokenizer_dir``.
        PluginError: a tool or the reward function does not load.
        backends.LaunchError: a local server failed to start.
        sandbox.SandboxBroken: sandbox workers could not start (e.g. no bubblewrap).
        GraderBrokenError: grading workers could not start.
    """
    weight_sync = weight_sync or WeightSyncConfig()
    local = local_server or LocalServerConfig()
    pool_config = pool or PoolConfig()
    reward = reward or RewardConfig()
    async with AsyncExitStack() as stack:
        fleet: Fleet | None = None
        server_pool: ServerPool | None = None
        sync: WeightSync | None = None
        backend: TokenBackend | ChatClient
        tokenizer: ChatTokenizer | None = None
        if model_dir is not None and local.engine == "transformers":
            tokenizer = HFChatTokenizer.from_pretrained(model_dir)
            backend = await stack.enter_async_context(TransformersBackend(model_dir, max_model_len=local.max_model_len))
        else:
            if model_dir is not None:
                fleet = await stack.enter_async_context(Fleet(_fleet_config(model_dir, local, inference, weight_sync, log_dir)))
                tokenizer_dir = model_dir
                urls = [server.url for server in fleet.servers]
                inference = msgspec.structs.replace(inference, base_urls=urls, mode="tokens")
            else:
                await check_reachable(inference)
            if inference.mode == "tokens":
                if tokenizer_dir is None:
                    raise ConfigError(
                        'inference.mode = "tokens" needs the model\'s tokenizer: pass --tokenizer DIR (or use chat mode)'
                    )
                tokenizer = HFChatTokenizer.from_pretrained(tokenizer_dir)
                server_pool = await stack.enter_async_context(_server_pool(inference, pool_config, local, model_dir))
                backend = server_pool
                pause = weight_sync.pause_mode or "wait"  # the trainer resolves it for streaming
                sync = WeightSync(server_pool, _transport(weight_sync, local), pause_mode=pause)
            else:
                backend = await stack.enter_async_context(
                    ChatClient.from_url(
                        inference.base_urls[0],
                        model=inference.model,
                        api_key=_api_key(inference),
                        max_retries=inference.max_retries,
                        timeout=_timeout(inference),
                        max_connections=inference.max_connections,
                    )
                )
        pool_sandbox = await stack.enter_async_context(SandboxPool(sandbox))
        grader = await stack.enter_async_context(
            Grader(
                workers=reward.workers,
                timeout=reward.timeout_s,
                function=reward.function,
                mode=reward.grading or "strict",
            )
        )
        engine = RolloutEngine(backend=backend, sandbox=pool_sandbox, config=rollout, tokenizer=tokenizer, reward=grader)
        yield RolloutStack(engine=engine, grader=grader, pool=server_pool, sync=sync, fleet=fleet)


def _api_key(inference: InferenceConfig) -> str | None:
    """The servers' key: ``inference.api_key_file``'s content, else ``$inference.api_key_env``.

    Raises:
        ConfigError: the file is missing, unreadable or empty.
    """
    try:
        return read_secret(file=inference.api_key_file, env=inference.api_key_env)
    except ValueError as e:
        raise ConfigError(f"inference.api_key_file: {e}; write the key there or leave the field out") from e


def _timeout(inference: InferenceConfig) -> httpx.Timeout:
    return httpx.Timeout(inference.read_timeout_s, connect=inference.connect_timeout_s, pool=inference.pool_timeout_s)


def _fleet_config(
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


def _server_pool(inference: InferenceConfig, pool: PoolConfig, local: LocalServerConfig, model_dir: Path | None) -> ServerPool:
    # Launched servers speak the fleet's engine; endpoints are taken to be vLLM.
    engine = local.engine if model_dir is not None else "vllm"
    return ServerPool(
        [ServerSpec(url=url, engine=engine) for url in inference.base_urls],  # type: ignore[arg-type]
        model=inference.model,
        api_key=_api_key(inference),
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
        request_timeout_s=pool.request_timeout_s,
        unavailable_timeout_s=pool.unavailable_timeout_s,
        max_failovers=pool.max_failovers,
        retry=RetryPolicy(max_retries=inference.max_retries, initial_s=inference.backoff_initial_s, max_s=inference.backoff_max_s),
        timeout=_timeout(inference),
        max_connections=inference.max_connections,
    )


def _transport(config: WeightSyncConfig, local: LocalServerConfig) -> DiskTransport | BroadcastTransport:
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
        sender=VLLMNcclSender() if config.sender == "nccl" else GlooSender(),
    )


def _transfer_args(config: WeightSyncConfig) -> list[str]:
    """vLLM arguments of launched servers: without a transfer engine they refuse
    ``/init_weight_transfer_engine``."""
    if config.transport == "broadcast" and config.sender == "nccl":
        return ["--weight-transfer-config", '{"backend": "nccl"}']
    return []
