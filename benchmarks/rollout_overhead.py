"""How much the rollout engine itself costs.

1. ``ratio_to_ideal``: N concurrent trajectories of 4 turns against an in-process
   backend double (fixed 200 ms per generation) and a sandbox double (fixed 50 ms per
   tool call).  The ideal wall time is 4 x 250 ms; everything above it is the
   orchestrator's overhead.  ``cpu_us_per_turn`` is the process CPU time per turn.
   Measured on each loop (``_uvloop``, ``_asyncio``, ``_trio`` keys); the unsuffixed
   keys are uvloop's, the loop the rstar2 commands run on (``rstar2_async.rollout.RUN_OPTIONS``).
2. ``client_vs_httpx``: requests/s of our TokenClient against bare httpx posting the
   same body to the same local server (a separate process), in the same run.
3. ``rss_kib_per_trajectory``: peak RSS growth per in-flight trajectory.

Prints JSON on its last line.  Run: ``.venv/bin/python benchmarks/rollout_overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends import Completion, SamplingParams, TokenClient  # noqa: E402
from rstar2_async.config import RolloutConfig  # noqa: E402
from rstar2_async.rollout import RUN_OPTIONS, RolloutEngine, Toolbox, load_tools, problem_messages, tune_gc  # noqa: E402
from rstar2_async.testing import IM_END, FakeByteTokenizer  # noqa: E402
from rstar2_async.types import Problem  # noqa: E402
from sandbox import ExecResult  # noqa: E402

GEN_S, TOOL_S, TURNS = 0.2, 0.05, 4
LOOPS = {"uvloop": ("asyncio", RUN_OPTIONS), "asyncio": ("asyncio", {}), "trio": ("trio", {})}
CALL = '<tool_call>{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(6*7)"}}</tool_call>'


def native_sleep(backend: str) -> Callable[[float], Awaitable[None]]:
    """The loop's own sleep.  The doubles stand in for network and sandbox waits,
    which cost the orchestrator one wakeup each; ``anyio.sleep`` would add its
    per-call loop detection to that, a cost of the double, not of the engine."""
    if backend == "trio":
        import trio

        return trio.sleep
    return asyncio.sleep


class FixedLatencyBackend:
    """Backend double: every generation takes GEN_S; turns 1-3 call the tool, turn 4 answers."""

    def __init__(self, tokenizer: FakeByteTokenizer, prompt_len: int, backend: str) -> None:
        self.sleep = native_sleep(backend)
        call = tokenizer._encode_text("Let me compute.\n" + CALL, specials=False) + [IM_END]
        answer = tokenizer._encode_text("<answer>\\boxed{42}</answer>", specials=False) + [IM_END]
        self.call = Completion(call, [-0.1] * len(call), "stop")
        self.answer = Completion(answer, [-0.1] * len(answer), "stop")
        tool_turn = tokenizer.encode_tool_turn(["42"])
        # Every prompt has the same length, so the turn number follows from it in O(1).
        self.last_turn_len = prompt_len + (TURNS - 1) * (len(call) + len(tool_turn))

    async def generate(self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: object = None) -> Completion:
        await self.sleep(GEN_S)
        return self.answer if len(prompt_ids) >= self.last_turn_len else self.call


class FixedLatencySandbox:
    def __init__(self, backend: str) -> None:
        self.sleep = native_sleep(backend)

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        await self.sleep(TOOL_S)
        return ExecResult("ok", "42\n", "", 0, TOOL_S)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


async def engine_run(n: int, backend: str) -> dict:
    tokenizer = FakeByteTokenizer()
    config = RolloutConfig(max_in_flight=n, max_turns=TURNS)
    problems = [Problem(id=str(i), problem=f"What is 6*7? ({i:06d})", answer="42") for i in range(n)]
    toolbox = Toolbox(load_tools(config.tools), FixedLatencySandbox(backend))
    prompt_len = len(tokenizer.encode_prompt(problem_messages(problems[0], config, toolbox)))
    engine = RolloutEngine(
        backend=FixedLatencyBackend(tokenizer, prompt_len, backend),
        sandbox=FixedLatencySandbox(backend),
        config=config,
        tokenizer=tokenizer,
    )
    rss0 = _rss_kib("VmRSS")
    cpu0, t0 = time.process_time(), time.perf_counter()
    groups = await engine.run(problems, n=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    turns = sum(t.num_turns for g in groups for t in g.trajectories)
    assert turns == n * TURNS, turns
    assert all(t.finish_reason == "answer" for g in groups for t in g.trajectories)
    return {
        "wall_s": wall,
        "ratio_to_ideal": wall / (TURNS * (GEN_S + TOOL_S)),
        "cpu_us_per_turn": cpu / turns * 1e6,
        "rss_kib_per_trajectory": (_rss_kib("VmHWM") - rss0) / n,
    }


SERVER = """
import anyio, sys
sys.path.insert(0, {root!r})
from rstar2_async.testing import serve_http
BODY = {body!r}
async def handler(method, path, body):
    return 200, BODY
