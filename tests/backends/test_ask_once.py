"""``AskOnce``: the token and chat clients' context length, asked once for a wave of turns."""

from __future__ import annotations

import anyio
import pytest

from backends._ask_once import AskOnce

pytestmark = pytest.mark.anyio


class FakeServer:
    """Test double: answers ``(value, known)`` once ``gate`` is set, counting questions."""

    def __init__(self, *answers: tuple[int | None, bool]) -> None:
        self.answers = list(answers)
        self.asked = 0
        self.gate = anyio.Event()

    async def ask(self) -> tuple[int | None, bool]:
        self.asked += 1
        await self.gate.wait()
        return self.answers.pop(0)


async def test_a_wave_of_callers_asks_once_and_a_cancelled_waiter_strands_no_one() -> None:
    server = FakeServer((2048, True))
    once = AskOnce(server.ask, None)
    got: list[int | None] = []

    async def get() -> None:
        got.append(await once.get())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(get)
        await anyio.wait_all_tasks_blocked()  # one of them asks (trio starts tasks in any order)
        async with anyio.create_task_group() as inner:  # a turn cancelled while it waits for the answer
            cancelled = anyio.CancelScope()

            async def waiter_cancelled() -> None:
                with cancelled:
                    await once.get()

            inner.start_soon(waiter_cancelled)
            await anyio.wait_all_tasks_blocked()
            cancelled.cancel()
        server.gate.set()
    assert got == [2048] * 3 and server.asked == 1
    assert await once.get() == 2048 and server.asked == 1


async def test_an_unknown_answer_goes_to_the_wave_and_the_next_caller_asks_again() -> None:
    server = FakeServer((None, False), (4096, True))
    once = AskOnce(server.ask, None)
    got: list[int | None] = []

    async def get() -> None:
        got.append(await once.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(get)
        tg.start_soon(get)
        await anyio.wait_all_tasks_blocked()
        server.gate.set()
    assert got == [None, None] and server.asked == 1
    assert await once.get() == 4096 and server.asked == 2


async def test_a_cancelled_asker_releases_its_waiters_and_the_next_caller_asks() -> None:
    server = FakeServer((512, True))
    once = AskOnce(server.ask, None)
    got: list[int | None] = []
    async with anyio.create_task_group() as tg:
        asker = anyio.CancelScope()

        async def ask() -> None:
            with asker:
                await once.get()

        async def wait() -> None:
            got.append(await once.get())

        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        asker.cancel()
    assert got == [None] and not once.known
    server.gate.set()
    assert await once.get() == 512 and server.asked == 2
