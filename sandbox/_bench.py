"""Latency and throughput of the pool against per-call interpreters (used by
``rstar2 sandbox bench`` and ``benchmarks/sandbox_latency.py``)."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import anyio

from . import _jail
from ._config import SandboxConfig
from ._pool import SandboxPool

TRIVIAL = "print(sum(range(1000)))"
SYMPY = "import sympy; print(sympy.factorint(2**64-1))"

Runner = Callable[[str], Awaitable[bool]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def latency_ms(run: Runner, code: str, n: int) -> dict[str, float]:
    """p50/p99 of ``n`` sequential calls (concurrency 1), after one warm-up call."""
    await run(code)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ok = await run(code)
        times.append((time.perf_counter() - t0) * 1e3)
        if not ok:
            raise RuntimeError(f"benchmark call failed: {code!r}")
    return {"p50": round(statistics.median(times), 3), "p99": round(percentile(times, 99), 3)}


async def calls_per_s(run: Runner, code: str, n: int, concurrency: int) -> float:
    """Throughput of ``n`` calls with ``concurrency`` in flight."""
    limiter = anyio.CapacityLimiter(concurrency)
    failures = 0

    async def one() -> None:
        nonlocal failures
        async with limiter:
            failures += not await run(code)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    if failures:
        raise RuntimeError(f"{failures} benchmark calls failed: {code!r}")
    return round(n / (time.perf_counter() - t0), 2)


def pool_runner(pool: SandboxPool) -> Runner:
    async def run(code: str) -> bool:
        return (await pool.run(code, timeout=30)).ok

    return run


def argv_runner(make_argv: Callable[[str], list[str]]) -> Runner:
    async def run(code: str) -> bool:
        r = await anyio.run_process(make_argv(code), check=False)
        return r.returncode == 0

    return run


def python_c_argv(code: str) -> list[str]:
    """The unjailed baseline: ``python3 -c`` per call."""
    return [sys.executable, "-c", code]


def jail_per_call_argv(config: SandboxConfig) -> Callable[[str], list[str]]:
    """The careful baseline: the same bubblewrap jail, a fresh interpreter per call."""
    host = _jail.check_host()
    interp = _jail.inspect_interpreter(config.python or sys.executable, tuple(config.packages))
    layers = _jail.resolve_layers(config, host)
    spec = _jail.worker_spec(config, interp, host, layers, "bench")
    if not layers["jail"]:
        raise RuntimeError("no bubblewrap jail on this machine: cannot measure the jailed baseline")
    head = spec.argv[: spec.argv.index("--") + 1]

    def make(code: str) -> list[str]:
        boot = f"import sys; sys.path.insert(0, {spec.setup['site']!r})\n"
        return [*head, interp.executable, "-I", "-S", "-X", "utf8", "-c", boot + code]

    return make


async def benchmark(
    config: SandboxConfig, *, n_latency: int = 200, n_throughput: int = 640, n_baseline: int = 10,
    n_baseline_throughput: int = 64, concurrency: int = 64, baselines: bool = True,
    log: Callable[[str], None] = lambda s: None,
) -> dict[str, object]:
    """Run the whole comparison; returns the JSON-able summary."""
    out: dict[str, object] = {"workers": config.resolved_workers}
    async with SandboxPool(config) as pool:
        run = pool_runner(pool)
        for name, code in (("trivial", TRIVIAL), ("sympy", SYMPY)):
            lat = await latency_ms(run, code, n_latency)
            out[f"p50_ms_{name}"], out[f"p99_ms_{name}"] = lat["p50"], lat["p99"]
            log(f"pool {name} c=1: {lat}")
        for name, code in (("trivial", TRIVIAL), ("sympy", SYMPY)):
            out[f"calls_per_s_{name}_c{concurrency}"] = await calls_per_s(run, code, n_throughput, concurrency)
            log(f"pool {name} c={concurrency}: {out[f'calls_per_s_{name}_c{concurrency}']} calls/s")
        out["pool_statistics"] = {"calls": pool.statistics().calls, "layers": pool.statistics().layers}
    if baselines:
        for label, make in (("python_c", python_c_argv), ("jail_per_call", jail_per_call_argv(config))):
            run = argv_runner(make)
            for name, code in (("trivial", TRIVIAL), ("sympy", SYMPY)):
                lat = await latency_ms(run, code, n_baseline)
                out[f"{label}_p50_ms_{name}"], out[f"{label}_p99_ms_{name}"] = lat["p50"], lat["p99"]
                log(f"{label} {name} c=1: {lat}")
            tput = await calls_per_s(run, SYMPY, n_baseline_throughput, concurrency)
            out[f"{label}_calls_per_s_sympy_c{concurrency}"] = tput
            log(f"{label} sympy c={concurrency}: {tput} calls/s")
        out["speedup_sympy_vs_jail_per_call"] = round(out["jail_per_call_p50_ms_sympy"] / out["p50_ms_sympy"], 1)  # type: ignore[operator]
        out["speedup_sympy_vs_python_c"] = round(out["python_c_p50_ms_sympy"] / out["p50_ms_sympy"], 1)  # type: ignore[operator]
    return out
