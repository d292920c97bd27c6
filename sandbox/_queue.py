"""The pool's FIFO queue of calls: bounded, fair, safe to cancel on both ends.

A policy with no tasks of its own (habit 7): callers ``put_nowait``, worker
slots ``await get()``.  Calls are served strictly in arrival order, so no caller
starves; a caller that gives up ``discard``s its call.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class QueueFull(Exception):
    """``put_nowait`` on a full queue (the pool answers such a call with ``internal``)."""


class FifoQueue(Generic[T]):
    """A bounded FIFO with waiting getters.

    Cancellation: a getter cancelled while waiting loses nothing; if it had been
    woken for an item, the wake-up passes to the next getter.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: deque[T] = deque()
        self._getters: deque[anyio.Event] = deque()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def waiting_getters(self) -> int:
        return len(self._getters)

    def put_nowait(self, item: T) -> None:
        """Append ``item``.

        Raises:
            QueueFull: ``maxsize`` items are already waiting.
        """
        if len(self._items) >= self.maxsize:
            raise QueueFull
        self._items.append(item)
        self._wake_one()

    def discard(self, item: T) -> bool:
        """Remove ``item`` if it is still queued; True if it was."""
        try:
            self._items.remove(item)
        except ValueError:
            return False
        return True

    def drain(self) -> list[T]:
        """Remove and return every queued item (used on close)."""
        items = list(self._items)
        self._items.clear()
        return items

    def get_nowait(self) -> T:
        """Remove the oldest item without waiting.

        Raises:
            anyio.WouldBlock: the queue is empty.
        """
        if not self._items:
            raise anyio.WouldBlock
        return self._items.popleft()

    async def get(self) -> T:
        """Wait for and remove the oldest item."""
        while not self._items:
            event = anyio.Event()
            self._getters.append(event)
            try:
                await event.wait()
            except BaseException:
                if event.is_set():
                    self._wake_one()  # we were chosen but leave: pass it on
                else:
                    self._getters.remove(event)
                raise
        return self._items.popleft()

    def _wake_one(self) -> None:
        while self._getters:
            event = self._getters.popleft()
            if not event.is_set():
                event.set()
                return
