"""The reward: extract a response's final answer and grade it against the gold answer.

rStar2's format puts the final answer in ``<answer>...\\boxed{...}...</answer>``.  We
take the last ``\\boxed{}`` (or ``\\fbox{}``, or ``\\boxed 5``) inside the last
complete ``<answer>`` block, or, if that block has none, the last one anywhere; no
boxed answer grades 0.0.  As in rStar2, an answer is right (1.0) when either of two
independent checks says so:

1. `answer_norm.answers_match`, pure and fast, run in the calling process first;
2. math-verify, run in a worker process (its parse uses ``signal.alarm``, which
   works only in a main thread, and some of its comparisons cannot be interrupted
   at all), killed when it overruns the per-call timeout.

Two ways in:

- `score` for plain synchronous code (evaluation scripts): one worker process per
  Python process, started on first use, killed at interpreter exit.
- `Grader` for the rollout engine: an async context manager owning a small pool of
  workers, on any anyio backend (asyncio or trio).

`answer_format` reports what the learner's format penalty needs (missing or
malformed ``<answer>`` block, number of blocks).
"""

from __future__ import annotations

import atexit
import enum
import os
import re
import threading
from typing import final

import anyio
import msgspec

from rstar2_async._grade_worker import (
    WORKER_FAILURES,
    WORKER_START_TIMEOUT_S,
    AsyncWorker,
    GraderBrokenError,
    GradeRequest,
    SyncWorker,
)
from rstar2_async.answer_norm import MAX_ANSWER_CHARS, answers_match

__all__ = [
    "GRADING_TIMEOUT_S",
    "WORKER_START_TIMEOUT_S",
    "AnswerFormat",
    "Grader",
    "GraderBrokenError",
    "GraderStatistics",
    "answer_format",
    "extract_answer",
    "score",
]

GRADING_TIMEOUT_S = 10.0
"""Default wall-clock limit on one math-verify grading.  Real answers grade in
milliseconds; math-verify's own limits are 5 s per step, so anything near 10 s is a
pathological expression (a tower of powers, a huge factorial) that is wrong anyway."""

# --- answer extraction --------------------------------------------------------------


class AnswerFormat(msgspec.Struct, frozen=True):
    """How a response presents its final answer; what the format penalty reads.

    Invariants: ``boxed_in_answer`` implies ``answer_blocks >= 1`` and ``answer is not
    None``.  Travels from the reward to GRPO-RoC and the learner.
    """

    answer_blocks: int
    """Complete ``<answer>...</answer>`` pairs."""
    unmatched_tags: int
    """``<answer>`` never closed or reopened inside a block, and ``</answer>`` with no
    opening tag."""
    boxed_in_answer: bool
    """Whether the last complete block holds a readable ``\\boxed{}``."""
    answer: str | None
    """The extracted final answer (see `extract_answer`)."""

    @property
    def well_formed(self) -> bool:
        """Exactly one answer block, no stray tags, and a boxed answer inside it."""
        return self.answer_blocks == 1 and self.unmatched_tags == 0 and self.boxed_in_answer


_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_TAG = re.compile(r"<(/?)answer>")
_BARE_ARGUMENT = re.compile(r"[^\s$<]+")
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character, or a brace


