"""A soak of the sandbox service under chaos (benchmarks/sandbox_soak.py and its short test
run it): 16 clients send mixed calls while a chaos task SIGKILLs a random worker every
second and SIGSTOPs one every 5 s.

Every call prints its own marker first.  Kinds: quick prints, sympy, timeouts, memory
bombs, fork bombs, output floods, crashes.  Invariants (keys of :func:`sandbox_soak`'s
result): ``lost`` (calls sent and never answered 200), ``duplicated`` (a marker answered
more than once, or answered to another call), ``answered_once`` (calls answered by exactly
one 200 carrying their own output; ``internal`` of them: the worker died under both
attempts and the pool says so), ``cut_by_budget`` (in flight when the time budget ended),
``leaked_fds`` and ``leaked_procs`` (descriptors of this process and pool processes left
after the service and pool shut down), ``alive`` (every worker up and a call answered
after the chaos stops).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import statistics
import time
from collections import Counter, defaultdict

import anyio
import httpx
import msgspec

from sandbox import ExecResult, SandboxConfig, SandboxPool, SandboxService, pool_processes, worker_pids

__all__ = ["sandbox_soak"]

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


async def sandbox_soak(calls: int, *, workers: int, chaos: bool, time_budget_s: float, seed: int = 0, spares: int | None = None) -> dict:
    """One soak of a :class:`sandbox.SandboxService` over a real jailed pool of ``workers``:
    ``calls`` mixed calls from 16 clients, SIGKILLs and SIGSTOPs of workers when ``chaos``;
    the invariant counts and per-kind latencies (keys described in the module docstring).
    ``spares``: the pool's (None: its default).  Bounded by ``calls`` and ``time_budget_s``."""
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
