"""The reward: grade a response's final answer against the gold answer, or call the
user's own reward function, with a timeout and off the event loop.

The final answer is `extract_answer`'s (see ``_answer``); no boxed answer grades
0.0.  As in rStar2, an answer is right (1.0) when either of two independent checks
says so:

1. `answers_match` (``_normalise``), pure and fast, run in the calling process first;
2. math-verify, run in a worker process (its parse uses ``signal.alarm``, which
   works only in a main thread, and some of its comparisons cannot be interrupted
   at all), killed when it overruns the per-call timeout.

Two ways in:

- `score` for plain synchronous code (evaluation scripts): one worker process per
  Python process, started on first use, killed at interpreter exit.
- `Grader` for the rollout engine: an async context manager owning a small pool of
  workers, on any anyio backend (asyncio or trio).  Its ``reward(response_text,
  problem)`` is the :class:`Reward` the engine calls.

A `Grader` given ``function="pkg.module:fn"`` grades with that function instead: a
sync one in the same kind of worker processes (killed and replaced past the timeout,
replaced when it crashes), an async one awaited on the event loop under the same
timeout (it must not block the loop; put blocking work in a thread or make it sync).
A call that raises, times out or returns anything but a finite number is worth 0.0
and is counted in `GraderStatistics.function_errors`; the first of each kind is logged.
"""

from __future__ import annotations

import collections
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import final

import anyio
import msgspec

from ..errors import GraderBrokenError
from ..types import Problem
from ._compare import GradingMode
from ._function import load_function
from ._score import GRADING_TIMEOUT_S, grade_request, quick_verdict
from ._worker import (
    WORKER_FAILURES,
    AsyncWorker,
    GradeReply,
    GradeRequest,
    RewardReply,
    RewardRequest,
    reward_reply,
)

__all__ = ["Grader", "GraderStatistics"]

_log = logging.getLogger(__name__)

SETTLED_PAIRS = 4096
"""(answer, gold) pairs whose math-verify verdict a `Grader` remembers (least recently
used first out): a GRPO group's samples often give one answer several times, and
each repeat then costs no worker."""


class GraderStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a `Grader`.  Counters cover its whole life."""

    max_workers: int
    workers_alive: int
    """Started and not yet killed (idle or busy)."""
    workers_busy: int
    tasks_waiting: int
    """Callers queued for a free worker."""
    graded: int
    """Gradings that returned a reward (`Grader.score` and `Grader.reward`)."""
    correct: int
    """Of `graded`, those worth 1.0."""
    by_normaliser: int
    """Of `correct`, those accepted by the normaliser without a worker."""
    without_worker: int
    """Of `graded`, those settled without asking math-verify (right or wrong): by the
    normaliser, or by a verdict it gave before on the same answer and gold."""
    timeouts: int
    """Gradings cut off at the per-call timeout (0.0, worker killed)."""
    worker_crashes: int
    """Workers that died or broke the protocol mid-grading (0.0, worker replaced)."""
    workers_started: int
    function_errors: int = 0
    """Calls of a reward function that raised or returned no finite number (0.0)."""


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class Grader:
    """Async grader for the rollout engine: a pool of worker processes running
    math-verify, or a reward function of the user's.

    Use as ``async with Grader(workers=4) as grader: r = await grader.reward(text,
    problem)`` (or ``await grader.score(text, gold)`` for the math grader), from any
    number of tasks, on asyncio or trio.

    Args:
        workers: most worker processes alive at once (and concurrent gradings).
        timeout: wall-clock limit in seconds on one grading (queueing for a free
            worker and starting a replacement do not count).  math-verify's own
            alarms are set to a third of it, in whole seconds (off below 3 s).
        function: a ``"module:name"`` import path of a :data:`RewardFunction` to grade
            with instead of the math grader (sync: in the workers; async: on the loop).
        mode: how the math grader finds the final answer: ``"strict"`` (rStar2's
            boxed answer; training) or ``"lenient"`` (also free text; see `final_answer`).

    Resource handling: entering starts all workers and returns once each is ready (a
    start that overruns `WORKER_START_TIMEOUT_S` raises); an async ``function`` needs
    none.  A grading that overruns `timeout`, or whose worker dies, returns 0.0; that
    worker is killed and a fresh one is started by the next call that needs one.
    Exiting kills and reaps every worker, busy ones included, so no process outlives
    the block.

    Raises:
        RuntimeError: entering a grader twice, or after it closed.
        ValueError: `workers` < 1, `timeout` <= 0 or an unknown `mode`.
        PluginError: ``function`` does not load or is not a function of two arguments.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        timeout: float = GRADING_TIMEOUT_S,
        function: str | None = None,
        mode: GradingMode = "strict",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers: expected int >= 1, got {workers!r}")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        if mode not in ("strict", "lenient"):
            raise ValueError(f"mode: expected 'strict' or 'lenient', got {mode!r}")
        self._mode: GradingMode = mode
        self._max_workers = workers
        self._timeout = timeout
        self._function = function
        self._async_function: Callable[[str, Problem], Awaitable[float]] | None = None
        if function is not None:
            fn = load_function(function)
            self._async_function = fn if inspect.iscoroutinefunction(fn) else None
        self._state = _State.UNOPENED
        self._slots = anyio.Semaphore(workers)
        self._idle: list[AsyncWorker] = []
        self._alive: set[AsyncWorker] = set()
        self._busy = 0
        self._graded = self._correct = self._by_normaliser = self._without_worker = 0
        self._timeouts = self._crashes = self._started = self._function_errors = 0
        self._logged: set[str] = set()
        self._settled: collections.OrderedDict[tuple[str, str], bool] = collections.OrderedDict()

    @property
    def mode(self) -> GradingMode:
        """How the math grader finds a response's final answer (``"strict"`` or ``"lenient"``)."""
        return self._mode

    async def __aenter__(self) -> Grader:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"cannot open a Grader that is {self._state.value}")
        self._state = _State.OPEN
        if self._async_function is not None:
            return self
        failures: list[GraderBrokenError] = []

        async def start_one() -> None:
            try:
                self._idle.append(await self._start_worker())
            except GraderBrokenError as exc:
                failures.append(exc)

        try:
            async with anyio.create_task_group() as tg:
                for _ in range(self._max_workers):
                    tg.start_soon(start_one)
            if failures:
                raise failures[0]
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        self._state = _State.CLOSED
        self._idle.clear()
        for worker in list(self._alive):
            await self._discard(worker)

    async def _start_worker(self) -> AsyncWorker:
        worker = await AsyncWorker.start(self._function)
        self._alive.add(worker)
        self._started += 1
        if self._state is _State.CLOSED:  # closed while it was starting
            await self._discard(worker)
            raise anyio.ClosedResourceError
        return worker

    async def _discard(self, worker: AsyncWorker) -> None:
        self._alive.discard(worker)
        await worker.kill()

    def _check_open(self) -> None:
        if self._state is _State.UNOPENED:
            raise RuntimeError("Grader used before `async with Grader()` opened it")
        if self._state is _State.CLOSED:
            raise anyio.ClosedResourceError

    async def reward(self, response_text: str, problem: Problem) -> float:
        """What ``response_text`` is worth for ``problem``: the math grader's verdict
        against ``problem.answer`` (1.0 or 0.0), or the reward function's value.

        Cancellation-safe, and raises as :meth:`score` does.
        """
        if self._function is None:
            return await self.score(response_text, problem.answer)
        self._check_open()
        if self._async_function is None:
            reply = await self._ask(RewardRequest(response_text=response_text, problem=problem))
        else:
            reply = None
            with anyio.move_on_after(self._timeout):
                try:
                    reply = reward_reply(await self._async_function(response_text, problem))
                except Exception as exc:
                    reply = RewardReply(value=0.0, error=f"{type(exc).__name__}: {exc}")
            self._timeouts += reply is None
        if not isinstance(reply, RewardReply):  # timed out, or its worker died
            return self._count(0.0)
        if reply.error:
            self._function_errors += 1
            kind = reply.error.partition(":")[0]
            if kind not in self._logged:  # once per kind: a broken function fails every call
                self._logged.add(kind)
                _log.warning(
                    "reward function %s: %s (rewarded 0.0; later ones counted, not logged)", self._function, reply.error
                )
        return self._count(reply.value)

    async def score(self, response_text: str, gold: str) -> float:
        """Grade one response against the gold answer with the math grader, in this
        grader's mode: 1.0 if right, else 0.0.

        Waits for a free worker when all are busy.  A math-verify verdict is
        remembered per (answer, gold) (`SETTLED_PAIRS`).  Cancellation-safe: a cancelled
        call leaves no request half-answered (its worker is killed and replaced) and
        the pool usable.

        Raises:
            RuntimeError: the grader was never opened, or it grades with a function.
            anyio.ClosedResourceError: the grader closed (before or during the call).
            GraderBrokenError: a replacement worker could not be started.
        """
        self._check_open()
        if self._function is not None:
            raise RuntimeError(f"this Grader grades with {self._function}: call reward(response_text, problem)")
        verdict, answer, gold = quick_verdict(response_text, gold, self._mode)
        if verdict is not None:
            self._by_normaliser += verdict == 1.0
            self._without_worker += 1
            return self._count(verdict)
        if (known := self._settled.get((answer, gold))) is not None:
            self._settled.move_to_end((answer, gold))
            self._without_worker += 1
            return self._count(1.0 if known else 0.0)
        reply = await self._ask(grade_request(answer, gold, self._timeout, self._mode))
        if isinstance(reply, GradeReply):  # a timeout or a crash is not remembered
            self._settled[answer, gold] = reply.correct
            if len(self._settled) > SETTLED_PAIRS:
                self._settled.popitem(last=False)
        return self._count(1.0 if isinstance(reply, GradeReply) and reply.correct else 0.0)

    async def _ask(self, request: GradeRequest | RewardRequest) -> object | None:
        """One request to a free worker: its reply, or None when it overran the
        timeout or its worker died (that worker is replaced)."""
        async with self._slots:
            self._check_open()  # it may have closed while we queued
            worker = self._idle.pop() if self._idle else await self._start_worker()
            self._busy += 1
            try:
                reply = None
                with anyio.move_on_after(self._timeout):
                    reply = await worker.grade(request)
            except WORKER_FAILURES as exc:
                await self._discard(worker)
                if self._state is _State.CLOSED:
                    raise anyio.ClosedResourceError from exc
                self._crashes += 1
                return None
            except BaseException:  # cancelled mid-request: the worker's state is unknown
                await self._discard(worker)
                raise
            finally:
                self._busy -= 1
            if reply is None:
                await self._discard(worker)
                self._timeouts += 1
                return None
            self._idle.append(worker)
            return reply

    def _count(self, verdict: float) -> float:
        self._graded += 1
        self._correct += verdict == 1.0
        return verdict

    def statistics(self) -> GraderStatistics:
        """A snapshot of the pool and its counters."""
        return GraderStatistics(
            max_workers=self._max_workers,
            workers_alive=len(self._alive),
            workers_busy=self._busy,
            tasks_waiting=self._slots.statistics().tasks_waiting,
            graded=self._graded,
            correct=self._correct,
            by_normaliser=self._by_normaliser,
            without_worker=self._without_worker,
            timeouts=self._timeouts,
            worker_crashes=self._crashes,
            workers_started=self._started,
            function_errors=self._function_errors,
        )
