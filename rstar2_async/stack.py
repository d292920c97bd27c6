"""Assembling a rollout engine from configuration: servers, sandbox, grader.

One async context manager owns every resource it starts (vLLM processes, sandbox
workers, grading workers, HTTP pools) and stops them all on exit, cancellation
included.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import msgspec

from backends import ChatClient, RetryPolicy, ServerUnavailable
from backends._fleet import Fleet, FleetConfig
from backends._pool import ServerPool
from backends._weight_sync import (
    BroadcastTransport,
    DiskTransport,
    GlooSender,
    VLLMNcclSender,
    WeightSync,
)
from sandbox import SandboxConfig, SandboxPool

from .chat import HFChatTokenizer
from .config import InferenceConfig, RolloutConfig, WeightSyncConfig
from .engine import RolloutEngine
from .reward import Grader


class LocalServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """vLLM servers started for a model directory (``--model`` runs, training)."""

    num_servers: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Servers to start; the pool spreads requests over them."""
    gpu_ids: list[list[int]] = []
    """GPUs of each server (``CUDA_VISIBLE_DEVICES``); empty on CPU."""
    tensor_parallel_size: Annotated[int, msgspec.Meta(ge=1)] = 1
    max_model_len: Annotated[int, msgspec.Meta(ge=16)] = 4096
    """Prompt + response limit of the servers, in tokens."""
    kv_cache_gib: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """CPU KV-cache size in GiB (ignored on GPUs)."""
    extra_args: list[str] = []
    """Further ``vllm serve`` arguments (e.g. ``["--dtype", "bfloat16"]`` on GPUs)."""


class EvalConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The TOML ``rstar2 eval --config`` reads; every section is optional."""

    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    server: LocalServerConfig = msgspec.field(default_factory=LocalServerConfig)


@dataclass
class RolloutStack:
    """What :func:`rollout_stack` started; everything is closed when its block ends."""

    engine: RolloutEngine
    pool: ServerPool | None
    """Token mode: the servers behind the engine."""
    sync: WeightSync | None
    """Token mode: moves the servers to the weights exported in a directory (read by
    the servers, or broadcast from this process: ``weight_sync.transport``)."""
    fleet: Fleet | None
    """Servers this stack launched (``model_dir`` runs)."""


async def check_reachable(inference: InferenceConfig) -> None:
    """Fail fast, with the address in the message, when no endpoint answers at all
    (a wrong URL or a dead server would otherwise surface as many failed turns).

    Raises:
        backends.ServerUnavailable: none of ``inference.base_urls`` accepts a connection.
    """
    errors = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(inference.connect_timeout_s), trust_env=False) as http:
        for url in inference.base_urls:
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
    grader_workers: int = 2,
    log_dir: Path | None = None,
    weight_sync: WeightSyncConfig | None = None,
) -> AsyncIterator[RolloutStack]:
    """Start what a rollout needs and yield it.

    - ``model_dir`` given: ``local_server.num_servers`` vLLM servers are launched on
      it (a :class:`Fleet`, restarted if they die); token mode with the model's
      own tokenizer.
    - ``inference.mode == "tokens"``: a :class:`ServerPool` over
      ``inference.base_urls`` with the tokenizer from ``tokenizer_dir``.
    - ``inference.mode == "chat"``: the OpenAI SDK against ``inference.base_urls[0]``.

    In token mode ``sync`` uses ``weight_sync`` (default: disk).  The broadcast group
    is formed on the first sync, from this process, which must then be the
    learner's rank 0.

    Raises:
        ValueError: token mode against endpoints without ``tokenizer_dir``.
        backends.LaunchError: a local server failed to start.
        sandbox.SandboxBroken: sandbox workers could not start (e.g. no bubblewrap).
    """
    async with AsyncExitStack() as stack:
        fleet: Fleet | None = None
        pool: ServerPool | None = None
        sync: WeightSync | None = None
        weight_sync = weight_sync or WeightSyncConfig()
        local = local_server or LocalServerConfig()
        if model_dir is not None:
            fleet = await stack.enter_async_context(
                Fleet(
                    FleetConfig(
                        model=str(model_dir),
                        num_servers=local.num_servers,
                        gpu_ids=local.gpu_ids,
                        tensor_parallel_size=local.tensor_parallel_size,
                        served_model_name=inference.model,
                        max_model_len=local.max_model_len,
                        kv_cache_gib=local.kv_cache_gib,
                        extra_args=_transfer_args(weight_sync) + local.extra_args,  # the user's own come last and win
                        log_dir=str(log_dir / "servers") if log_dir else None,
                    )
                )
            )
            tokenizer_dir = model_dir
            urls = [server.url for server in fleet.servers]
            inference = msgspec.structs.replace(inference, base_urls=urls, mode="tokens")
        else:
            await check_reachable(inference)
        backend: ServerPool | ChatClient
        tokenizer = None
        if inference.mode == "tokens":
            if tokenizer_dir is None:
                raise ValueError('inference.mode = "tokens" needs the model\'s tokenizer: pass --tokenizer DIR (or use chat mode)')
            tokenizer = HFChatTokenizer.from_pretrained(tokenizer_dir)
            pool = await stack.enter_async_context(
                ServerPool(
                    inference.base_urls,
                    model=inference.model,
                    timeout=httpx.Timeout(
                        inference.read_timeout_s, connect=inference.connect_timeout_s, pool=inference.pool_timeout_s
                    ),
                    retry=RetryPolicy(
                        max_retries=inference.max_retries,
                        initial_s=inference.backoff_initial_s,
                        max_s=inference.backoff_max_s,
                    ),
                )
            )
            backend = pool
            sync = WeightSync(pool, _transport(weight_sync, local), pause_mode=weight_sync.pause_mode)
        else:
            backend = await stack.enter_async_context(
                ChatClient.from_url(
                    inference.base_urls[0],
                    model=inference.model,
                    api_key=os.environ.get(inference.api_key_env),
                    max_retries=inference.max_retries,
                )
            )
        pool_sandbox = await stack.enter_async_context(SandboxPool(sandbox))
        grader = await stack.enter_async_context(Grader(workers=grader_workers))
        engine = RolloutEngine(backend=backend, sandbox=pool_sandbox, config=rollout, tokenizer=tokenizer, scorer=grader)
        yield RolloutStack(engine=engine, pool=pool, sync=sync, fleet=fleet)


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
