"""The pool's admission: turns wait for room on the dispatcher, in order, and get their tickets.

:class:`PoolAdmission` is the part of :class:`backends.ServerPool` that feeds its
:class:`backends._dispatch.Dispatcher` and its :class:`backends._waitqueue.WaitQueue`:
a turn tries for a ticket, waits in the queue when there is no room (or no
server up, for up to ``unavailable_timeout_s``), and is admitted by the pass that
runs after each release, report, server change and hold's end, which wakes the
turns it admits :data:`WAKE_BATCH` at a time.  The pool adds
the servers, their clients and pollers, and the failover around it.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable
from typing import Final, Literal

import anyio

from ._dispatch import MAX_SESSIONS, Dispatcher, NoServerUp, Ticket
from ._errors import BackendClosed, ServerUnavailable
from ._waitqueue import Waiting, WaitQueue

__all__ = ["WAKE_BATCH", "PoolAdmission", "PoolState", "Waiter"]

WAKE_BATCH: Final = 128
"""Admitted turns woken per trip through the event loop.  A /metrics poll that
finds room can admit thousands of waiting turns at once (4,331 in one pass at
16,384 trajectories over 64 servers, ``benchmarks/paper_scale.py``); woken
together, each encoding and sending its request, they ran in one loop iteration
(260 ms on plain asyncio, ~60 us each).  Woken 128 at a time, each admitted turn
that resumes waking the next, an iteration runs at most 128 of them (~8 ms at that
cost), and the loop's timers, polls and cancellations get their turns in between.
Admission itself (which turns, in which order, on which servers, when) is
unchanged: only the wake-ups are spread."""

_PENDING, _WOKEN = 1, 2  # a Waiter's ``waking`` once admitted (0: not, or done)


class PoolState(enum.Enum):
    """A pool's lifecycle."""

    UNOPENED = 1
    OPEN = 2
    CLOSED = 3


class Waiter(Waiting):
    """A turn waiting for room: the admission pass hands it its ticket."""

    __slots__ = ("deadline", "event", "waking")

    def __init__(self, tokens: int, session: Hashable, avoid: int | None, new_tokens: int | None) -> None:
        super().__init__(tokens, session, avoid, new_tokens)
        self.event = anyio.Event()  # set when it gets a ticket, a deadline, or the pool closes
        self.deadline: float | None = None  # set when it first found no server up
        # Once admitted, _PENDING while it waits its turn to be woken, then _WOKEN
        # (it holds one of the WAKE_BATCH wake-ups until it resumes); 0 when done.
        self.waking = 0


