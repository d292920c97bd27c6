"""``SandboxPool``: N warm jailed workers behind one FIFO queue.

    async with SandboxPool(config) as pool:
        result = await pool.run("print(1 + 1)")

One task group owns a slot task per worker, and a keeper of ``spares`` started
workers.  A slot takes the oldest call from the queue, sends it to its worker and
waits at most ``timeout + hang_grace_s`` for the reply.  A worker that dies or
hangs is killed and replaced at once, by a spare when one is ready (the keeper
then starts another), else by a worker started on the spot; the call it held is
retried once on the replacement, then answered ``internal``.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import time
import uuid
from collections import Counter
from types import TracebackType
from typing import final

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from . import _jail
from ._config import SandboxConfig
from ._errors import SandboxBroken, SandboxClosed
from ._process import CallFrame, WorkerDied, WorkerProcess
from ._queue import FifoQueue, QueueFull
from ._spares import Spares
from ._types import ExecResult, Status

log = logging.getLogger("sandbox")

REPLACE_ATTEMPTS = 5
"""Starts a slot tries before it gives up on a replacement: one killed while it
starts (the OOM killer, an operator, a chaos test) is not a broken host."""


class PoolState(enum.Enum):
    """Lifecycle of a pool: UNOPENED -> OPEN -> CLOSED (never back)."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class PoolStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a pool, taken without waiting.  Counters only grow."""

    state: str
    workers: int
    """Configured number of workers."""
    workers_alive: int
    workers_busy: int
    queue_depth: int
    """Calls waiting for a worker."""
    max_queue: int
    calls: int
    """Calls answered (any status)."""
    by_status: dict[str, int]
    retries: int
    """Calls retried because their worker died or hung."""
    worker_starts: int
    worker_failures: int
    """Workers that died or hung (not counting planned recycling)."""
    layers: dict[str, bool]
    """Isolation layers in use: jail (bubblewrap), landlock, seccomp."""
    spares_ready: int = 0
    """Started workers waiting to replace one."""
    spares_taken: int = 0
    """Replacements that were a ready spare (the rest were started on the spot)."""


class _Job:
    __slots__ = ("code", "stdin", "timeout", "result", "done", "abandoned", "t0")

    def __init__(self, code: str, stdin: str, timeout: float) -> None:
        self.code, self.stdin, self.timeout = code, stdin, timeout
        self.result: ExecResult | None = None
        self.done = anyio.Event()
        self.abandoned = False
        self.t0 = time.monotonic()


