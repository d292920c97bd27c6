"""The runs of benchmarks/paper_scale.py, each one ``anyio.run`` returning its raw
figures: the engine over the pool and its doubles (:func:`pooled_run`), the bare
engine beside it (:func:`bare_run`), the same through a :class:`ShardedEngine`
(:func:`sharded_run`, its workers built by :func:`shard_stack`), and the admission
pass as the queue grows (:func:`admission_run`).  paper_scale.py repeats them and
assembles the figures it prints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.lowlevel
import msgspec
from _scale_doubles import (
    CAPACITY_TOKENS,
    GEN_TOKENS,
    TURNS,
    BareBackend,
    Doubles,
    GateFleet,
    Script,
    SimFleet,
    SleepSandbox,
    problem_text,
)
from _scale_probes import BASELINE_GC, AdmissionTimer, GcTimer, LoopQueue, StallMonitor

from backends import SamplingParams, ServerPool
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import (
    RolloutEngine,
    ShardedEngine,
    ShardSpec,
    ShardStack,
    Toolbox,
    load_tools,
)
from rstar2_async.testing import FakeByteTokenizer
from rstar2_async.types import Problem

SAMPLES: Final = 32

# The admission benchmark's doubles and trajectories.
GATE_CAPACITY: Final = 96_000
GATE_PROMPT: Final = 1000
GATE_TOOL_TOKENS: Final = 30
GATE_BUDGET: Final = 16_384
GREEDY: Final = SamplingParams(temperature=0.0)


def _pool(doubles: Doubles, admission: str, **kwargs: Any) -> ServerPool:
    pool = ServerPool(doubles.urls, model="m", transport=doubles, expected_new_tokens=GEN_TOKENS, **kwargs)
    if admission == "loop":
        pool._queue = LoopQueue(pool)  # type: ignore[assignment]
    return pool


def _setup(trajectories: int) -> tuple[FakeByteTokenizer, RolloutConfig, list[Problem], Script]:
    tokenizer = FakeByteTokenizer()
    config = RolloutConfig(max_in_flight=trajectories, max_turns=TURNS, max_response_tokens=16_384)
    toolbox = Toolbox(load_tools(config.tools), SleepSandbox())
    script = Script(tokenizer, config, toolbox)
    problems = [Problem(id=str(i), problem=problem_text(i), answer="42") for i in range(max(1, trajectories // SAMPLES))]
    return tokenizer, config, problems, script


# -- 1. the paper's scale ---------------------------------------------------------------


async def pooled_run(trajectories: int, servers: int) -> dict[str, Any]:
    tokenizer, config, problems, script = _setup(trajectories)
    fleet = SimFleet(script, servers, CAPACITY_TOKENS)
    monitor = StallMonitor()
    peak_waiting = 0
    async with _pool(fleet, "ours") as pool:
        timer = AdmissionTimer(pool, dispatcher=True)
        engine = RolloutEngine(backend=pool, sandbox=SleepSandbox(), config=config, tokenizer=tokenizer)

        async def watch() -> None:
            nonlocal peak_waiting
            while True:
                peak_waiting = max(peak_waiting, len(pool._queue))
                await asyncio.sleep(0.25)

        async with anyio.create_task_group() as tg:
            tg.start_soon(monitor.run)
            tg.start_soon(watch)
            own0, cpu0, t0 = fleet.own_ns, time.process_time(), time.perf_counter()
            with GcTimer() as collector:
                groups = await engine.run(problems, n=SAMPLES)
            wall, cpu, own = time.perf_counter() - t0, time.process_time() - cpu0, (fleet.own_ns - own0) / 1e9
            tg.cancel_scope.cancel()
        stats = pool.statistics()
    trajs = [t for g in groups for t in g.trajectories]
    assert all(t.finish_reason == "answer" for t in trajs), {t.finish_reason for t in trajs}
    turns = sum(t.num_turns for t in trajs)
    assert turns == len(trajs) * TURNS, turns
    served = sum(s.served for s in fleet.servers.values())
    return {
        "span": (t0, t0 + wall),  # perf_counter times: one clock for every process of the machine
        "wall_s": wall,
        "turns": turns,
        "turns_per_s": turns / wall,
        "cpu_us_per_turn": (cpu - own) / turns * 1e6,
        "cpu_us_per_turn_gross": cpu / turns * 1e6,
        "doubles_cpu_us_per_turn": own / turns * 1e6,
        "loop_busy": (cpu - own) / wall,
        "max_stall_ms": monitor.max_ms(),
        "max_stall_ms_steady": monitor.max_ms(after=t0 + 0.2 * wall),
        "max_stall_cpu_ms": monitor.max_cpu_ms(),
        "stalls_over_50ms": monitor.over(50.0),
        "process_busy": cpu / wall,
        "gc_collections": collector.count,
        "gc_longest_ms": collector.longest,
        "gc_us_per_turn": collector.total * 1e3 / turns,
        "admission_us_per_turn": timer.ns / 1e3 / turns,
        "dispatcher_us_per_turn": timer.dispatch_ns / 1e3 / turns,
        "admission_passes": timer.passes,
        "peak_waiting": peak_waiting,
        "mean_gen_s": fleet.gen_s / served,
        "blocked": stats.dispatch.blocked,
        "overflows": sum(s.overflows for s in fleet.servers.values()),
        "peak_kv": max(s.peak for s in fleet.servers.values()) / CAPACITY_TOKENS,
    }


async def bare_run(trajectories: int, gen_s: float) -> dict[str, Any]:
    tokenizer, config, problems, script = _setup(trajectories)
    monitor = StallMonitor()
    engine = RolloutEngine(backend=BareBackend(script, gen_s), sandbox=SleepSandbox(), config=config, tokenizer=tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        cpu0, t0 = time.process_time(), time.perf_counter()
        with GcTimer() as collector:
            groups = await engine.run(problems, n=SAMPLES)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        tg.cancel_scope.cancel()
    turns = sum(t.num_turns for g in groups for t in g.trajectories)
    return {
        "wall_s": wall,
        "turns": turns,
        "cpu_us_per_turn": cpu / turns * 1e6,
        "loop_busy": cpu / wall,
        "max_stall_ms": monitor.max_ms(),
        "max_stall_ms_steady": monitor.max_ms(after=t0 + 0.2 * wall),
        "gc_collections": collector.count,
        "gc_longest_ms": collector.longest,
    }



class ShardBench(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``--shards``: what each worker builds (``ShardSpec.config``)."""

    trajectories: int  # the whole run's
    servers: int  # the whole fleet's
    gc: str
    out: str  # where each worker writes its figures