class PoolAdmission:
    """Admission of a pool's turns onto its dispatcher (see the module docstring).

    A base of :class:`backends.ServerPool`, which opens and closes it (``_state``);
    not used alone.
    """

    def __init__(self, dispatcher: Dispatcher, *, order: Literal["budget", "session"], unavailable_timeout_s: float) -> None:
        self.order = order
        self.unavailable_timeout_s = unavailable_timeout_s
        self._dispatcher = dispatcher
        self._state = PoolState.UNOPENED
        # session -> the arrival of its first turn: its place in the "session" order
        self._first_turns: dict[Hashable, int] = {}
        self._changed: anyio.Event | None = None  # made by drained(), set by the next change
        # The turns waiting, keyed (-remaining budget, arrival): the order of admission.
        self._queue: WaitQueue[Waiter] = WaitQueue(dispatcher)
        self._arrivals = itertools.count()
        self._deadlines = False  # a waiting turn may have a deadline (it found no server up)
        self._held = 0
        self._to_wake: deque[Waiter] = deque()  # admitted, not yet woken, in admission order
        self._woken = 0  # admitted turns woken that have not resumed yet (<= WAKE_BATCH)

    def end_session(self, session: Hashable) -> None:
        """The trajectory ``session`` has no more turns: the context its server
        holds for a next turn goes back to the budget now, not 1-2 polls later.
        Call it after the session's last ``generate`` returned; a later turn of
        the same session is dispatched as a new one.  Optional for callers."""
        self._dispatcher.forget(session)
        self._first_turns.pop(session, None)
        self._notify()

    async def _acquire(self, waiter: Waiter, remaining: int) -> Ticket:
        if self._state is not PoolState.OPEN:
            raise BackendClosed(f"ServerPool is {self._state.name}")
        # Nothing changed since the last admission pass, so the turns waiting still
        # do not fit: trying this one alone is the pass.
        # Ranked at every turn, admitted at once or not: a session ranks from its first.
        first = self._rank(waiter.session) if self.order == "session" else -remaining
        tried = not self._held
        if tried and (ticket := self._try(waiter)) is not None:
            return ticket
        waiter.key = (first, next(self._arrivals))
        self._queue.add(waiter, tried=tried)
        try:
            while (ticket := waiter.ticket) is None:
                if self._state is not PoolState.OPEN:
                    raise BackendClosed(f"ServerPool is {self._state.name}")
                if waiter.deadline is None:  # the common wait: no cancel scope to enter and leave
                    await waiter.event.wait()
                else:
                    now = time.monotonic()
                    if now >= waiter.deadline:
                        raise ServerUnavailable(f"no server up for {self.unavailable_timeout_s:g} s")
                    with anyio.move_on_after(waiter.deadline - now):
                        await waiter.event.wait()
                if waiter.ticket is None:  # woken to look again (a deadline, the pool closing)
                    waiter.event = anyio.Event()
        except BaseException:
            if waiter.ticket is None:
                self._queue.remove(waiter)
            else:  # admitted as it was cancelled
                self._woke(waiter)
                self._release(waiter.ticket)
            raise
        self._woke(waiter)
        return ticket

    def _rank(self, session: Hashable) -> int:
        """The session's place in the ``session`` order: the arrival of its first turn."""
        if session is None:
            return next(self._arrivals)
        rank = self._first_turns.get(session)
        if rank is None:
            rank = self._first_turns[session] = next(self._arrivals)
            if len(self._first_turns) > MAX_SESSIONS:  # callers that never end their sessions
                del self._first_turns[next(iter(self._first_turns))]
        return rank

    def _try(self, waiter: Waiter) -> Ticket | None:
        """Ask the dispatcher for the waiter's ticket now; ``None`` if there is no room."""
        try:
            waiter.ticket = self._dispatcher.acquire_nowait(
                waiter.tokens, waiter.session, avoid=waiter.avoid, new_tokens=waiter.new_tokens
            )
        except NoServerUp:
            if waiter.deadline is None:
                waiter.deadline = time.monotonic() + self.unavailable_timeout_s
                waiter.event.set()  # wakes it to time its wait
                self._deadlines = True
        except anyio.WouldBlock:
            waiter.deadline = None  # a server is up: the turn only waits for room
        return waiter.ticket

    def _admit(self) -> None:
        """Try every waiting turn again, largest remaining budget first, and hand
        those that fit their tickets.

        Why that order: a trajectory's remaining budget bounds the work it may
        still do, and which trajectories are long is not known in advance; the
        one that may still run longest goes first (longest remaining time first,
        which shortens the makespan on parallel servers), so that long work does
        not pile up in a tail on an emptying fleet.  First turns have the whole
        budget, so they keep their arrival order and come before later turns.  In
        the dispatch benchmark this cuts the makespan by 2% against oldest
        first (8 seeds: 1.30x static against 1.27x); later turns first
        lengthen it by 3%.

        With ``order="session"`` the oldest session's turn goes first (the
        arrival of its first turn): what a streaming trainer needs, which trains
        groups in the order they started and waits for the oldest; there, new
        trajectories' first turns would otherwise overtake the later turns of the
        group it waits for (``benchmarks/streaming.py``: 1.635x against 1.46x
        synchronous static at staleness 1).

        The :class:`WaitQueue` admits as that loop over every waiting turn would,
        but tries only the turns that can fit after what changed: a release costs
        what it opens, not O(waiting turns).  A turn's wait while no server is up
        is timed from the first pass that found none (``unavailable_timeout_s``);
        the first pass with a server up again ends every such deadline.
        """
        if self._held or self._state is not PoolState.OPEN:
            return
        admitted = self._queue.admit()
        if admitted:
            for waiter in admitted:
                waiter.waking = _PENDING
            self._to_wake.extend(admitted)
            self._wake()
        if not self._dispatcher.servers_up():
            deadline = time.monotonic() + self.unavailable_timeout_s
            for waiter in self._queue:
                if waiter.deadline is None:
                    waiter.deadline = deadline
                    waiter.event.set()  # wakes it to time its wait
                    self._deadlines = True
        elif self._deadlines:
            for waiter in self._queue:
                waiter.deadline = None  # a server is up: the turn only waits for room
            self._deadlines = False

    def _wake(self, everyone: bool = False) -> None:
        """Wake admitted turns, in admission order, while fewer than WAKE_BATCH
        are woken and not yet resumed (``everyone``: all, as the pool closes)."""
        while self._to_wake and (everyone or self._woken < WAKE_BATCH):
            waiter = self._to_wake.popleft()
            if waiter.waking == _PENDING:  # not cancelled meanwhile
                waiter.waking = _WOKEN
                self._woken += 1
                waiter.event.set()

    def _woke(self, waiter: Waiter) -> None:
        """An admitted turn resumed (or was cancelled): its wake-up goes to the next."""
        if waiter.waking == _WOKEN:
            self._woken -= 1
        waiter.waking = 0
        if self._to_wake:
            self._wake()

    def _release(self, ticket: Ticket, generated: int | None = None) -> None:
        self._dispatcher.release(ticket, generated=generated)
        self._notify()

    def _notify(self) -> None:
        self._admit()
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Admit no new turn inside the block (turns in flight go on); turns that
        arrive wait, and are admitted when the block ends, however it ends."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            self._notify()

    async def drained(self, index: int) -> None:
        """Wait until no request of ours is in flight on server ``index``."""
        while self._dispatcher.statistics().servers[index].in_flight:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
