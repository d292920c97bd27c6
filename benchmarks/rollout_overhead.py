"""How much the rollout engine itself costs.

1. ``ratio_to_ideal``: N concurrent trajectories of 4 turns against an in-process
   backend double (fixed 200 ms per generation) and a sandbox double (fixed 50 ms per
   tool call).  The ideal wall time is 4 x 250 ms; everything above it is the
   orchestrator's overhead.  ``cpu_us_per_turn`` is the process CPU time per turn.
   Measured on each loop (``_uvloop``, ``_asyncio``, ``_trio`` keys); the unsuffixed
   keys are uvloop's, the loop the rstar2 commands run on (``rstar2_async.rollout.RUN_OPTIONS``).
2. ``client_vs_httpx``: requests/s of our TokenClient (answers whole) against bare
   httpx posting the same body to the same local server (a separate process), in
   the same run.
3. ``turn_cpu_us_streamed`` / ``turn_cpu_us_whole``: the token client's CPU per
   240-token turn (the client process's alone; the server is another process),
   streamed as the pool asks (vLLM's chunks: the first token, then
   ``STREAM_INTERVAL`` tokens a chunk, each its own HTTP chunk 1 ms after the last,
   as a decoding server sends them) and answered whole (the client before
   streaming), and ``turn_cpu_us_every_token`` (a chunk a token: without
   ``stream_interval``); ``stream_cpu_ratio`` = streamed / whole.  Interleaved
   repeats, medians.
4. ``rss_kib_per_trajectory``: peak RSS growth per in-flight trajectory.

Prints JSON on its last line.  Run: ``.venv/bin/python benchmarks/rollout_overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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
TURN_TOKENS = 240
"""A turn's tokens in the streaming comparison (``benchmarks/paper_scale.py``'s short turn)."""
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


STREAM_SERVER = """
import anyio, sys
sys.path.insert(0, {root!r})
import msgspec
from rstar2_async.testing import FakeRawServer, completion_events, raw_head
ANSWER = msgspec.json.decode({body!r})
WHOLE = msgspec.json.encode(ANSWER)
EVENTS = {{}}
async def answer(stream, request, body):
    if not request.target.endswith(b"/completions"):
        await stream.send(raw_head(404, 2) + b"{{}}")
        return True
    asked = msgspec.json.decode(body)
    if not asked.get("stream"):
        await stream.send(raw_head(200, len(WHOLE)) + WHOLE)
        return True
    interval = asked.get("stream_interval", 1)
    events = EVENTS.get(interval) or EVENTS.setdefault(interval, completion_events(ANSWER, interval) + [b"data: [DONE]\\n\\n"])
    await stream.send(b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\ntransfer-encoding: chunked\\r\\n\\r\\n")
    for event in events:
        await anyio.sleep(0.001)  # a decoding server: the chunks come apart
        await stream.send(b"%x\\r\\n%s\\r\\n" % (len(event), event))
    await stream.send(b"0\\r\\n\\r\\n")
    return True
async def main():
    server = FakeRawServer(answer)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        print(server.port, flush=True)
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
        async with TokenClient(url, model="m", max_connections=concurrency, stream=False) as client, anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(wrapped, client)
    else:
        async with httpx.AsyncClient(base_url=url, limits=limits) as client, anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(bare, client)
    return requests / (time.perf_counter() - t0)


async def turn_cpu_us(url: str, requests: int, concurrency: int, mode: str) -> float:
    """The client's CPU per turn (us): ``whole``, ``streamed`` (STREAM_INTERVAL) or ``every_token``."""
    prompt = list(range(1100))
    limiter = anyio.Semaphore(concurrency)
    sampling = SamplingParams()

    async def one(client: TokenClient) -> None:
        async with limiter:
            c = await client.generate(prompt, max_tokens=1024, sampling=sampling)
            assert len(c.token_ids) == TURN_TOKENS and c.finish_reason == "stop", (len(c.token_ids), c.finish_reason)

    async with TokenClient(url, model="m", max_connections=concurrency, stream=mode != "whole") as client:
        if mode == "every_token":
            client._body = functools.partial(_every_token_body, client._body)  # type: ignore[method-assign]
        await one(client)  # connections, the context-length probe: not counted
        cpu = time.process_time()
        async with anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(one, client)
        return (time.process_time() - cpu) / requests * 1e6


def _every_token_body(body: Callable[..., bytes], *args: object) -> bytes:
    """The request without ``stream_interval``: vLLM's default, a chunk a token."""
    request = json.loads(body(*args))
    del request["stream_interval"]
    return json.dumps(request).encode()


def stream_comparison(requests: int, concurrency: int, repeats: int) -> dict:
    root = str(Path(__file__).resolve().parents[1])
    answer = json.loads(completion_body(TURN_TOKENS))
    answer["choices"][0]["prompt_token_ids"] = list(range(1100))  # vLLM repeats the prompt (in the first chunk)
    code = STREAM_SERVER.format(root=root, body=json.dumps(answer).encode())
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    runs: dict[str, list[float]] = {"whole": [], "streamed": [], "every_token": []}
    try:
        url = f"http://127.0.0.1:{proc.stdout.readline().strip()}/v1"  # type: ignore[union-attr]
        for _ in range(repeats):  # interleaved, so drift in machine load hits all
            for mode in runs:
                runs[mode].append(anyio.run(turn_cpu_us, url, requests, concurrency, mode, backend_options=RUN_OPTIONS))
    finally:
        proc.terminate()
        proc.wait()
    out = {f"turn_cpu_us_{mode}": round(statistics.median(v), 1) for mode, v in runs.items()}
    out["stream_cpu_ratio"] = round(statistics.median(s / w for s, w in zip(runs["streamed"], runs["whole"])), 3)
    return out


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
    parser.add_argument("--stream-requests", type=int, default=1000, help="turns per run of the streaming comparison")
    parser.add_argument("--only-stream", action="store_true", help="only the streaming comparison")
    args = parser.parse_args()
    tune_gc()  # as the rstar2 commands that run rollouts do
    result: dict = {"trajectories": args.trajectories, "turns_per_trajectory": TURNS, "load_avg_1m": os.getloadavg()[0]}
    if not args.only_stream:
        for loop, (backend, options) in LOOPS.items():
            runs = [anyio.run(engine_run, args.trajectories, backend, backend=backend, backend_options=options)
                    for _ in range(args.repeats)]
            for key in ("ratio_to_ideal", "cpu_us_per_turn", "rss_kib_per_trajectory"):
                result[f"{key}_{loop}"] = round(statistics.median(r[key] for r in runs), 3)
            print(json.dumps({"loop": loop, "runs": runs}), file=sys.stderr)
        for key in ("ratio_to_ideal", "cpu_us_per_turn", "rss_kib_per_trajectory"):
            result[key] = result[f"{key}_uvloop"]  # the loop the rstar2 commands run on
        result.update({k: round(v, 3) for k, v in client_comparison(args.requests, args.concurrency, args.repeats).items()})
    result.update(stream_comparison(args.stream_requests, args.concurrency, args.repeats))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
