"""``AskOnce``: a server fact fetched once however many turns want it at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, final

import anyio

T = TypeVar("T")


@final
class AskOnce(Generic[T]):
    """The answer of ``ask`` (``(value, known)``), asked by the first caller while the
    others wait for it.  An answer that is not ``known`` (the server could not be
    reached) is what those callers get, and the next caller asks again.

    Not an ``anyio.Lock``: its hand-off to a waiter can be lost when the waiter is
    cancelled at that moment (agronholm/anyio#1145, which the pinned anyio has),
    stranding every later caller; an ``Event`` has no hand-off.  Cancellation: a
    waiter's is its own; the asker's ends the wait of the others (they go on
    without the answer, as when the server cannot be reached).
    """

    def __init__(self, ask: Callable[[], Awaitable[tuple[T, bool]]], unknown: T) -> None:
        self._ask = ask
        self.value = unknown
        self.known = False
        self._asking: anyio.Event | None = None

    async def get(self) -> T:
        if self.known:
            return self.value
        if self._asking is not None:
            await self._asking.wait()
            return self.value
        self._asking = asking = anyio.Event()
        try:
            self.value, self.known = await self._ask()
        finally:
            self._asking = None
            asking.set()
        return self.value
