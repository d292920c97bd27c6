"""`rstar2 view` on a run of 100,000 trajectories: the first page and a filtered page.

A run directory is generated in the shape the trainer writes (``write_sample_run``:
the trajectory recorder's own files; 25 steps x 125 problems x 32 samples), then a
real ``rstar2 view`` server (hypercorn, in this process) is asked over HTTP for:

    first_page_s  the table's first page on a fresh server: the whole index is read
                  (the cold start a user waits for after `rstar2 view RUN_DIR`)
    filter_s      a page filtered (finish reason, dropped by RoC, a reward range) and
                  sorted by reward, once the index is loaded
    search_s      a page filtered by text search (a regex pass over records.jsonl)

Baseline, in the same run: what a reader without the index does, and what `jq` on
samples.jsonl does: decode every record of ``records.jsonl`` and filter in Python
(``baseline_scan_s``).  Medians over ``--repeats``; the machine is shared and noisy.

Usage: ``python benchmarks/view_latency.py [--steps 25 --problems 125 --samples 32]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx
import msgspec

from rstar2_async.recipe import TrajectoryRecord
from rstar2_async.view import serve, write_sample_run

FILTER = {"finish": "answer", "roc": "dropped", "reward_min": "0.5", "sort": "reward", "desc": "1"}


async def _timed_pages(run_dir: Path) -> dict[str, float]:
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve, run_dir, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            out = {}
            for name, params in (("first_page_s", {}), ("filter_s", FILTER), ("search_s", {"q": "NameError"})):
                t0 = time.perf_counter()
                r = await client.get("/api/table", params=params)
                out[name] = time.perf_counter() - t0
                r.raise_for_status()
                out[name.replace("_s", "_total")] = r.json()["total"]
        tg.cancel_scope.cancel()
    return out


def _baseline(run_dir: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    decoder = msgspec.json.Decoder(TrajectoryRecord)
    with (run_dir / "trajectories" / "records.jsonl").open("rb") as f:
        hits = [r for r in map(decoder.decode, f) if r.finish_reason == "answer" and r.roc not in ("kept", "") and r.reward >= 0.5]
    hits.sort(key=lambda r: r.reward, reverse=True)
    return time.perf_counter() - t0, len(hits)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--problems", type=int, default=125)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "big"
        t0 = time.perf_counter()
        n = write_sample_run(run_dir, steps=args.steps, problems=args.problems, samples=args.samples, keep=args.samples // 2, filler=10)
        print(f"generated {n} trajectories in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        runs = [anyio.run(_timed_pages, run_dir) for _ in range(args.repeats)]
        baselines = [_baseline(run_dir) for _ in range(args.repeats)]
        assert all(r["filter_total"] == b[1] for r in runs for b in baselines), "the server's filter and the scan disagree"
        med = {k: statistics.median(r[k] for r in runs) for k in ("first_page_s", "filter_s", "search_s")}
        base = statistics.median(b[0] for b in baselines)
        print(json.dumps({
            "trajectories": n, **{k: round(v, 4) for k, v in med.items()},
            "filter_total": runs[0]["filter_total"], "search_total": runs[0]["search_total"],
            "baseline_scan_s": round(base, 4), "first_page_speedup": round(base / med["first_page_s"], 2),
            "filter_speedup": round(base / med["filter_s"], 2),
            "records_mb": round((run_dir / "trajectories" / "records.jsonl").stat().st_size / 2**20, 1),
            "index_mb": round((run_dir / "trajectories" / "index.jsonl").stat().st_size / 2**20, 1),
            "target_first_page_s": 1.0,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
