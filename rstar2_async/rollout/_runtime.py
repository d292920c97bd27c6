"""Process-wide settings for processes that run rollouts."""

from __future__ import annotations

import gc
from typing import Any, Final

GC_GEN0_THRESHOLD = 1_000_000
"""Net new containers between young-generation collections (CPython's default: 700).

A trajectory in flight keeps ~55 containers alive (its task, coroutines, cancel
scopes, timers, token lists), so admitting 10,000 adds ~550,000.  Each collection
walks every young container, and the young token lists of 1,000+ ids each make that
slow: at the default threshold the collector dominated the orchestrator's CPU, and
even at 50,000 it still ran ten times per batch ramp-up, ~0.3-1 s in all (measured
with benchmarks/rollout_overhead.py, ~8-10 us of ~55 per turn).  At this threshold a
batch of 10,000 ramps up without one.  Rollout garbage is acyclic and freed by
reference counting, so collecting rarely loses nothing; the price is that the rare
cyclic garbage (caught exceptions' tracebacks) waits longer, and a collection, when
it comes, is longer."""

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