def _brace_pairs(text: str) -> dict[int, int]:
    """Map each `{` that is closed to its `}`, in one pass (`\\{`, `\\}` are literals).

    One pass for the whole text keeps extraction linear even in a degenerate
    response full of unclosed boxes."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        if m[0] == "{":
            stack.append(m.start())
        elif m[0] == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _last_boxed(text: str) -> str | None:
    """Contents of the last readable box; boxes nested in a taken box do not count."""
    pairs: dict[int, int] | None = None
    last = None
    resume = 0
    for m in _BOX.finditer(text):
        if m.start() < resume:
            continue
        i = m.end()
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("{", i):
            pairs = _brace_pairs(text) if pairs is None else pairs
            if i not in pairs:  # truncated mid-box
                continue
            content, resume = text[i + 1 : pairs[i]].strip(), pairs[i] + 1
        elif bare := _BARE_ARGUMENT.match(text, i):  # `\boxed 5`
            content, resume = bare[0], bare.end()
        else:
            continue
        if content:
            last = content
    return last


def answer_format(text: str) -> AnswerFormat:
    """Find the ``<answer>`` blocks and the final answer of one response.  Linear time."""
    blocks: list[tuple[int, int]] = []
    unmatched = 0
    open_at: int | None = None
    for m in _TAG.finditer(text):
        if not m[1]:  # <answer>
            unmatched += open_at is not None
            open_at = m.end()
        elif open_at is None:  # </answer> with nothing open
            unmatched += 1
        else:
            blocks.append((open_at, m.start()))
            open_at = None
    unmatched += open_at is not None
    in_block = _last_boxed(text[blocks[-1][0] : blocks[-1][1]]) if blocks else None
    return AnswerFormat(
        answer_blocks=len(blocks),
        unmatched_tags=unmatched,
        boxed_in_answer=in_block is not None,
        answer=in_block if in_block is not None else _last_boxed(text),
    )


def extract_answer(text: str) -> str | None:
    """The final answer of a response, or None if it has no readable ``\\boxed{}``.

    The last box inside the last complete ``<answer>`` block wins; without one, the
    last box anywhere.  Nested braces and ``\\{``/``\\}`` are handled; a box cut off
    before its closing brace is skipped.
    """
    return answer_format(text).answer


_PLAIN_INT = re.compile(r"\s*[-+]?\d{1,50}\s*")
"""An integer literal (no separators): exact, so the normaliser's "no" is final."""


def _quick_verdict(response_text: str, gold: str) -> tuple[float | None, str]:
    """(verdict, answer): a verdict reached without math-verify, else (None, answer)."""
    answer = extract_answer(response_text)
    if answer is None or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return 0.0, ""
    if answers_match(answer, gold):
        return 1.0, answer
    if _PLAIN_INT.fullmatch(answer) and _PLAIN_INT.fullmatch(gold):
        return 0.0, answer  # two different integers: math-verify cannot disagree
    return None, answer