@contextlib.asynccontextmanager
async def shard_stack(spec: ShardSpec) -> AsyncIterator[ShardStack]:
    """A worker of the sharded run (a :class:`ShardedEngine` factory): its share of the
    doubles, its pool and engine; its own figures (CPU, the doubles' share, stalls,
    collections, from its stack's start to its end) go to ``out`` when it closes."""
    bench = msgspec.json.decode(spec.config, type=ShardBench)
    if bench.gc != "ours":  # ours: the worker has tuned it (rollout/_shard_worker.py)
        BASELINE_GC[bench.gc]()
    tokenizer, config, _, script = _setup(bench.trajectories // spec.shards)
    fleet = SimFleet(script, len(spec.share(bench.servers)), CAPACITY_TOKENS)
    monitor = StallMonitor()
    async with _pool(fleet, "ours") as pool, anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        engine = RolloutEngine(backend=pool, sandbox=SleepSandbox(), config=config, tokenizer=tokenizer)
        own0, cpu0, t0 = fleet.own_ns, time.process_time(), time.perf_counter()
        with GcTimer() as collector:
            yield ShardStack(engine=engine, pool=pool)
        figures = {
            "turns": pool.statistics().turns,
            "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - cpu0,
            "own_s": (fleet.own_ns - own0) / 1e9,
            "max_stall_ms": monitor.max_ms(),
            "max_stall_cpu_ms": monitor.max_cpu_ms(),
            "gc_longest_ms": collector.longest,
        }
        Path(bench.out, f"shard{spec.shard}.json").write_text(json.dumps(figures))
        tg.cancel_scope.cancel()


async def sharded_run(trajectories: int, servers: int, shards: int, gc_mode: str, out: str) -> dict[str, Any]:
    """The whole run through a :class:`ShardedEngine` of ``shards`` workers (this
    process routes the problems and gathers the groups); its own figures."""
    bench = msgspec.json.encode(ShardBench(trajectories=trajectories, servers=servers, gc=gc_mode, out=out))
    specs = [ShardSpec(factory="_scale_runs:shard_stack", config=bench, shard=i, shards=shards) for i in range(shards)]
    _, _, problems, _ = _setup(trajectories)
    monitor = StallMonitor()
    t_start = time.perf_counter()
    async with ShardedEngine(specs) as engine, anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        start_s = time.perf_counter() - t_start
        cpu0, t0 = time.process_time(), time.perf_counter()
        groups = await engine.run(problems, n=SAMPLES)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        tg.cancel_scope.cancel()
    turns = sum(t.num_turns for g in groups for t in g.trajectories)
    assert turns == trajectories // SAMPLES * SAMPLES * TURNS, turns
    return {
        "turns": turns,
        "wall_s": wall,
        "cpu_s": cpu,
        "max_stall_ms": monitor.max_ms(),
        "max_stall_cpu_ms": monitor.max_cpu_ms(),
        "start_s": start_s,
    }


# -- 2. the admission pass as the queue grows ---------------------------------------------


async def admission_run(waiting: int, servers: int, admission: str, releases: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    fleet = GateFleet(servers, GATE_CAPACITY)
    total = 0
    started = 0
    tool = [7] * GATE_TOOL_TOKENS

    async def trajectory(ident: int, turn: int) -> None:
        nonlocal started
        ids = [5] * (GATE_PROMPT + turn * (GEN_TOKENS + GATE_TOOL_TOKENS))
        generated = turn * GEN_TOKENS
        for _ in range(turn, TURNS):
            c = await pool.generate(ids, max_tokens=GATE_BUDGET - generated, sampling=GREEDY, session=ident)
            generated += len(c.token_ids)
            ids = ids + c.token_ids + tool
        pool.end_session(ident)
        started += 1
        tg.start_soon(trajectory, started, 0)  # the next one takes its place: as many wait

    async def settle() -> None:
        for _ in range(100_000):
            if len(fleet.running) + len(pool._queue) == total:
                return
            await anyio.lowlevel.checkpoint()
        raise RuntimeError("the doubles and the queue did not settle")

    pool = _pool(fleet, admission, poll_interval_s=3600.0)
    async with pool, contextlib.AsyncExitStack() as stack, anyio.create_task_group() as tg:
        # Fill the fleet, then queue ``waiting`` more turns (a random turn of 11 each).
        while not pool.statistics().waiting:
            total = started = started + 1
            tg.start_soon(trajectory, started, rng.randrange(TURNS))
            await settle()
        in_flight = len(fleet.running)
        for _ in range(waiting - 1):
            total = started = started + 1
            tg.start_soon(trajectory, started, rng.randrange(TURNS))
        await settle()
        for _ in range(releases // 4):  # warm-up
            fleet.release(rng)
            await settle()
        timer = AdmissionTimer(pool)
        queued = 0
        dispatched0 = pool.statistics().dispatch.dispatched
        for _ in range(releases):
            fleet.release(rng)
            await settle()
            queued += len(pool._queue)
        ns, passes, stats = timer.ns, timer.passes, pool.statistics()
        await stack.enter_async_context(pool.held())  # no passes as the turns in flight are cancelled
        tg.cancel_scope.cancel()
    return {
        "us_per_release": ns / 1e3 / releases,
        "us_per_pass": ns / 1e3 / max(1, passes),
        "passes_per_release": passes / releases,
        "admitted_per_release": (stats.dispatch.dispatched - dispatched0) / releases,
        "mean_waiting": queued / releases,
        "in_flight": in_flight,
        "dispatch": [(s.dispatched, s.reserved_tokens, s.held_tokens) for s in stats.dispatch.servers],
    }