async def main():
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, handler)
        print(port, flush=True)
anyio.run(main)
"""


def completion_body(k: int = 64) -> bytes:
    ids = list(range(100, 100 + k))
    return json.dumps({"choices": [{"index": 0, "text": "x" * k, "token_ids": ids, "finish_reason": "stop",
                                    "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * k}}]}).encode()


async def requests_per_s(url: str, requests: int, concurrency: int, ours: bool) -> float:
    prompt = list(range(200))
    limiter = anyio.Semaphore(concurrency)
    sampling = SamplingParams()

    async def bare(client: httpx.AsyncClient) -> None:
        async with limiter:
            r = await client.post("/completions", json={"model": "m", "prompt": prompt, "max_tokens": 64, "logprobs": 0})
            r.raise_for_status()
            r.json()["choices"][0]["token_ids"]

    async def wrapped(client: TokenClient) -> None:
        async with limiter:
            await client.generate(prompt, max_tokens=64, sampling=sampling)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    t0 = time.perf_counter()
    if ours:
        async with TokenClient(url, model="m", max_connections=concurrency) as client, anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(wrapped, client)
    else:
        async with httpx.AsyncClient(base_url=url, limits=limits) as client, anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(bare, client)
    return requests / (time.perf_counter() - t0)


def client_comparison(requests: int, concurrency: int, repeats: int) -> dict:
    root = str(Path(__file__).resolve().parents[1])
    code = SERVER.format(root=root, body=completion_body())
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{proc.stdout.readline().strip()}/v1"  # type: ignore[union-attr]
        ours, bare = [], []
        for _ in range(repeats):  # interleaved, so drift in machine load hits both
            bare.append(anyio.run(requests_per_s, url, requests, concurrency, False))
            ours.append(anyio.run(requests_per_s, url, requests, concurrency, True))
    finally:
        proc.terminate()
        proc.wait()
    return {
        "client_rps_median": statistics.median(ours),
        "httpx_rps_median": statistics.median(bare),
        "client_vs_httpx": statistics.median(o / b for o, b in zip(ours, bare)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    tune_gc()  # as the rstar2 commands that run rollouts do
    result: dict = {"trajectories": args.trajectories, "turns_per_trajectory": TURNS, "load_avg_1m": os.getloadavg()[0]}
    for loop, (backend, options) in LOOPS.items():
        runs = [anyio.run(engine_run, args.trajectories, backend, backend=backend, backend_options=options)
                for _ in range(args.repeats)]
        for key in ("ratio_to_ideal", "cpu_us_per_turn", "rss_kib_per_trajectory"):
            result[f"{key}_{loop}"] = round(statistics.median(r[key] for r in runs), 3)
        print(json.dumps({"loop": loop, "runs": runs}), file=sys.stderr)
    for key in ("ratio_to_ideal", "cpu_us_per_turn", "rss_kib_per_trajectory"):
        result[key] = result[f"{key}_uvloop"]  # the loop the rstar2 commands run on
    result.update({k: round(v, 3) for k, v in client_comparison(args.requests, args.concurrency, args.repeats).items()})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