def _alarm_seconds(timeout: float) -> int:
    """math-verify's own per-step limit: its three alarms together stay within
    `timeout`, so a slow comparison usually ends without losing the worker."""
    return int(timeout // 3)


# --- grading: the sync score() and the async Grader --------------------------------


_sync_lock = threading.Lock()
_sync_worker: SyncWorker | None = None


@atexit.register
def _kill_sync_worker() -> None:
    global _sync_worker
    with _sync_lock:
        if _sync_worker is not None and _sync_worker.owner_pid == os.getpid():
            _sync_worker.kill()
        _sync_worker = None


def score(response_text: str, gold: str, *, timeout: float = GRADING_TIMEOUT_S) -> float:
    """Grade one response against the gold answer: 1.0 if right, else 0.0.

    Synchronous, for plain code.  Calls from several threads are safe and take turns
    on this process's one worker; `timeout` bounds the grading itself, not the wait
    for a turn.  Do not call it from inside an event loop (it blocks); use `Grader`.

    Resource handling: the worker starts on the first call that needs math-verify,
    is replaced after a call that overran `timeout` (that call returns 0.0), and is
    killed at interpreter exit.  A forked child starts its own.

    Raises:
        GraderBrokenError: no worker could be started.
        ValueError: `timeout` <= 0.
    """
    global _sync_worker
    if not timeout > 0:
        raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
    verdict, answer = _quick_verdict(response_text, gold)
    if verdict is not None:
        return verdict
    request = GradeRequest(answer=answer, gold=gold, alarm_s=_alarm_seconds(timeout))
    with _sync_lock:
        if _sync_worker is None or _sync_worker.owner_pid != os.getpid():
            _sync_worker = SyncWorker()
        reply = _sync_worker.grade(request, timeout)
        if reply is None:
            _sync_worker.kill()
            _sync_worker = None
            return 0.0
    return 1.0 if reply.correct else 0.0


class GraderStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a `Grader`.  Counters cover its whole life."""

    max_workers: int
    workers_alive: int
    """Started and not yet killed (idle or busy)."""
    workers_busy: int
    tasks_waiting: int
    """Callers queued for a free worker."""
    graded: int
    """`Grader.score` calls that returned a verdict."""
    correct: int
    by_normaliser: int
    """Of `correct`, those accepted by `answer_norm` without a worker."""
    without_worker: int
    """Of `graded`, those settled without math-verify (right or wrong)."""
    timeouts: int
    """Gradings cut off at the per-call timeout (0.0, worker killed)."""
    worker_crashes: int
    """Workers that died or broke the protocol mid-grading (0.0, worker replaced)."""
    workers_started: int


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class Grader:
    """Async grader for the rollout engine: a pool of math-verify worker processes.

    Use as ``async with Grader(workers=4) as grader: r = await grader.score(text,
    gold)``, from any number of tasks, on asyncio or trio.

    Args:
        workers: most worker processes alive at once (and concurrent gradings).
        timeout: wall-clock limit in seconds on one grading by a worker (queueing for
            a free worker and starting a replacement do not count).  math-verify's
            own alarms are set to a third of it, in whole seconds (off below 3 s).

    Resource handling: entering starts all workers and returns once each has graded
    a warm-up (a start that overruns `WORKER_START_TIMEOUT_S` raises).  A grading
    that overruns `timeout`, or whose worker dies, returns 0.0; that worker is
    killed and a fresh one is started by the next call that needs one.  Exiting
    kills and reaps every worker, busy ones included, so no process outlives the
    block.

    Raises:
        RuntimeError: entering a grader twice, or after it closed.
        ValueError: `workers` < 1 or `timeout` <= 0.
    """

    def __init__(self, workers: int = 2, *, timeout: float = GRADING_TIMEOUT_S) -> None:
        if workers < 1:
            raise ValueError(f"workers: expected int >= 1, got {workers!r}")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        self._max_workers = workers
        self._timeout = timeout
        self._state = _State.UNOPENED
        self._slots = anyio.Semaphore(workers)
        self._idle: list[AsyncWorker] = []
        self._alive: set[AsyncWorker] = set()
        self._busy = 0
        self._graded = self._correct = self._by_normaliser = self._without_worker = 0
        self._timeouts = self._crashes = self._started = 0

    async def __aenter__(self) -> Grader:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"cannot open a Grader that is {self._state.value}")
        self._state = _State.OPEN
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
        worker = await AsyncWorker.start()
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
            raise RuntimeError("Grader.score() before `async with Grader()` opened it")
        if self._state is _State.CLOSED:
            raise anyio.ClosedResourceError

    async def score(self, response_text: str, gold: str) -> float:
        """Grade one response against the gold answer: 1.0 if right, else 0.0.

        Waits for a free worker when all are busy.  Cancellation-safe: a cancelled
        call leaves no request half-answered (its worker is killed and replaced) and
        the pool usable.

        Raises:
            RuntimeError: the grader was never opened.
            anyio.ClosedResourceError: the grader closed (before or during the call).
            GraderBrokenError: a replacement worker could not be started.
        """
        self._check_open()
        verdict, answer = _quick_verdict(response_text, gold)
        if verdict is not None:
            self._by_normaliser += verdict == 1.0
            self._without_worker += 1
            return self._count(verdict)
        request = GradeRequest(answer=answer, gold=gold, alarm_s=_alarm_seconds(self._timeout))
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
                return self._count(0.0)
            except BaseException:  # cancelled mid-request: the worker's state is unknown
                await self._discard(worker)
                raise
            finally:
                self._busy -= 1
            if reply is None:
                await self._discard(worker)
                self._timeouts += 1
                return self._count(0.0)
            self._idle.append(worker)
            return self._count(1.0 if reply.correct else 0.0)

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
        )
