"""The token client's CPU per request over real sockets: our HTTP/1.1 transport
(``httpgate.Http11Transport``, the default since it replaced httpcore) against httpx's
default transport (httpcore), the baseline, in the same run.

The same :class:`backends.TokenClient` makes each ``generate`` call (body encoding,
parsing, retries included); only the transport differs.  The server is
``benchmarks/rollout_overhead.py``'s, a separate process answering a 64-token
completion, so the process CPU time measured is the client's alone.  Runs are
interleaved (drift in machine load hits both) and the medians reported.

    .venv/bin/python benchmarks/http_client_cpu.py [--requests 4000] [--concurrency 64] [--repeats 3]

Prints one JSON line last: ``cpu_us_per_request`` (ours), ``httpx_cpu_us_per_request``,
``cpu_ratio_vs_httpx`` (ours / httpx, lower is better), requests/s of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends import SamplingParams, TokenClient
from benchmarks.rollout_overhead import SERVER, completion_body


async def measure(url: str, requests: int, concurrency: int, httpx_transport: bool) -> tuple[float, float]:
    """``(client CPU us per request, requests/s)``."""
    prompt = list(range(200))
    sampling = SamplingParams()
    limiter = anyio.Semaphore(concurrency)
    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=concurrency)) if httpx_transport else None

    async def one(client: TokenClient) -> None:
        async with limiter:
            await client.generate(prompt, max_tokens=64, sampling=sampling)

    async with TokenClient(url, model="m", max_connections=concurrency, transport=transport) as client:
        await one(client)  # connections, the context-length probe: not counted
        cpu, wall = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(one, client)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / requests * 1e6, requests / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(root=root, body=completion_body())], stdout=subprocess.PIPE, text=True)
    ours: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    try:
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"  # type: ignore[union-attr]
        for _ in range(args.repeats):
            base.append(anyio.run(measure, url, args.requests, args.concurrency, True, backend=args.backend))
            ours.append(anyio.run(measure, url, args.requests, args.concurrency, False, backend=args.backend))
    finally:
        server.terminate()
        server.wait()
    cpu, rps = statistics.median(c for c, _ in ours), statistics.median(r for _, r in ours)
    base_cpu, base_rps = statistics.median(c for c, _ in base), statistics.median(r for _, r in base)
    print(json.dumps({
        "benchmark": "http_client_cpu", "backend": args.backend, "requests": args.requests,
        "concurrency": args.concurrency, "load_avg_1m": os.getloadavg()[0],
        "cpu_us_per_request": round(cpu, 1), "httpx_cpu_us_per_request": round(base_cpu, 1),
        "cpu_ratio_vs_httpx": round(statistics.median(o[0] / b[0] for o, b in zip(ours, base)), 3),
        "requests_per_s": round(rps, 1), "httpx_requests_per_s": round(base_rps, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
