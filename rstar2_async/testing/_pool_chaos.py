"""The inference ServerPool under chaos (benchmarks/pool_chaos.py and its short test run it):
4 in-process server doubles that die, hang, answer garbage and come back, while
trajectories of several turns run through the pool.

Each double is a real HTTP server on 127.0.0.1 (``httpgate.HTTPServer``) speaking
the part of vLLM the pool uses (``/v1/completions`` with token ids, ``/metrics``).
It answers each token as its absolute position in the sequence, streamed in chunks
(the first token, then the rest of the turn), so a trajectory whose tokens are not exactly ``0, 1, 2, ...`` lost or
repeated part of a turn (a turn that fails over mid-stream goes on from the tokens
it has: ``tokens_kept``).
A chaos task, every 0.2 s, puts one server (never more than 3 at once) into a
fault for 0.3-1.5 s: ``dead`` (port closed, connections in flight cut), ``hang``
(requests and polls never answered: the pool's ``stall_timeout_s`` moves them), ``garbage`` (200 with an undecodable body)
or ``error`` (500), then brings it back.

Invariants (keys of :func:`pool_chaos`'s result): ``lost`` (trajectories that failed,
did not finish in the time budget, or have a gap in their tokens), ``duplicated``
(finished twice, or a token repeated).  If a run outlives its budget by a minute it
prints where its turns wait, its counts so far (the stuck ones lost) and exits 3.
"""

from __future__ import annotations

import errno
import json
import os
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import msgspec

from backends import RetryPolicy, SamplingParams, ServerPool, ServerUnavailable
from httpgate import HTTPLimits, HTTPRequest, HTTPResponse, HTTPServer

from ._sse import DONE, completion_events

__all__ = ["pool_chaos"]

FAULTS = ("dead", "hang", "garbage", "error")
TURN_TOKENS = 8
"""Tokens per turn (each server answers all of them)."""
TOOL_TOKENS = 2
"""Tokens the 'tool' appends between turns."""
PROMPT = 4
_METRICS = b'vllm:cache_config_info{kv_cache_size_tokens="200000"} 1.0\nvllm:num_requests_running 0\n'
_decode = msgspec.json.Decoder(dict).decode
_encode = msgspec.json.Encoder().encode


