"""The sandbox service under load and chaos: N workers, 16 concurrent clients, mixed
calls, while a chaos task SIGKILLs a random worker every second and SIGSTOPs one every 5 s.

    .venv/bin/python benchmarks/sandbox_soak.py [--workers 4] [--calls 20000] [--time-budget-s 150] [--quick]

The soak itself is :func:`rstar2_async.testing.sandbox_soak` (its short test runs it too).
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
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rstar2_async.testing import sandbox_soak as run  # noqa: E402


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
