"""Assembling the run's one rollout engine from configuration: servers, sandbox, reward.

One async context manager owns every resource it starts (server processes or an
in-process model, sandbox workers, grading workers, HTTP pools, rollout shards) and
stops them all on exit, cancellation included.  The parts are built by ``_builders``;
with ``rollout.shards`` each worker builds its own from them (``_shard_stack``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from backends import ChatClient, Fleet, ServerPool, ServerUnavailable, TokenBackend, TransformersBackend, WeightSync
from httpgate import transport_for
from sandbox import SandboxConfig

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
from ..rollout import ChatTokenizer, HFChatTokenizer, RolloutEngine, ShardedEngine
from ._builders import CHAT_RETRIES, Engine, api_key, client_timeout, fleet_config, rollout_engine, weight_transport
from ._builders import server_pool as server_pool_of
from ._shard_stack import ShardStackConfig, shard_specs

__all__ = ["RolloutStack", "check_reachable", "rollout_stack", "turns_interrupted"]


@dataclass
class RolloutStack:
    """What :func:`rollout_stack` started; everything is closed when its block ends."""

    engine: RolloutEngine | ShardedEngine
    """The run's one engine: every rollout and evaluation goes through it (with
    ``rollout.shards``, the workers' engines behind one :class:`ShardedEngine`)."""
    grader: Grader | None
    """The engine's grader (None with shards: each worker has its own)."""
    pool: ServerPool | None
    """Token mode against servers: the servers behind the engine (with shards, over
    every server for the weight sync and health alone: the workers generate)."""
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

    ``rollout.shards = N >= 1`` (token mode): the engine is a :class:`ShardedEngine`
    over N worker processes, each with its share of the servers, sandbox workers and
    graders; this process keeps a pool over every server for the sync and health.

    With a pool, ``sync`` uses ``weight_sync`` (default: disk).  The broadcast group
    is formed on the first sync, from this process, which must then be the
    learner's rank 0.

    Raises:
        ConfigError: token mode against endpoints without ``tokenizer_dir``; a chat
            template that cannot express tool results (before any server starts);
            ``rollout.chat_template`` in chat mode;
            ``rollout.shards`` in chat mode, with the in-process engine, or over
            more workers than servers.
        ShardError: a rollout shard could not start.
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
        backend: TokenBackend | ChatClient
        tokenizer: ChatTokenizer | None = None
        if model_dir is not None or inference.mode == "tokens":
            tokenizer_dir = model_dir if model_dir is not None else tokenizer_dir
            if tokenizer_dir is None:
                raise ConfigError(
                    'inference.mode = "tokens" needs the model\'s tokenizer: pass --tokenizer DIR (or use chat mode)'
                )
            # Before any server starts: a template that cannot express tool results fails at once.
            tokenizer = HFChatTokenizer.from_pretrained(tokenizer_dir, chat_template=rollout.chat_template)
        elif rollout.chat_template is not None:
            raise ConfigError(
                f"rollout.chat_template = {rollout.chat_template!r} applies to token mode; a chat endpoint renders "
                "its own template: leave it out, or pass the model's tokenizer (--tokenizer DIR) for token mode"
            )
        if model_dir is not None and local.engine == "transformers":
            if rollout.shards:
                raise ConfigError('rollout.shards: the "transformers" engine runs in this process; set rollout.shards = 0')
            backend = await stack.enter_async_context(TransformersBackend(model_dir, max_model_len=local.max_model_len))
        else:
            if model_dir is not None:
                fleet = await stack.enter_async_context(Fleet(fleet_config(model_dir, local, inference, weight_sync, log_dir)))
                urls = [server.url for server in fleet.servers]
                inference = msgspec.structs.replace(inference, base_urls=urls, mode="tokens")
            else:
                await check_reachable(inference)
            if inference.mode == "tokens":
                # With shards: for the sync, health and admin only (the workers generate).
                server_pool = server_pool_of(inference, pool_config, _engine(local, model_dir))
                await stack.enter_async_context(server_pool)
                backend = server_pool
            elif rollout.shards:
                raise ConfigError(
                    f'rollout.shards = {rollout.shards} needs inference.mode = "tokens" (chat mode has no server pool to split)'
                )
            else:
                backend = await stack.enter_async_context(
                    ChatClient.from_url(
                        inference.base_urls[0],
                        model=inference.model,
                        api_key=api_key(inference),
                        max_retries=CHAT_RETRIES if inference.max_retries is None else inference.max_retries,
                        timeout=client_timeout(inference),
                        max_connections=inference.max_connections,
                    )
                )
        engine: RolloutEngine | ShardedEngine
        grader: Grader | None = None
        sync: WeightSync | None = None
        if rollout.shards:
            assert server_pool is not None and tokenizer_dir is not None
            parts = ShardStackConfig(
                rollout=rollout, inference=inference, engine=_engine(local, model_dir), pool=pool_config, sandbox=sandbox,
                reward=reward, tokenizer_dir=str(tokenizer_dir),
            )  # fmt: skip
            engine = await stack.enter_async_context(ShardedEngine(shard_specs(parts), tokenizer=tokenizer))
        else:
            engine, grader = await rollout_engine(
                stack, backend=backend, tokenizer=tokenizer, rollout=rollout, sandbox=sandbox, reward=reward
            )
        if server_pool is not None:
            pause = weight_sync.pause_mode or "wait"  # the trainer resolves it for streaming
            transport = weight_transport(weight_sync, local)
            if isinstance(engine, ShardedEngine):  # the workers' pools hold and learn the version too
                tell = _tell(engine, len(server_pool.servers))
                sync = WeightSync(
                    server_pool, transport, pause_mode=pause, hold=engine.held, on_version=tell, timeout_s=weight_sync.timeout_s
                )
            else:
                sync = WeightSync(server_pool, transport, pause_mode=pause, timeout_s=weight_sync.timeout_s)
            stack.push_async_callback(sync.release)  # before the pool closes: no server left paused
        yield RolloutStack(engine=engine, grader=grader, pool=server_pool, sync=sync, fleet=fleet)


def _engine(local: LocalServerConfig, model_dir: Path | None) -> Engine:
    """Launched servers speak the fleet's engine; endpoints are taken to be vLLM."""
    return local.engine if model_dir is not None and local.engine != "transformers" else "vllm"


def _tell(engine: ShardedEngine, count: int) -> Callable[[int, list[int]], Awaitable[None]]:
    """The sync's ``on_version`` for the workers' pools: the servers that took the
    version get it; the others (the sync took them out, or they were down) leave the
    workers' rotation until the trainer's pool has loaded them.  Awaited before the
    servers resume: a turn the pause cut short comes back to a pool that has the
    version (vLLM stamps its tokens itself; other servers' tokens take the pool's)."""

    async def on_version(version: int, servers: list[int]) -> None:
        engine.set_weight_version(version, servers)
        engine.take_out(sorted(set(range(count)) - set(servers)))
        await engine.applied()

    return on_version


def turns_interrupted(stack: RolloutStack) -> int:
    """Generations a pause interrupted so far (cut short and resumed, or frozen
    through a ``keep`` sync), over every server the rollout generates on (the
    workers' with shards)."""
    if isinstance(stack.engine, ShardedEngine):
        return stack.engine.turns_interrupted()
    return 0 if stack.pool is None else stack.pool.statistics().interrupted
