"""What benchmarks/paper_scale.py measures with, beside the runs it measures: the loop's
stalls (:class:`StallMonitor`), the collector's passes (:class:`GcTimer`, and the
collector's tuning before survivors were frozen), the pool's admission passes and
dispatcher calls (:class:`AdmissionTimer`), and the admission loop the pool ran
before its wait queue (:class:`LoopQueue`), the admission benchmark's baseline."""

from __future__ import annotations

import asyncio
import bisect
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Self

import anyio

from backends import ServerPool


class StallMonitor:
    """The loop's responsiveness: a 1 ms timer, set again each time it fires,
    records how late it fires (the stalls over 1 ms: when each ended, how long,
    and the process's CPU time during it: a stall with less CPU than wall time
    was partly the OS running other processes).

    A timer callback, not a task sleeping in a loop: the same lateness, at about
    half the CPU (14 ms a second against 26, measured idle), which the run counts
    in the orchestrator's CPU per turn (~25 us of it at 500 turns a second)."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float, float]] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()

        def fire(t: float, cpu: float) -> None:
            nonlocal timer
            now, now_cpu = time.perf_counter(), time.process_time()
            if (late := now - t - 1e-3) > 1e-3:
                self.stalls.append((now, late, now_cpu - cpu))
            timer = loop.call_later(1e-3, fire, now, now_cpu)

        timer = loop.call_later(1e-3, fire, time.perf_counter(), time.process_time())
        try:
            await anyio.sleep_forever()
        finally:
            timer.cancel()

    def max_ms(self, after: float = 0.0) -> float:
        """The longest stall that ended after ``after`` (a ``perf_counter`` time)."""
        return max((late for t, late, _ in self.stalls if t > after), default=0.0) * 1e3

    def max_cpu_ms(self) -> float:
        """The most CPU time the process ran inside one stall (the loop's own longest hold)."""
        return max((cpu for _, _, cpu in self.stalls), default=0.0) * 1e3

    def over(self, ms: float) -> int:
        """How many stalls were longer than ``ms``."""
        return sum(late * 1e3 > ms for _, late, _ in self.stalls)


class GcTimer:
    """The collector's passes during a run: how many, the longest and all of them in CPU time (ms:
    the machine is shared, and a collection descheduled halfway would read long)."""

    def __init__(self) -> None:
        self.count, self.longest, self.total, self._t = 0, 0.0, 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.thread_time()
        else:
            self.count += 1
            ms = (time.thread_time() - self._t) * 1e3
            self.longest, self.total = max(self.longest, ms), self.total + ms

    def __enter__(self) -> Self:
        gc.callbacks.insert(0, self)  # before tune_gc's freeze: it times the collection alone
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _untune_gc() -> None:
    """Undo ``tune_gc`` where it ran first (a shard worker runs it before its factory)."""
    gc.callbacks[:] = [c for c in gc.callbacks if getattr(c, "__qualname__", "") != "_freeze_survivors"]
    gc.unfreeze()


def tune_gc_before() -> None:
    """A baseline: the collector as tuned before survivors were frozen (``tune_gc`` at ceae007)."""
    _untune_gc()
    gc.collect()
    gc.freeze()
    gc.set_threshold(1_000_000, 20, 100)


def default_gc() -> None:
    """A baseline: CPython's own collector, as a shard worker ran before it called ``tune_gc``."""
    _untune_gc()
    gc.set_threshold(700, 10, 10)


BASELINE_GC: Final = {"before": tune_gc_before, "default": default_gc}
"""``--gc``'s baselines; ``ours`` is ``rstar2_async.rollout.tune_gc``."""


class AdmissionTimer:
    """Wraps a pool's admission pass and counts its CPU time (the machine may be
    shared), and with ``dispatcher``, the dispatcher's calls outside the passes
    (a turn's first try, its release, the load reports)."""

    def __init__(self, pool: ServerPool, *, dispatcher: bool = False) -> None:
        self.inner = pool._admit
        self.ns = self.passes = self.dispatch_ns = 0
        self.in_pass = False
        pool._admit = self  # type: ignore[method-assign]
        if dispatcher:
            d = pool._dispatcher
            for name in ("acquire_nowait", "release", "observe"):
                setattr(d, name, self._timed(getattr(d, name)))

    def __call__(self) -> None:
        t = time.thread_time_ns()
        self.in_pass = True
        try:
            self.inner()
        finally:
            self.in_pass = False
            self.ns += time.thread_time_ns() - t
            self.passes += 1

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.in_pass:
                return call(*args, **kwargs)
            t = time.thread_time_ns()
            try:
                return call(*args, **kwargs)
            finally:
                self.dispatch_ns += time.thread_time_ns() - t

        return timed


class LoopQueue:
    """The baseline admission: the pool's loop before the wait queue (its ``_admit``
    at d3429fb), every waiting turn tried on every pass, largest remaining budget
    first, behind the interface the pool now uses."""

    def __init__(self, pool: ServerPool) -> None:
        self.try_ = pool._try
        self.waiting: list[tuple[tuple[int, int], Any]] = []
        pool._dispatcher._hold_log = None  # nothing reads it: the dispatcher as before

    def __len__(self) -> int:
        return len(self.waiting)

    def __iter__(self) -> Iterator[Any]:
        return iter([w for _, w in self.waiting])

    def add(self, w: Any, *, tried: bool) -> None:
        bisect.insort(self.waiting, (w.key, w), key=lambda e: e[0])

    def remove(self, w: Any) -> None:
        self.waiting.remove((w.key, w))

    def admit(self) -> list[Any]:
        admitted, kept = [], []
        for entry in self.waiting:
            if self.try_(entry[1]) is not None:
                admitted.append(entry[1])
            else:
                kept.append(entry)
        self.waiting = kept
        return admitted
