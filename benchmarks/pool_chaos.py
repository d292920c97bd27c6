"""The inference ServerPool under chaos: 4 in-process server doubles that die, hang,
answer garbage and come back, while trajectories of several turns run through the pool.

    .venv/bin/python benchmarks/pool_chaos.py [--trajectories 5000] [--concurrency 128] [--quick]

Each double is a real HTTP server on 127.0.0.1 (``httpgate.HTTPServer``) speaking
the part of vLLM the pool uses (``/v1/completions`` with token ids, ``/metrics``).
It answers each token as its absolute position in the sequence, so a trajectory
whose tokens are not exactly ``0, 1, 2, ...`` lost or repeated part of a turn.
A chaos task, every 0.2 s, puts one server (never more than 3 at once) into a
fault for 0.3-1.5 s: ``dead`` (port closed, connections in flight cut), ``hang``
(requests and polls never answered), ``garbage`` (200 with an undecodable body)
or ``error`` (500), then brings it back.

The baseline is the same pool and servers with no chaos, in the same run, both
with ``--concurrency`` trajectories in flight (128 by default).
Found with it: at concurrency 128, turns stuck forever inside httpx/httpcore
(a shielded close waiting on a lock wake-up that anyio's asyncio Lock lost),
past the pool's ``request_timeout_s`` and past cancellation: 15-17 of 2,000
lost; the clients now use ``httpgate.Http11Transport``.  If a run still outlives its
budget by a minute it prints where its turns wait, its counts so far (the stuck
ones lost) and exits 3.

The run itself is :func:`rstar2_async.testing.pool_chaos` (its short test runs it too).
Invariants (JSON keys): ``lost`` (trajectories that failed, did not finish in
the time budget, or have a gap in their tokens), ``duplicated`` (finished twice,
or a token repeated).  Bounded: ``--trajectories`` and ``--time-budget-s``.
The last stdout line is the JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rstar2_async.testing import pool_chaos as run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=5000)
    parser.add_argument("--baseline-trajectories", type=int, default=1000)
    parser.add_argument("--time-budget-s", type=float, default=240.0)
    parser.add_argument("--concurrency", type=int, default=128, help="trajectories in flight at once")
    parser.add_argument("--quick", action="store_true", help="300 trajectories (a smoke run)")
    args = parser.parse_args()
    n = 300 if args.quick else args.trajectories
    base_n = min(n, args.baseline_trajectories)
    baseline = anyio.run(lambda: run(base_n, chaos=False, concurrency=args.concurrency, time_budget_s=args.time_budget_s))
    print(f"baseline (no chaos): {json.dumps(baseline)}", file=sys.stderr, flush=True)
    chaotic = anyio.run(lambda: run(n, chaos=True, concurrency=args.concurrency, time_budget_s=args.time_budget_s))
    print(f"chaos: {json.dumps(chaotic)}", file=sys.stderr, flush=True)
    summary = {
        "lost": chaotic["lost"],
        "duplicated": chaotic["duplicated"],
        "trajectories": n,
        "concurrency": args.concurrency,
        "finished": chaotic["finished"],
        "trajectories_per_s": chaotic["trajectories_per_s"],
        "baseline_trajectories_per_s": baseline["trajectories_per_s"],
        "throughput_ratio_vs_no_chaos": round(chaotic["trajectories_per_s"] / max(baseline["trajectories_per_s"], 1e-9), 3),
        "p50_s": chaotic["p50_s"],
        "p99_s": chaotic["p99_s"],
        "baseline_p50_s": baseline["p50_s"],
        "failovers": chaotic["failovers"],
        "servers_lost": chaotic["servers_lost"],
        "servers_back": chaotic["servers_back"],
        "faults": chaotic["faults"],
        "baseline_lost": baseline["lost"],
        "baseline_duplicated": baseline["duplicated"],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
