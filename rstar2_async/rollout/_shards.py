"""One rollout over many processes: :class:`ShardedEngine`.

Where one process cannot keep up (at rStar2's scale its event loop stalls for
seconds), the rollout runs in N worker processes, each with its own engine over its
share of the servers (built by a factory, see :class:`ShardSpec`), behind the
contract of :class:`RolloutEngine`: ``stream``, ``run``, ``statistics``.

The parent routes each problem to the worker with the fewest trajectories
outstanding, once that worker has room (fewer outstanding than its engine's
``max_in_flight``: as one engine takes the next problem once the last is admitted),
and keeps, per stream, which problems each worker holds and which of their
trajectories came back (``_shard_books``).  A worker that dies is started again and
given its unfinished problems again, with the trajectories already back as
``finished``, so none runs twice and no group is yielded twice.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Self, Unpack, final

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream

from backends import PoolStatistics

from ..errors import ShardError
from ..types import Group, Problem
from ._chat_template import ChatTokenizer
from ._engine import RolloutStatistics, StreamOptions, check_limits, in_order
from ._shard_books import Shard, ShardBooks, Stream
from ._shard_process import HANG_TIMEOUT_S, ShardProcess
from ._shard_wire import Barrier, Hold, Open, Release, ShardSpec, ToWorker

__all__ = ["ShardedEngine"]


@final
class ShardedEngine:
    """:class:`RolloutEngine`'s contract (``stream``, ``run``, ``statistics``) over
    N worker processes, one per spec.

    Args:
        specs: one per worker, ``specs[i].shard == i``, ``shards == len(specs)``.
        tokenizer: for the parent's own use (records); the workers have their own.
        restarts: how many times in a row a worker may be started again after it
            died (a trajectory coming back resets the count); one more death
            fails every open stream with :class:`ShardError`.
        python: the workers' interpreter.
        env: variables set in the workers' environment, over this process's.
        hang_timeout_s: a worker silent this long (it reports every second) is hung:
            killed and started again, as if it had died.

    Resource handling: ``async with`` starts every worker and returns once each
    factory's stack is up; leaving it stops them all (EOF on their stdin, which
    closes their stacks; after a grace SIGTERM, then SIGKILL) and reaps them,
    however the block ends.
    """

    def __init__(
        self,
        specs: Sequence[ShardSpec],
        *,
        tokenizer: ChatTokenizer | None = None,
        restarts: int = 3,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        hang_timeout_s: float = HANG_TIMEOUT_S,
    ) -> None:
        if not specs:
            raise ValueError("specs: expected at least one ShardSpec, got none")
        for i, spec in enumerate(specs):
            if spec.shard != i or spec.shards != len(specs):
                raise ValueError(f"specs[{i}]: expected shard={i}, shards={len(specs)}; got shard={spec.shard}, shards={spec.shards}")
        if restarts < 0:
            raise ValueError(f"restarts: expected int >= 0, got {restarts}")
        if not hang_timeout_s > 0:
            raise ValueError(f"hang_timeout_s: expected > 0, got {hang_timeout_s}")
        self.tokenizer = tokenizer
        self._books = ShardBooks(specs)
        self._restarts, self._python, self._env = restarts, python, env
        self._hang_timeout_s = hang_timeout_s
        self._ids = itertools.count()
        self._closing = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack = contextlib.AsyncExitStack()
        self._t0 = time.monotonic()

    async def __aenter__(self) -> Self:
        """Start every worker; return once each sent ``Ready``.

        Raises:
            ShardError: a worker could not start (its factory raised, or it exited):
                the first such, naming the worker, with its exit code and stderr's end.
        """
        if self._tg is not None:
            raise RuntimeError("ShardedEngine: already entered")
        self._tg = tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._t0 = time.monotonic()
        try:
            async with anyio.create_task_group() as starting:
                for shard in self._books.shards:
                    starting.start_soon(tg.start, self._supervise, shard)
        except BaseException as exc:
            tg.cancel_scope.cancel()  # stops the workers that did start (shielded, see ShardProcess.open)
            await self.__aexit__(None, None, None)
            if isinstance(exc, BaseExceptionGroup) and (errors := exc.subgroup(ShardError)) is not None:
                raise _first(errors) from None
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Stop every worker (see the class's resource handling); no process is left."""
        self._closing = True
        for shard in self._books.shards:
            if shard.process is not None:
                shard.process.close_input()
        await self._stack.aclose()

    # -- the engine's contract ---------------------------------------------------------

    @contextlib.asynccontextmanager
    async def stream(
        self,
        problems: Iterable[Problem] | AsyncIterable[Problem],
        n: int,
        **options: Unpack[StreamOptions],
    ) -> AsyncIterator[MemoryObjectReceiveStream[Group]]:
        """:meth:`RolloutEngine.stream` over the workers: groups as they finish; a
        group's ``problem`` is the object fed; several streams may be open at once.

        Each problem goes to one worker (fewest trajectories outstanding, once it
        has room); ``finished`` samples fill their slots here and are sent along,
        not re-run; ``on_trajectory`` is called here, for each trajectory as it
        comes back.  One problem (the same id, or the same object) may be in flight
        twice: each is its own group.

        Leaving the block, however, cancels what still runs of it in the workers
        (a message to each, queued; nothing is awaited).

        Raises:
            ShardError: a worker died more than ``restarts`` times in a row.
            ValueError: ``n`` or a limit is below 1.
        """
        if n < 1:
            raise ValueError(f"n: expected int >= 1, got {n}")
        max_turns, max_response_tokens = options.get("max_turns"), options.get("max_response_tokens")
        check_limits(max_turns, max_response_tokens)
        self._check_usable()
        books = self._books
        sid = next(self._ids)
        open_ = Open(
            stream=sid, n=n, sampling=options.get("sampling"), max_turns=max_turns, max_response_tokens=max_response_tokens
        )
        send, receive = anyio.create_memory_object_stream[Group](math.inf)
        stream = books.streams[sid] = Stream(open_, options.get("finished") or {}, options.get("on_trajectory"), send)
        books.broadcast(open_)
        try:
            with stream.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._feed, stream, problems)
                    async with receive:
                        try:
                            yield receive
                        finally:
                            tg.cancel_scope.cancel()
        finally:
            books.drop(stream)
        if stream.error is not None:
            raise stream.error

    async def run(self, problems: Sequence[Problem], n: int, **options: Unpack[StreamOptions]) -> list[Group]:
        """All groups, in the order of ``problems``.  Arguments as for :meth:`stream`."""
        return await in_order(problems, self.stream(problems, n, **options))

    def statistics(self) -> RolloutStatistics:
        """The workers' latest reports summed (a dead worker's counters included;
        ``elapsed_s`` since the engine started).  A worker reports with each group
        and every second between."""
        return self._books.statistics(self._t0)

    def pool_statistics(self) -> list[PoolStatistics]:
        """Each worker's pool's latest report, in worker order; ``[]`` without pools."""
        return self._books.pool_statistics()

    def turns_interrupted(self) -> int:
        """Generations a pause interrupted (cut short and resumed, or frozen through a
        ``keep`` sync), over every worker's servers."""
        return self._books.turns_interrupted()

    def pids(self) -> list[int | None]:
        """Each worker's process id now (``None`` while it restarts)."""
        return [None if s.process is None else s.process.pid for s in self._books.shards]

    def restarts(self) -> list[int]:
        """How many times each worker was started again after it died."""
        return [s.restarts for s in self._books.shards]

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Inside: every worker's pool admits no new turn (turns in flight go on).
        Entered once every worker acknowledged; released however the block ends.
        A worker restarted meanwhile is held again before it gets work.

        Raises:
            ShardError: a worker died more than ``restarts`` times in a row.
        """
        async with self._acknowledged(self._books.holds, Hold, Release):
            yield

    async def applied(self) -> None:
        """Returns once every worker has acted on what it was told before the call
        (:meth:`set_weight_version`, :meth:`take_out`): a weight sync awaits it before
        the servers resume, so a turn the pause cut short is stamped with the new
        version by a pool that has it.  A worker started again meanwhile is told
        again first; the statistics then hold every worker's counters as they were.

        Raises:
            ShardError: a worker died more than ``restarts`` times in a row.
        """
        async with self._acknowledged(self._books.barriers, Barrier):
            pass

    @contextlib.asynccontextmanager
    async def _acknowledged(
        self, pending: set[int], ask: Callable[[int], ToWorker], end: Callable[[int], ToWorker] | None = None
    ) -> AsyncIterator[None]:
        """Sends ``ask(token)`` to every worker (``pending`` has the token while the
        block lasts, so a worker started again is asked too) and enters once each
        acknowledged it; ``end(token)`` goes to every worker however the block ends."""
        self._check_usable()
        books = self._books
        token = next(self._ids)
        pending.add(token)
        try:
            books.broadcast(ask(token))
            while not all(token in s.acked for s in books.shards):
                self._check_usable()
                await books.changed.wait()
            yield
        finally:
            pending.discard(token)
            for shard in books.shards:
                shard.acked.discard(token)
            if end is not None:
                books.broadcast(end(token))

    def set_weight_version(self, version: int, servers: Sequence[int] | None = None) -> None:
        """``pool.set_weight_version`` in every worker (and in a worker started
        again later); ``servers`` are the fleet's indexes, each worker serves those
        of its :meth:`ShardSpec.share`.  Sent, not awaited: :meth:`applied` waits."""
        self._books.set_weight_version(version, servers)

    def take_out(self, servers: Sequence[int]) -> None:
        """Take the fleet's ``servers`` out of the rotation of the workers serving
        them (a weight sync could not load them); each comes back through its
        worker's pool's ``on_server_back`` (``backends.follow_versions``); a worker
        started again is told too, until a later version reaches them."""
        self._books.take_out(servers)

    # -- driving ---------------------------------------------------------------------

    async def _feed(self, stream: Stream, problems: Iterable[Problem] | AsyncIterable[Problem]) -> None:
        if isinstance(problems, AsyncIterable):
            async for problem in problems:
                await self._place(stream, problem)
        else:
            for problem in problems:
                await self._place(stream, problem)
        self._books.fed(stream)

    async def _place(self, stream: Stream, problem: Problem) -> None:
        await anyio.lowlevel.checkpoint()
        while (shard := self._books.roomiest()) is None:
            await self._books.changed.wait()
        self._books.place(stream, problem, shard)

    async def _supervise(self, shard: Shard, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run ``shard``'s worker, again each time it dies, until the engine closes.
        Reports started once the first one is ready; its start failure is raised."""
        started = False
        while not self._closing:
            try:
                async with ShardProcess.open(shard.spec, self._python, self._env) as process:
                    ready = await process.ready()
                    self._books.attach(shard, process, ready.capacity)
                    if self._closing:  # started while the engine closes: let it go at once
                        process.close_input()
                    if not started:
                        started = True
                        task_status.started()
                    async for message in process.messages(self._hang_timeout_s):
                        self._books.on_message(shard, message)
                    self._books.detach(shard)
                    if self._closing:
                        return
                    silent = f"hung (silent {self._hang_timeout_s:g} s), killed"
                    error = await process.failure(silent if process.hung else "died")
            except ShardError as exc:  # it could not start
                if not started:
                    raise
                error = exc
            shard.failures += 1
            shard.restarts += 1
            if shard.failures > self._restarts:
                self._books.break_(ShardError(
                    f"{error} (died {shard.failures} times in a row; restarts={self._restarts})",
                    shard=error.shard, exit_code=error.exit_code, stderr_tail=error.stderr_tail,
                ))  # fmt: skip
                return

    def _check_usable(self) -> None:
        if self._tg is None or self._closing:
            raise RuntimeError("ShardedEngine: use it inside its `async with` block")
        if self._books.broken is not None:
            raise self._books.broken


def _first(group: BaseExceptionGroup[ShardError]) -> ShardError:
    error = group.exceptions[0]
    return error if isinstance(error, ShardError) else _first(error)  # type: ignore[arg-type]
