"""A rollout shard (``rollout.shards = N``): what each of the N worker processes of a
:class:`~rstar2_async.rollout.ShardedEngine` builds, and the specs that tell it.

Every worker gets the same :class:`ShardStackConfig` (the run's sections as they
are) and takes its share itself (:func:`make`):

- servers: fleet server ``i`` goes to worker ``i mod N``, in fleet order
  (``ShardSpec.share``: the mapping the sharded engine's ``set_weight_version`` uses);
- ``rollout.max_in_flight``, ``sandbox.workers`` and ``reward.workers``:
  ``ceil(x / N)`` each (:func:`rstar2_async.config.shard_share`), so no bound of
  the run is lowered by the split; ``sandbox.spares`` stays per worker.

The worker's pool generates; it is moved by the run's weight sync in the parent
(which holds admission in every worker and tells them each new version), and it
lets a server back into rotation only once the server reports the version the
workers were told (:func:`backends.follow_versions`): a server that restarted on
older weights is loaded by the parent's pool first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Final

import msgspec

from backends import follow_versions
from sandbox import SandboxConfig

from ..config import ConfigError, InferenceConfig, PoolConfig, RewardConfig, RolloutConfig, check_shards, shard_share
from ..rollout import HFChatTokenizer, ShardSpec, ShardStack
from ._builders import Engine, rollout_engine, server_pool

__all__ = ["FACTORY", "ShardStackConfig", "make", "shard_specs"]

FACTORY: Final = f"{__name__}:make"
"""The factory every worker loads (:class:`ShardSpec`'s ``factory``)."""


class ShardStackConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Parent -> every worker (msgspec JSON in :class:`ShardSpec`'s ``config``): the
    run's rollout sections, whole; each worker takes its share (module docstring).
    No secret travels: the worker reads ``inference.api_key_file`` or
    ``$inference.api_key_env`` itself (it inherits the environment)."""

    rollout: RolloutConfig
    """``shards`` is the number of workers (the spec's ``shards`` too)."""
    inference: InferenceConfig
    """Token mode; ``base_urls``: every server of the fleet, in fleet order."""
    engine: Engine
    """What the servers speak."""
    pool: PoolConfig
    sandbox: SandboxConfig
    reward: RewardConfig
    tokenizer_dir: str
    """The model's tokenizer (each worker loads its own)."""


_decoder = msgspec.json.Decoder(ShardStackConfig)


def shard_specs(config: ShardStackConfig) -> list[ShardSpec]:
    """One spec per worker of ``config.rollout.shards``.

    Raises:
        ConfigError: more workers than servers.
    """
    shards = config.rollout.shards
    try:
        check_shards(shards, len(config.inference.base_urls), "inference.base_urls")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    data = msgspec.json.encode(config)
    return [ShardSpec(factory=FACTORY, config=data, shard=k, shards=shards) for k in range(shards)]


@asynccontextmanager
async def make(spec: ShardSpec) -> AsyncIterator[ShardStack]:
    """The worker's stack: its pool over its servers, sandbox workers, grader and
    engine, all closed when the block ends.

    Raises:
        msgspec.ValidationError: ``spec.config`` is not a :class:`ShardStackConfig`.
        PluginError, sandbox.SandboxBroken, GraderBrokenError: as ``rollout_stack``.
    """
    c = _decoder.decode(spec.config)
    n = spec.shards
    urls = c.inference.base_urls
    inference = msgspec.structs.replace(c.inference, base_urls=[urls[i] for i in spec.share(len(urls))])
    rollout = msgspec.structs.replace(c.rollout, shards=0, max_in_flight=shard_share(c.rollout.max_in_flight, n))
    sandbox = msgspec.structs.replace(c.sandbox, workers=shard_share(c.sandbox.resolved_workers, n))
    reward = msgspec.structs.replace(c.reward, workers=shard_share(c.reward.workers, n))
    async with AsyncExitStack() as stack:
        tokenizer = HFChatTokenizer.from_pretrained(c.tokenizer_dir, chat_template=c.rollout.chat_template)
        pool = await stack.enter_async_context(server_pool(inference, c.pool, c.engine))
        follow_versions(pool)
        engine, _ = await rollout_engine(
            stack, backend=pool, tokenizer=tokenizer, rollout=rollout, sandbox=sandbox, reward=reward
        )
        yield ShardStack(engine=engine, pool=pool)
