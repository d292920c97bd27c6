"""A generation's tokens as they stream in, and the deadline that watches them.

:class:`Progress` holds one turn's tokens, their logprobs and the weight version of
each request that produced some, over every request the turn took: the token
client's resumptions of aborted parts and its retries, and the pool's failovers.
Whoever sends the next request continues from it: the prompt plus its tokens,
``max_tokens`` less what it holds.  Nothing a server streamed before it failed is
generated twice.

:class:`StallWatch` is the pool's: it gives each request a cancel scope and checks,
a few times per timeout, whether its tokens still grow, so a server that stops
making progress for ``stall_s`` loses the request (and the turn moves on with what
it has), while a long healthy generation never does.  ``limit_s`` bounds a request
whatever its progress.  While the pool is held by a weight sync no stall counts:
the servers are paused on purpose.

:class:`SSEReader` splits a ``text/event-stream`` body into its ``data:`` payloads
as the bytes arrive (vLLM and SGLang stream completions so); the engines' readers
decode each payload into tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final, final

import anyio

from ._errors import BadResponse
from ._types import Completion, FinishReason

__all__ = ["CHECKS_PER_TIMEOUT", "Progress", "SSEReader", "StallWatch", "Watched"]

_DONE: Final = b"[DONE]"

CHECKS_PER_TIMEOUT: Final = 10
"""Checks of the requests per (shortest) timeout: a stall is seen at most 10% late;
each check walks the requests in flight (16K of them: a few ms, every 6 s at the
default ``stall_timeout_s``)."""


@final
class Progress:
    """The tokens of one generation so far (see the module docstring).

    Invariant: ``len(token_ids) == len(logprobs)``; ``versions`` has the weight
    version of each request that added tokens (or finished the generation), in order.
    ``finish`` is ``abort`` until a request ends it with ``stop`` or ``length``.
    """

    __slots__ = ("finish", "logprobs", "token_ids", "versions")

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.finish: FinishReason = "abort"

    def add(self, token_ids: list[int], logprobs: list[float]) -> None:
        """Tokens a server streamed (equal lengths: the reader checks)."""
        self.token_ids += token_ids
        self.logprobs += logprobs

    def completion(self, default_version: int) -> Completion:
        """What it holds, as one completion whose version is the oldest of its parts
        (``default_version`` when no request produced anything)."""
        version = min(self.versions, default=default_version)
        return Completion(token_ids=self.token_ids, logprobs=self.logprobs, finish_reason=self.finish, weight_version=version)


@final
class Watched:
    """One request under a :class:`StallWatch`: its cancel scope, and why the watch
    cancelled it (``stalled``: no progress; else past the outer limit)."""

    __slots__ = ("changed", "progress", "scope", "seen", "sent", "stalled")

    def __init__(self, progress: Progress, now: float) -> None:
        self.progress = progress
        self.scope = anyio.CancelScope()
        self.sent = now
        self.seen = len(progress.token_ids)
        self.changed = now  # when a check last saw its count of tokens change
        self.stalled = False

    @property
    def expired(self) -> bool:
        """The watch cancelled it (not a cancellation from outside)."""
        return self.scope.cancelled_caught


@final
class StallWatch:
    """The progress deadlines of a pool's requests in flight.

    Args:
        stall_s: a request with no new token for this long is cancelled (``None``:
            progress is not watched).
        limit_s: a request is cancelled this long after it was sent, progress or
            not (``None``: no outer bound).

    The requests are checked every :data:`CHECKS_PER_TIMEOUT`-th of the shorter
    timeout by :meth:`run` (the pool's task group runs it): the tokens' path costs
    nothing (no clock read, no timer per chunk), and a request is cancelled between
    ``stall_s`` and ``stall_s`` plus one check interval after its last tokens (the
    same for the limit).  Not thread-safe; one per pool, used from its event loop.
    """

    def __init__(self, stall_s: float | None, limit_s: float | None) -> None:
        self.stall_s = stall_s
        self.limit_s = limit_s
        self._paused = 0
        self._watched: set[Watched] = set()

    @property
    def interval_s(self) -> float | None:
        """Seconds between two checks; None: nothing to check."""
        shortest = min((t for t in (self.stall_s, self.limit_s) if t is not None), default=None)
        return None if shortest is None else shortest / CHECKS_PER_TIMEOUT

    @contextlib.contextmanager
    def watch(self, progress: Progress) -> Iterator[Watched]:
        """The block of one request that generates into ``progress``, cancelled when
        the request makes no progress for ``stall_s`` or outlasts ``limit_s``; the
        caller reads :attr:`Watched.expired` and :attr:`Watched.stalled` after it."""
        watched = Watched(progress, anyio.current_time() if self.interval_s is not None else 0.0)
        if self.interval_s is None:
            with watched.scope:
                yield watched
            return
        self._watched.add(watched)
        try:
            with watched.scope:
                yield watched
        finally:
            self._watched.discard(watched)

    def check(self, now: float) -> None:
        """Cancel the requests past their deadlines (:meth:`run` calls it)."""
        for w in self._watched:
            count = len(w.progress.token_ids)
            if count != w.seen:
                w.seen, w.changed = count, now
            elif self.stall_s is not None and not self._paused and now - w.changed >= self.stall_s:
                w.stalled = True
                w.scope.cancel()
                continue
            if self.limit_s is not None and now - w.sent >= self.limit_s:
                w.scope.cancel()

    async def run(self) -> None:
        """Check the requests every :attr:`interval_s`, forever (returns at once when
        nothing is watched)."""
        interval = self.interval_s
        if interval is None:
            return
        while True:
            await anyio.sleep(interval)
            self.check(anyio.current_time())

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No request stalls inside the block (a weight sync pauses the servers on
        purpose); each has ``stall_s`` again from the block's end.  Nests."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            if not self._paused:
                now = anyio.current_time()
                for w in self._watched:
                    w.changed = now


class SSEReader:
    """Splits a ``text/event-stream`` body into its events' ``data:`` payloads as the
    body's bytes arrive (:meth:`feed`, called by the transport with each part), and
    hands each to :meth:`event`; ``data: [DONE]`` ends the stream (:attr:`done`).
    Events without data (``:`` keep-alive comments) are skipped.

    A subclass decodes the payloads (the engine's chunk schema).
    """

    __slots__ = ("_rest", "done", "where")

    def __init__(self, where: str) -> None:
        self.where = where
        """The request's URL, for error messages."""
        self.done = False
        self._rest = b""

    def feed(self, data: bytes) -> None:
        """The next bytes of the body.

        Raises:
            BadResponse: an event the subclass cannot read, or data after ``[DONE]``.
        """
        if self._rest:
            data = self._rest + data
        start = 0
        while (end := data.find(b"\n\n", start)) != -1:
            self._line(data, start, end)
            start = end + 2
        self._rest = data[start:] if start < len(data) else b""

    def close(self) -> None:
        """The body ended: an event left without its blank line is read too."""
        if self._rest.strip():
            rest, self._rest = self._rest, b""
            self._line(rest, 0, len(rest))

    def _line(self, data: bytes, start: int, end: int) -> None:
        if data.startswith(b"data:", start):
            start += 6 if data.startswith(b"data: ", start) else 5
            if self.done:
                raise BadResponse(f"{self.where}: data after the stream's [DONE]")
            if data.startswith(_DONE, start) and end - start == len(_DONE):
                self.done = True
            else:
                self.event(memoryview(data)[start:end])
        elif data[start:end].strip() and not data.startswith(b":", start):
            raise BadResponse(
                f"{self.where}: not a server-sent event (a server that does not stream answers whole: "
                f"use a client with stream=False): {bytes(data[start:end])[:200]!r}"
            )

    def event(self, payload: memoryview) -> None:
        """One event's data (a JSON chunk)."""
        raise NotImplementedError