@final
class SandboxPool:
    """A pool of warm, jailed Python workers; implements :class:`sandbox.Sandbox`.

    Args:
        config: limits and sizes; defaults to ``SandboxConfig()``.

    Resource handling: the pool is an async context manager and owns every
    process it starts.  On exit (normal, error or cancellation of the
    surrounding scope) every worker and everything in its jail is killed and
    reaped before ``__aexit__`` returns.  Calls still queued or running get an
    ``internal`` result ("pool closed").

    Error handling: ``run`` answers everything the code does with a status.  If
    workers cannot be started at all, the pool raises :class:`SandboxBroken`
    (from ``__aenter__``, or from ``__aexit__`` after cancelling its body).
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.id = uuid.uuid4().hex[:12]
        """Unique per pool; on the command line of all of its processes."""
        self._state = PoolState.UNOPENED
        self._queue: FifoQueue[_Job] = FifoQueue(self.config.max_queue)
        self._tg: TaskGroup | None = None
        self._ids = itertools.count(1)
        self._workers: dict[int, WorkerProcess] = {}
        self._busy: set[int] = set()
        self._by_status: Counter[str] = Counter()
        self._retries = 0
        self._starts = 0
        self._failures = 0
        self._layers: dict[str, bool] = {}
        self._spec_args: tuple | None = None
        self._spares = Spares(self.config.spares, self._start)

    # -- lifecycle ---------------------------------------------------------------
    @property
    def state(self) -> PoolState:
        return self._state

    async def __aenter__(self) -> SandboxPool:
        """Check the machine, start every worker, return once all are ready.

        Raises:
            RuntimeError: the pool was entered before (it cannot be reused).
            SandboxUnavailable: the machine cannot jail and ``insecure`` is off.
            SandboxBroken: a worker failed to start.
        """
        if self._state is not PoolState.UNOPENED:
            raise RuntimeError(f"SandboxPool: cannot open a pool that is {self._state.value} (pools are single-use)")
        cfg = self.config
        host = await anyio.to_thread.run_sync(_jail.check_host)
        self._layers = _jail.resolve_layers(cfg, host)
        interp = await anyio.to_thread.run_sync(
            _jail.inspect_interpreter, cfg.python or _jail.default_python(), tuple(cfg.packages)
        )
        self._spec_args = (cfg, interp, host, self._layers, self.id)
        self._state = PoolState.OPEN
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            async with anyio.create_task_group() as starter:
                for index in range(cfg.resolved_workers):
                    starter.start_soon(tg.start, self._slot, index)
            if cfg.spares:
                tg.start_soon(self._spares.keep)
        except BaseException as exc:
            tg.cancel_scope.cancel()
            self._state = PoolState.CLOSED
            try:
                await tg.__aexit__(None, None, None)
            except BaseException:  # noqa: BLE001 - the start-up error below says more
                pass
            broken = _first(exc, SandboxBroken)
            if broken is not None:
                raise broken from None
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        """Close: answer waiting calls ``internal``, kill and reap every worker."""
        assert self._tg is not None
        self._state = PoolState.CLOSED
        for job in self._queue.drain():
            self._finish(job, _internal("sandbox pool closed before the call ran", job))
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            broken = _first(group, SandboxBroken)
            if broken is not None:
                raise broken from group
            raise

    # -- the API -------------------------------------------------------------------
    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        """Run ``code`` in a fresh jailed process; wait for and return its one result.

        Calls are served in arrival order.  ``duration_s`` of the result covers
        the whole call as the pool saw it: queueing plus execution.

        Raises:
            RuntimeError: the pool was never opened.
            SandboxClosed: the pool is closed.
            ValueError: ``timeout`` is not in ``(0, sandbox.max_timeout_s]``.

        Cancellation: a cancelled caller's queued call is withdrawn; a running one
        finishes in its worker (bounded by its timeout) and its result is dropped.
        """
        if self._state is not PoolState.OPEN:
            if self._state is PoolState.UNOPENED:
                raise RuntimeError("SandboxPool.run: the pool is not open; use `async with SandboxPool(...)`")
            raise SandboxClosed("SandboxPool.run: the pool is closed")
        if not (0 < timeout <= self.config.max_timeout_s) or math.isnan(timeout):
            raise ValueError(f"timeout: expected 0 < timeout <= {self.config.max_timeout_s} (sandbox.max_timeout_s), got {timeout!r}")
        job = _Job(code, stdin, timeout)
        too_big = self._too_big(code, stdin)
        if too_big:
            return self._count(ExecResult("error", stderr=too_big, duration_s=0.0))
        try:
            self._queue.put_nowait(job)
        except QueueFull:
            return self._count(_internal(f"sandbox queue full ({self.config.max_queue} calls waiting)", job))
        try:
            await job.done.wait()
        except BaseException:
            job.abandoned = True
            self._queue.discard(job)
            raise
        assert job.result is not None
        return job.result

    def ready_pids(self) -> list[int]:
        """Host pids of the workers serving the slots now (each jail's outermost
        process; started and ready, spares not counted): where fault injection aims."""
        return [worker.pid for worker in self._workers.values()]

    def statistics(self) -> PoolStatistics:
        """A frozen snapshot of the pool (never waits)."""
        return PoolStatistics(
            state=self._state.value,
            workers=self.config.resolved_workers,
            workers_alive=len(self._workers),
            workers_busy=len(self._busy),
            queue_depth=len(self._queue),
            max_queue=self.config.max_queue,
            calls=sum(self._by_status.values()),
            by_status=dict(self._by_status),
            retries=self._retries,
            worker_starts=self._starts,
            worker_failures=self._failures + self._spares.died,
            layers=dict(self._layers),
            spares_ready=len(self._spares),
            spares_taken=self._spares.taken,
        )

    # -- slots ---------------------------------------------------------------------
    async def _slot(self, index: int, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """One worker's life: take calls in order, replace the worker when needed."""
        worker = await self._spawn(index)
        task_status.started()
        try:
            while True:
                job = await self._next_job(worker)
                if job is None:  # died while idle
                    self._failures += 1
                    log.warning("sandbox worker %d died while idle (exit %s); replacing it", index, worker.process.returncode)
                    worker = await self._replace(worker, index)
                    continue
                worker = await self._serve(job, worker, index)
                if worker.calls >= self.config.recycle_after:
                    worker = await self._replace(worker, index)
        finally:
            self._workers.pop(index, None)
            await worker.aclose()

    async def _next_job(self, worker: WorkerProcess) -> _Job | None:
        """The next call, or None if the worker exits first."""
        if worker.process.returncode is None and len(self._queue):
            await anyio.lowlevel.checkpoint()  # stay fair to other tasks under a long queue
            try:
                return self._queue.get_nowait()  # fast path: no watcher task needed
            except anyio.WouldBlock:
                pass  # another slot took it during the checkpoint
        job: _Job | None = None
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await worker.wait_exit()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            job = await self._queue.get()
            tg.cancel_scope.cancel()
        return job

    async def _serve(self, job: _Job, worker: WorkerProcess, index: int) -> WorkerProcess:
        """Run ``job`` on ``worker`` (retrying once on a fresh one); return the worker to keep."""
        self._busy.add(index)
        try:
            why = ""
            for attempt in (1, 2):
                if job.abandoned:
                    return worker
                frame = CallFrame(next(self._ids), job.code, job.stdin, job.timeout)
                try:
                    with anyio.fail_after(job.timeout + self.config.hang_grace_s):
                        reply = await worker.call(frame)
                except (WorkerDied, TimeoutError) as e:
                    why = "hung" if isinstance(e, TimeoutError) else f"died ({e})"
                    self._failures += 1
                    log.warning("sandbox worker %d %s during a call (attempt %d); replacing it", index, why, attempt)
                    if attempt == 1:
                        self._retries += 1
                    worker = await self._replace(worker, index)
                    continue
                self._finish(job, ExecResult(
                    reply.status, reply.stdout, reply.stderr, reply.exit_code, time.monotonic() - job.t0
                ))
                return worker
            self._finish(job, _internal(f"sandbox worker {why}; retried once on a fresh worker, which failed too", job))
            return worker
        finally:
            self._busy.discard(index)
            if job.result is None:  # cancelled (pool closing) before an answer
                self._finish(job, _internal("sandbox pool closed while the call ran", job))

    async def _start(self) -> WorkerProcess:
        assert self._spec_args is not None
        spec = _jail.worker_spec(*self._spec_args)
        worker = await WorkerProcess.start(spec, self.config.start_timeout_s)
        self._starts += 1
        return worker

    async def _spawn(self, index: int) -> WorkerProcess:
        worker = await self._start()
        self._workers[index] = worker
        return worker

    async def _replace(self, worker: WorkerProcess, index: int) -> WorkerProcess:
        self._workers.pop(index, None)
        spare = self._spares.take()
        if spare is not None:
            assert self._tg is not None
            self._tg.start_soon(worker.aclose)  # killing and reaping the old jail: off the call path
            self._workers[index] = spare
            return spare
        await worker.aclose()
        for attempt in range(1, REPLACE_ATTEMPTS):
            try:
                return await self._spawn(index)
            except SandboxBroken as e:
                log.warning("sandbox worker %d failed to start (attempt %d): %s", index, attempt, str(e).splitlines()[0])
        try:
            return await self._spawn(index)
        except SandboxBroken as e:
            raise SandboxBroken(f"sandbox worker {index} could not be replaced ({REPLACE_ATTEMPTS} starts failed)") from e

    # -- helpers -----------------------------------------------------------------
    def _too_big(self, code: str, stdin: str) -> str:
        cfg = self.config
        if len(code) > cfg.max_code_bytes or len(code.encode("utf-8", "surrogatepass")) > cfg.max_code_bytes:
            return f"[sandbox] code is larger than sandbox.max_code_bytes ({cfg.max_code_bytes})"
        if len(stdin) > cfg.max_stdin_bytes or len(stdin.encode("utf-8", "surrogatepass")) > cfg.max_stdin_bytes:
            return f"[sandbox] stdin is larger than sandbox.max_stdin_bytes ({cfg.max_stdin_bytes})"
        return ""

    def _count(self, result: ExecResult) -> ExecResult:
        self._by_status[result.status] += 1
        return result

    def _finish(self, job: _Job, result: ExecResult) -> None:
        if job.result is None:
            job.result = self._count(result)
            job.done.set()


def _internal(message: str, job: _Job) -> ExecResult:
    status: Status = "internal"
    return ExecResult(status, stderr=f"[sandbox] {message}", duration_s=time.monotonic() - job.t0)


def _first(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc`` or its (nested) groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _first(sub, kind)
            if found is not None:
                return found
    return None
