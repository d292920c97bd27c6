"""The sandbox service under load and chaos: N workers, 16 concurrent clients, mixed
calls, while a chaos task SIGKILLs a random worker every second and SIGSTOPs one every 5 s.

    .venv/bin/python benchmarks/sandbox_soak.py [--workers 4] [--calls 20000] [--time-budget-s 150] [--quick]

The service (``SandboxService`` with a secret, on 127.0.0.1) runs in this process;
16 clients POST ``/v1/run``, one call per request, each call printing its own
marker first.  Kinds: quick prints, sympy, timeouts, memory bombs, fork bombs,
output floods, crashes.  Invariants (JSON keys): ``lost`` (calls sent and never
answered 200), ``duplicated`` (a marker answered more than once, or answered to
another call), ``answered_once`` (calls answered by exactly one 200 carrying their
own output; ``internal`` of them: the worker died under both attempts and the pool
says so), ``cut_by_budget`` (in flight when the time budget ended), ``leaked_fds`` and ``leaked_procs`` (descriptors of this process
and pool processes left after the service and pool shut down), ``alive`` (every
worker up and a call answered after the chaos stops).

Beside the soak, in the same process: the baseline, the same chaos and mix (the
first ``--baseline-calls`` calls of the same plan) on a pool without spare
workers (``spares = 0``: a replacement starts on the call's path), giving
``ratio_vs_no_spares``; and the mix without chaos (``--no-chaos-calls``), giving
``throughput_ratio_vs_no_chaos``.  Chaos strikes spares too (they are workers
of the pool).  Bounded by ``--calls`` and ``--time-budget-s``
(calls not sent by then are reported as ``not_sent``).  The last stdout line is
the JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import httpx
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import ExecResult, SandboxConfig, SandboxPool, SandboxService, pool_processes, worker_pids

CLIENTS = 16
# (kind, weight, timeout, code): every call prints its marker first.
KINDS = (
    ("quick", 60, 2.0, "print('{m}')"),
    ("sympy", 20, 4.0, "import sympy\nprint('{m}', sympy.factorint(2**32 + 1))"),
    ("timeout", 2, 0.2, "print('{m}', flush=True)\nwhile True: pass"),
    ("memory_bomb", 4, 2.0, "print('{m}', flush=True)\nx = bytearray(1 << 40)"),
    ("fork_bomb", 4, 2.0, "import os\nprint('{m}', flush=True)\nwhile True: os.fork()"),
    ("output_flood", 4, 2.0, "print('{m}', flush=True)\nwhile True: print('x' * 4096)"),
    ("crash", 6, 2.0, "import os, signal\nprint('{m}', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)"),
)
_decode = msgspec.json.Decoder(ExecResult).decode


async def _chaos(pool: SandboxPool, rng: random.Random, counts: Counter[str]) -> None:
    """Every second a SIGKILL, and every fifth second a SIGSTOP as well (to another), to
    workers that were there a second ago (one still starting is not yet a worker; the
    pool retries a start that dies, too).
    The first strike comes at once, on a worker of the opened pool, so even a run shorter
    than a second has its chaos."""
    tick = 0
    before = set(worker_pids(pool.id))  # the pool is open: these workers have started
    while True:
        tick += 1
        now = set(worker_pids(pool.id))
        pids, before = sorted(now & before), now
        strikes = [signal.SIGKILL, signal.SIGSTOP] if tick % 5 == 0 else [signal.SIGKILL]
        for victim, sig in zip(rng.sample(pids, min(len(pids), len(strikes))), strikes, strict=False):
            try:
                os.kill(victim, sig)
                counts[sig.name] += 1
            except ProcessLookupError:
                pass
        await anyio.sleep(1.0)


async def run(calls: int, *, workers: int, chaos: bool, time_budget_s: float, seed: int = 0, spares: int | None = None) -> dict:
    """One soak; the invariant counts and per-kind latencies.  ``spares``: the pool's
    (None: its default)."""
    rng = random.Random(seed)
    fds_before = len(os.listdir("/proc/self/fd"))
    secret = secrets.token_urlsafe(16)
    config = SandboxConfig(workers=workers, hang_grace_s=1.0, warmup="", max_output_bytes=8192, memory_mb=1024)
    if spares is not None:
        config = msgspec.structs.replace(config, spares=spares)
    plan = rng.choices(range(len(KINDS)), weights=[k[1] for k in KINDS], k=calls)
    answers: dict[int, int] = defaultdict(int)
    wrong: list[int] = []
    lost: list[int] = []
    latency: dict[str, list[float]] = defaultdict(list)
    status: dict[str, Counter[str]] = defaultdict(Counter)
    signals: Counter[str] = Counter()
    sent = 0
    alive = False
    started = time.monotonic()
    async with SandboxPool(config) as pool:
        pool_id = pool.id
        async with anyio.create_task_group() as tg:
            service = SandboxService(pool, port=0, secret=secret)
            port = await tg.start(service.serve)
            url = f"http://127.0.0.1:{port}"
            next_call = iter(range(calls))

            async def client() -> None:
                nonlocal sent
                headers = {"authorization": f"Bearer {secret}"}
                async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60.0, trust_env=False) as http:
                    for i in next_call:
                        kind, _, timeout, code = KINDS[plan[i]]
                        marker = f"M{i}x"
                        sent += 1
                        t0 = time.monotonic()
                        try:
                            r = await http.post("/v1/run", json={"code": code.format(m=marker), "timeout": timeout})
                        except httpx.HTTPError:
                            lost.append(i)
                            continue
                        if r.status_code != 200:
                            lost.append(i)
                            continue
                        latency[kind].append(time.monotonic() - t0)
                        result = _decode(r.content)
                        status[kind][result.status] += 1
                        seen = [int(t[1:-1]) for t in result.stdout.split() if t.startswith("M") and t.endswith("x") and t[1:-1].isdigit()]
                        for j in set(seen):
                            answers[j] += 1
                            if j != i:
                                wrong.append(i)

            async with anyio.create_task_group() as work:
                if chaos:
                    work.start_soon(_chaos, pool, rng, signals)
                with anyio.move_on_after(time_budget_s):
                    async with anyio.create_task_group() as clients:
                        for _ in range(CLIENTS):
                            clients.start_soon(client)
                work.cancel_scope.cancel()
            for pid in worker_pids(pool_id):  # a stopped worker must not outlive the check below by luck
                os.kill(pid, signal.SIGCONT)
            with anyio.move_on_after(60):
                while pool.statistics().workers_alive < workers:
                    await anyio.sleep(0.1)
                async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {secret}"}) as http:
                    final = await http.post("/v1/run", json={"code": "print(6 * 7)"})
                alive = final.status_code == 200 and _decode(final.content).stdout == "42\n"
            stats = pool.statistics()
            await service.shutdown()
    elapsed = time.monotonic() - started
    with anyio.move_on_after(10):
        while pool_processes(pool_id):
            await anyio.sleep(0.05)
    answered = sum(len(v) for v in latency.values())
    return {
        "calls": calls,
        "sent": sent,
        "not_sent": calls - sent,
        "answered": answered,
        "answered_once": answered - len(set(wrong)),
        "cut_by_budget": sent - answered - len(lost),
        "internal": sum(c["internal"] for c in status.values()),
        "lost": len(lost),
        "duplicated": sum(n - 1 for n in answers.values() if n > 1) + len(wrong),
        "leaked_fds": len(os.listdir("/proc/self/fd")) - fds_before,
        "leaked_procs": len(pool_processes(pool_id)),
        "alive": alive,
        "calls_per_s": round(answered / elapsed, 1),
        "p50_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in latency.items()},
        "p99_ms": {k: round(sorted(v)[int(0.99 * (len(v) - 1))] * 1000, 1) for k, v in latency.items()},
        "status": {k: dict(v) for k, v in status.items()},
        "workers_replaced": stats.worker_failures,
        "spares": config.spares,
        "spares_taken": stats.spares_taken,
        "retries": stats.retries,
        "signals": dict(signals),
        "elapsed_s": round(elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--baseline-calls", type=int, default=3000, help="calls of the baseline (no spares, same chaos)")
    parser.add_argument("--no-chaos-calls", type=int, default=1000)
    parser.add_argument("--time-budget-s", type=float, default=150.0)
    parser.add_argument("--quick", action="store_true", help="500 calls, 30 s (a smoke run)")
    args = parser.parse_args()
    calls, budget = (500, 30.0) if args.quick else (args.calls, args.time_budget_s)
    quiet = anyio.run(lambda: run(min(calls, args.no_chaos_calls), workers=args.workers, chaos=False, time_budget_s=budget))
    print(f"no chaos: {json.dumps(quiet)}", file=sys.stderr, flush=True)
    base = anyio.run(lambda: run(min(calls, args.baseline_calls), workers=args.workers, chaos=True, time_budget_s=budget, spares=0))
    print(f"baseline (chaos, no spares): {json.dumps(base)}", file=sys.stderr, flush=True)
    soak = anyio.run(lambda: run(calls, workers=args.workers, chaos=True, time_budget_s=budget))
    print(f"chaos: {json.dumps(soak)}", file=sys.stderr, flush=True)
    keys = ("lost", "duplicated", "leaked_fds", "leaked_procs", "alive", "calls", "sent", "not_sent", "answered",
            "answered_once", "cut_by_budget", "internal", "calls_per_s", "p50_ms", "p99_ms", "workers_replaced", "spares",
            "spares_taken", "retries", "signals", "elapsed_s")
    summary = {k: soak[k] for k in keys}
    summary["baseline_calls_per_s"] = base["calls_per_s"]
    summary["baseline_p50_ms"] = base["p50_ms"]
    summary["baseline_p99_ms"] = base["p99_ms"]
    for key in ("lost", "duplicated", "leaked_fds", "leaked_procs", "alive"):
        summary[f"baseline_{key}"] = base[key]
    summary["ratio_vs_no_spares"] = round(soak["calls_per_s"] / max(base["calls_per_s"], 1e-9), 3)
    summary["no_chaos_calls_per_s"] = quiet["calls_per_s"]
    summary["throughput_ratio_vs_no_chaos"] = round(soak["calls_per_s"] / max(quiet["calls_per_s"], 1e-9), 3)
    summary["workers"] = args.workers
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
