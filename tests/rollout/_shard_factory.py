"""A shard factory for the tests: in the worker, a real RolloutEngine and ServerPool
over vLLM doubles (real HTTP on localhost), the in-process sandbox double and the
exact-match grader double.

Knobs (:class:`FactoryConfig`, JSON in ``ShardSpec.config``): ``fail`` makes the
factory raise; while ``stall_file`` exists, every sample of a problem whose text
holds "slow" but the first to ask (in this worker) does not answer its first turn.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec

from backends import ServerPool, follow_versions
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import RolloutEngine, ShardSpec, ShardStack
from rstar2_async.testing import (
    FakeByteTokenizer,
    FakeExactReward,
    FakeModelServer,
    FakeSandbox,
    FakeVLLM,
    last_user_message,
    serve_http,
)


class FactoryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    servers: int = 2
    """Servers of the whole fleet; each worker serves its share."""
    max_in_flight: int = 8
    fail: str = ""
    stall_file: str = ""
    follow: bool = False
    """The pool follows another's versions (``backends.follow_versions``), as a
    training run's workers do."""
    gc_probe: str = ""
    """A path: the factory writes the collector's settings to ``<path>.json`` and
    leaves a cycle that a collection has frozen as garbage, whose finalizer writes
    ``<path>.collected``."""


class FakeStallingModel(FakeModelServer):
    """The scripted model, stalling all but the first sample of "slow" problems while a
    file exists (``slow_asked``, shared by the worker's models, counts their first turns)."""

    stall_file: str = ""
    slow_asked: list[int]

    async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if body and self.stall_file and path == "/v1/completions":
            conversation = self.tokenizer.decode(json.loads(body)["prompt"])
            if "slow" in conversation and "<tool_response>" not in last_user_message(conversation):  # a first turn
                self.slow_asked[0] += 1
                while self.slow_asked[0] > 1 and os.path.exists(self.stall_file):
                    await anyio.sleep(0.01)  # a double polling the test's file, not a test ordering events
        return await super().__call__(method, path, body)


def spec(shard: int, shards: int, **config: object) -> ShardSpec:
    return ShardSpec(
        factory="tests.rollout._shard_factory:make",
        config=msgspec.json.encode(FactoryConfig(**config)),  # type: ignore[arg-type]
        shard=shard,
        shards=shards,
    )


@asynccontextmanager
async def make(spec: ShardSpec) -> AsyncIterator[ShardStack]:
    config = msgspec.json.decode(spec.config, type=FactoryConfig)
    if config.fail:
        print(f"factory of shard {spec.shard}: failing on purpose", file=sys.stderr, flush=True)
        raise RuntimeError(config.fail)
    if config.gc_probe:
        _probe_collector(config.gc_probe)
    models = [FakeStallingModel() for _ in spec.share(config.servers)]
    slow_asked = [0]
    for model in models:
        model.stall_file, model.slow_asked = config.stall_file, slow_asked
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, FakeVLLM(model)) for model in models]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        async with ServerPool(urls, model="m", poll_interval_s=0.05) as pool:
            if config.follow:
                follow_versions(pool)
            engine = RolloutEngine(
                backend=pool,
                sandbox=FakeSandbox(),
                config=RolloutConfig(max_in_flight=config.max_in_flight),
                tokenizer=FakeByteTokenizer(),
                reward=FakeExactReward(),
            )
            yield ShardStack(engine=engine, pool=pool)
        tg.cancel_scope.cancel()


def _probe_collector(path: str) -> None:
    settings = {"threshold": gc.get_threshold(), "callbacks": [c.__qualname__ for c in gc.callbacks]}
    Path(path + ".json").write_text(json.dumps(settings))
    cycle: list[object] = []
    cycle.append(cycle)
    weakref.finalize(_Box(cycle), Path(path + ".collected").touch)
    gc.collect()  # survived: frozen by the worker's collector, if tuned
    del cycle  # garbage now, which only a full collection of the frozen finds


class _Box:
    """A weakly referenceable part of the cycle (a list is not)."""

    def __init__(self, cycle: list[object]) -> None:
        self.cycle = cycle
        cycle.append(self)
