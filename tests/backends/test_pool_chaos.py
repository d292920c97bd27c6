"""A short inference-pool chaos run (benchmarks/pool_chaos.py, 128 in flight): 4 server doubles that
die, hang, answer garbage or 500 and come back; every trajectory finished exactly once."""

from __future__ import annotations

import pytest

from benchmarks.pool_chaos import run

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_short_chaos_run_finishes_every_trajectory_once() -> None:
    out = await run(1000, chaos=True, concurrency=128, time_budget_s=120.0, seed=2)
    assert (out["lost"], out["duplicated"], out["failed"]) == (0, 0, 0), out["first_failure"]
    assert out["finished"] == 1000
    assert sum(out["faults"].values()) >= 3 and out["failovers"] >= 1 and out["servers_back"] >= 1
