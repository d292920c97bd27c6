"""The pool's admission wakes what it admits a batch per trip through the loop (asyncio and trio)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from backends._admission import WAKE_BATCH, PoolAdmission, PoolState, Waiter
from backends._dispatch import Dispatcher, Ticket

pytestmark = pytest.mark.anyio
CAPACITY = 100_000


def admission() -> PoolAdmission:
    pool = PoolAdmission(Dispatcher([CAPACITY]), order="budget", unavailable_timeout_s=60.0)
    pool._state = PoolState.OPEN  # what ServerPool's __aenter__ does
    return pool


async def fill(pool: PoolAdmission) -> Ticket:
    """A turn that takes the whole cache: what comes after it waits."""
    return await pool._acquire(Waiter(CAPACITY, None, None, None), CAPACITY)


async def small(pool: PoolAdmission, i: int) -> Ticket:
    """Turn ``i``'s ticket: a small turn, the earlier ``i`` the larger its budget (admitted first)."""
    return await pool._acquire(Waiter(100, None, None, None), 10_000 - i)


@asynccontextmanager
async def all_admitted_at_once(pool: PoolAdmission, n: int, turn: Callable[[int], Awaitable[None]]) -> AsyncIterator[None]:
    """``turn(0..n-1)`` wait behind a turn that fills the cache, which then ends:
    all of them fit at once.  The block runs right after that release."""
    blocker = await fill(pool)
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(turn, i)
        while len(pool._queue) < n:
            await anyio.lowlevel.checkpoint()
        pool._release(blocker)
        yield


async def test_a_release_that_admits_many_wakes_a_batch_and_each_resumed_turn_the_next() -> None:
    pool = admission()
    n = 3 * WAKE_BATCH + 5
    resumed: list[int] = []
    woken_at_resume: list[int] = []

    async def turn(i: int) -> None:
        ticket = await small(pool, i)
        resumed.append(i)
        woken_at_resume.append(pool._woken)
        pool._release(ticket)

    async with all_admitted_at_once(pool, n, turn):
        # Every turn fits and is admitted at once, but only a batch is woken.
        assert len(pool._queue) == 0 and pool._dispatcher.statistics().in_flight == n
        assert len(pool._to_wake) == n - WAKE_BATCH and pool._woken == WAKE_BATCH
    # Woken in the order they were admitted (trio runs the tasks of one wake-up
    # batch in any order): the i-th resumes only after i - WAKE_BATCH others.
    assert sorted(resumed) == list(range(n))
    assert all(i < position + WAKE_BATCH for position, i in enumerate(resumed))
    assert max(woken_at_resume) <= WAKE_BATCH
    assert pool._woken == 0 and not pool._to_wake
    assert pool._dispatcher.statistics().in_flight == 0


async def test_an_admitted_turn_cancelled_before_its_wake_gives_back_its_ticket_and_passes_no_wake_on() -> None:
    pool = admission()
    n = WAKE_BATCH + 2
    scopes = [anyio.CancelScope() for _ in range(n)]
    done: list[int] = []

    async def turn(i: int) -> None:
        with scopes[i]:
            ticket = await small(pool, i)
            done.append(i)
            try:
                await anyio.sleep_forever()  # holds its ticket until the test lets go
            finally:
                pool._release(ticket)

    async with all_admitted_at_once(pool, n, turn):
        assert pool._woken == WAKE_BATCH
        scopes[n - 1].cancel()  # admitted, not yet woken: cancelled while it waits
        while len(done) < n - 1:
            await anyio.lowlevel.checkpoint()
        assert pool._woken == 0 and not pool._to_wake
        assert pool._dispatcher.statistics().in_flight == n - 1  # the cancelled turn's ticket came back
        for scope in scopes:
            scope.cancel()
    assert sorted(done) == list(range(n - 1))
