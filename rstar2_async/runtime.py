"""Process-wide settings for processes that run rollouts."""

from __future__ import annotations

import gc
from typing import Any, Final

GC_GEN0_THRESHOLD = 50_000
"""Allocations between young-generation collections (CPython's default: 700).

Tens of thousands of in-flight trajectories keep hundreds of thousands of live
containers; at the default threshold the collector runs every few turns and
dominates the orchestrator's CPU (measured: ~130 -> ~80 us per turn at 10,000
trajectories, benchmarks/rollout_overhead.py).  Rollout garbage is acyclic and freed
by reference counting, so collecting rarely loses nothing."""

RUN_OPTIONS: Final[dict[str, Any]] = {"use_uvloop": True}
"""``backend_options`` for ``anyio.run`` in processes that run rollouts: asyncio on
uvloop, whose timers, ready queue and sockets are in C.  Each turn of a trajectory
is a few wakeups (a generation, its tool calls), so at 10,000 trajectories the
loop's own cost per wakeup is a large share of the orchestrator's CPU (measured in
benchmarks/rollout_overhead.py, which reports this loop next to plain asyncio and
trio).  Code must still run on any anyio backend: the tests run asyncio and trio."""


def tune_gc() -> None:
    """Move everything alive now (imports, configs, tokenizers) out of the collector's
    sight, and collect the young generation rarely.  Call once, after start-up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 100)
