"""Process-wide settings for processes that run rollouts."""

from __future__ import annotations

import gc
import time
from typing import Any, Final

GC_GEN0_THRESHOLD = 20_000
"""Net new containers between two collections (CPython's default: 700).

What a collection costs is the containers it walks and their elements, and a
rollout's live data are long lists: each trajectory in flight holds its token ids
(~4K ints at rStar2's length), and each turn adds lists of 240+ ids and logprobs.
Walked again and again as they age, they made the collector the orchestrator's
longest stall: with 16,384 trajectories in flight, one young collection at a
threshold of 1M walked every token list in flight and held the loop 4.2 s (wall
time, load 5; ``benchmarks/paper_scale.py``); 16,384 lists of 4,000 ints and
180,224 pairs of 240-element lists take 1.1 s of CPU to collect on their own.  :func:`tune_gc` therefore freezes whatever
survives a collection (:func:`_freeze_survivors`): each object is walked at most
once, by the first collection after it was made, and a collection walks only what
was made since the last one and is still alive.  Measured on a loaded 2-core box
(CPU time): at 20,000, 37-48 ms per collection at 2,048 trajectories in flight
and up to 172-192 ms at 16,384 (the frozen objects that die take the count down,
so more than 20,000 are young at a collection), ~12 us per turn in all; at
5,000, 15-20 ms each at 2,048 but ~22 us per turn (it walks more objects that
would have died before a later one); at 100,000, ~110 ms at 2,048."""

RUN_OPTIONS: Final[dict[str, Any]] = {"use_uvloop": True}
"""``backend_options`` for ``anyio.run`` in processes that run rollouts: asyncio on
uvloop, whose timers, ready queue and sockets are in C.  Each turn of a trajectory
is a few wakeups (a generation, its tool calls), so at 10,000 trajectories the
loop's own cost per wakeup is a large share of the orchestrator's CPU (measured in
benchmarks/rollout_overhead.py, which reports this loop next to plain asyncio and
trio).  Code must still run on any anyio backend: the tests run asyncio and trio."""


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """After each collection, move the survivors out of the collector's sight (O(1)).

    Why this loses little: rollout garbage is acyclic and freed by reference
    counting whether frozen or not; a cycle made and dropped between two
    collections (an httpx response and its stream, a caught exception's
    traceback) is still collected by the next one.  Only a cycle whose objects
    survived a collection before it became garbage stays (until ``gc.unfreeze()``
    and a full collection; ``benchmarks/paper_scale.py`` measures how much as
    ``gc_frozen_garbage_per_turn``).
    """
    if phase == "stop":
        gc.freeze()


FROZEN_GROWTH: Final = 2.0
"""How much the frozen generation grows between two full collections of it (as
Go's collector waits for its heap to double): the frozen cycles a process keeps
are at most about what is alive, and each full walk is paid for by as many new
objects as it walks."""


class _Frozen:
    after_last = 0
    """Frozen objects the last full collection left (0: none yet)."""


def collect_frozen_garbage(growth: float = FROZEN_GROWTH) -> tuple[int, float]:
    """Collect the cycles that became garbage after they were frozen, once the frozen
    generation holds ``growth`` times what the last such collection left: unfreeze,
    a full collection, freeze what survives.  Returns (objects collected, seconds);
    ``(0, seconds of the check)`` before that.

    Freezing survivors (:func:`tune_gc`) keeps such cycles for the life of the
    process, so a long run calls this once per RL step (the trainer after each
    step's record, a shard worker at each new weight version).  A full walk of
    everything alive is about the 1.1 s of CPU above at 16,384 trajectories in
    flight, and 0.25-1.65 s a step (wall time, loaded box) in the CPU demo's trainer,
    whose heap holds the learner: for the ~300 objects a step it found there.  The
    check is a walk of the frozen list alone (a median 0.08 s a step there, against
    0.63 s for the full collection).
    """
    t0 = time.perf_counter()
    if gc.get_freeze_count() <= growth * _Frozen.after_last:
        return 0, time.perf_counter() - t0
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    _Frozen.after_last = gc.get_freeze_count()
    return found, time.perf_counter() - t0


def tune_gc() -> None:
    """Move everything alive now (imports, configs, tokenizers) out of the collector's
    sight, collect at :data:`GC_GEN0_THRESHOLD`, and freeze the survivors of every
    collection.  Call once, after start-up, in a process that runs rollouts."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 100)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)
