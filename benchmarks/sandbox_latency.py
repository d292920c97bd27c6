"""Sandbox latency and throughput: our warm pool vs a process per call.

    .venv/bin/python benchmarks/sandbox_latency.py [--workers N] [--quick]

Measures, in one run: p50/p99 at concurrency 1 for a trivial snippet
(``print(sum(range(1000)))``) and a sympy snippet
(``import sympy; print(sympy.factorint(2**64-1))``), and calls/s at concurrency
64, for the pool, ``python3 -c`` per call, and a bubblewrap-jailed interpreter
per call.  Progress goes to stderr; the last stdout line is the JSON summary.
Targets (2 cores): p50_ms_trivial <= 5, p50_ms_sympy <= 12,
speedup_sympy_vs_jail_per_call >= 20, calls_per_s_sympy_c64 >= 100.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import (
    SandboxConfig,  # noqa: E402
    benchmark,  # noqa: E402
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=None, help="pool workers (default: cores)")
    p.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    args = p.parse_args()
    config = SandboxConfig(workers=args.workers)
    sizes = dict(n_latency=20, n_throughput=64, n_baseline=3, n_baseline_throughput=16) if args.quick else {}
    result = anyio.run(lambda: benchmark(config, log=lambda s: print(s, file=sys.stderr, flush=True), **sizes))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