class FakeChaosServer:
    """A vLLM double on 127.0.0.1; ``fault`` changes how it answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.fault: str | None = None
        self.back = anyio.Event()  # hung requests wait for it
        self.requests = 0

    async def handle(self, request: HTTPRequest) -> HTTPResponse:
        if self.fault == "hang":
            await self.back.wait()
        if request.path == b"/metrics":
            return HTTPResponse(200, _METRICS, b"text/plain")
        if request.path == b"/v1/models":  # asked once per client: no context length to clamp to
            return HTTPResponse(200, b'{"data": []}')
        self.requests += 1
        body = _decode(request.body)
        stream = body.get("stream", False)
        if self.fault == "garbage":
            return HTTPResponse(200, b'%s{"choices": [{"token_ids": [1, 2], "logprobs": nul' % (b"data: " if stream else b""))
        if self.fault == "error":
            return HTTPResponse(500, b'{"error": "injected"}')
        start = len(body["prompt"])
        ids = list(range(start, start + min(body["max_tokens"], TURN_TOKENS)))
        choice = {"token_ids": ids, "text": "", "logprobs": {"token_logprobs": [0.0] * len(ids)}, "finish_reason": "stop"}
        if stream:  # in chunks as vLLM cuts them
            events = completion_events({"choices": [choice]}, body.get("stream_interval", 1))
            return HTTPResponse(200, b"", b"text/event-stream", stream=self._stream(events))
        return HTTPResponse(200, _encode({"choices": [choice]}))

    async def _stream(self, events: list[bytes]) -> AsyncIterator[bytes]:
        """The events one by one, so that faults strike mid-answer: a hang stops the
        stream, death or an error cuts it."""
        for i, event in enumerate(events):
            await anyio.lowlevel.checkpoint()  # the chaos task may strike here
            if self.fault == "hang":
                await self.back.wait()
            if self.fault in ("dead", "error"):
                raise OSError(f"{self.fault} mid-stream")
            yield event + DONE if i == len(events) - 1 else event

    async def run(self) -> None:
        """Serve, going down while ``dead`` (the port closes, connections are cut)."""
        limits = HTTPLimits(max_connections=4096, idle_timeout_s=600.0)
        while True:
            taken = False
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(HTTPServer(self.handle, port=self.port, limits=limits).serve)
                    while self.fault != "dead":
                        await self.back.wait()
                    tg.cancel_scope.cancel()
            except* OSError as group:
                if any(getattr(e, "errno", None) != errno.EADDRINUSE for e in group.exceptions):
                    raise
                taken = True
            if taken:  # another socket took its port while it was down (as its own ephemeral port): down longer
                await anyio.sleep(0.05)
                continue
            while self.fault == "dead":
                await self.back.wait()

    def set_fault(self, fault: str | None) -> None:
        self.fault = fault
        self.back.set()  # wake hung requests and the serve loop; they re-check the fault
        self.back = anyio.Event()


async def _chaos(servers: list[FakeChaosServer], rng: random.Random, counts: dict[str, int]) -> None:
    async def one(server: FakeChaosServer, fault: str, duration: float) -> None:
        server.set_fault(fault)
        counts[fault] += 1
        await anyio.sleep(duration)
        server.set_fault(None)

    async with anyio.create_task_group() as tg:
        while True:  # the first strike at once: a short run on a fast machine sees chaos too
            healthy = [s for s in servers if s.fault is None]
            if len(healthy) > 1:
                tg.start_soon(one, rng.choice(healthy), rng.choice(FAULTS), rng.uniform(0.3, 1.5))
            await anyio.sleep(0.2)


async def _report_stuck(after_s: float, report: Callable[[], dict]) -> None:
    """If the run outlives its budget by a minute, some turns are stuck where no
    cancellation reaches them (seen: inside httpx/httpcore, see the module docstring):
    print where they wait (asyncio) and the counts so far, then end the process, since
    the run cannot end by itself."""
    await anyio.sleep(after_s)
    import asyncio

    stuck = 0
    for task in asyncio.all_tasks():
        coro, frames = task.get_coro(), []
        while coro is not None and (frame := getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)):
            frames.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}:{frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if any("trajectory" in f for f in frames):
            stuck += 1
            print("stuck:", " > ".join(frames), file=sys.stderr, flush=True)
    print(json.dumps({**report(), "stuck": stuck, "error": "trajectories stuck past cancellation"}), flush=True)
    os._exit(3)


async def pool_chaos(
    trajectories: int, *, turns: int = 3, chaos: bool = True, concurrency: int = 128, time_budget_s: float = 240.0,
    seed: int = 0,
) -> dict:  # fmt: skip
    """Run ``trajectories`` through a pool of 4 doubles; the invariant counts and rates."""
    rng = random.Random(seed)
    ports = []
    for _ in range(4):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        ports.append(listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.aclose()
    servers = [FakeChaosServer(p) for p in ports]
    finished: dict[int, int] = {}
    tokens: dict[int, list[int]] = {}
    failed: dict[int, str] = {}
    latencies: list[float] = []
    faults = dict.fromkeys(FAULTS, 0)
    limit = anyio.CapacityLimiter(concurrency)

    async def trajectory(pool: ServerPool, i: int) -> None:
        async with limit:
            t0 = time.monotonic()
            seq = list(range(PROMPT))
            try:
                for _ in range(turns):
                    completion = await pool.generate(seq, max_tokens=TURN_TOKENS, sampling=SamplingParams(), session=i)
                    seq += completion.token_ids
                    seq += list(range(len(seq), len(seq) + TOOL_TOKENS))
            except ServerUnavailable as e:
                failed[i] = str(e)
                return
            tokens[i] = seq
            finished[i] = finished.get(i, 0) + 1
            latencies.append(time.monotonic() - t0)

    pools: list[ServerPool] = []

    def report(elapsed: float) -> dict:
        stats = pools[0].statistics()
        expected = PROMPT + turns * (TURN_TOKENS + TOOL_TOKENS)
        gaps = [i for i, seq in tokens.items() if seq != list(range(expected))]
        repeated = [i for i in gaps if len(set(tokens[i])) < len(tokens[i])]
        lost = (trajectories - len(finished)) + len([i for i in gaps if i not in repeated])
        return {
            "trajectories": trajectories,
            "finished": len(finished),
            "lost": lost,
            "duplicated": sum(n - 1 for n in finished.values()) + len(repeated),
            "failed": len(failed),
            "first_failure": next(iter(failed.values()), None),
            "trajectories_per_s": round(len(finished) / elapsed, 1),
            "p50_s": round(statistics.median(latencies), 4) if latencies else None,
            "p99_s": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))], 4) if latencies else None,
            "failovers": stats.failovers,
            "stalls": stats.stalls,
            "tokens_kept": stats.tokens_kept,
            "servers_lost": stats.servers_lost,
            "servers_back": stats.servers_back,
            "faults": faults,
            "elapsed_s": round(elapsed, 1),
        }

    started = time.monotonic()
    async with anyio.create_task_group() as world:
        for server in servers:
            world.start_soon(server.run)
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        with anyio.fail_after(30):
            for port in ports:  # the servers are listening before the pool's first poll
                while True:
                    try:
                        await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                        break
                    except OSError:
                        await anyio.sleep(0.01)
        async with ServerPool(
            urls, model="m", poll_interval_s=0.1, stall_timeout_s=1.0, unavailable_timeout_s=60.0, max_failovers=50,
            retry=RetryPolicy(max_retries=1, initial_s=0.05, max_s=0.2),
        ) as pool:  # fmt: skip
            pools.append(pool)
            if chaos:
                world.start_soon(_chaos, servers, rng, faults)
            if _on_asyncio():
                world.start_soon(_report_stuck, time_budget_s + 60, lambda: report(time.monotonic() - started))
            with anyio.move_on_after(time_budget_s):
                async with anyio.create_task_group() as tg:
                    for i in range(trajectories):
                        tg.start_soon(trajectory, pool, i)
        world.cancel_scope.cancel()
    return report(time.monotonic() - started)


def _on_asyncio() -> bool:
    import sniffio

    return sniffio.current_async_library() == "asyncio"
