"""The index of a :class:`backends._waitqueue.WaitQueue`: waiting requests in key
order, in sorted blocks, searchable by the size of their reservation.

A search for the first request after a key that fits a room (or is over a cap)
reads each block's least (or most) sizes, then scans inside the first block that
has one; both scans run in C.  Pure: no I/O, no tasks, no clock.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator
from itertools import compress, count, islice
from operator import attrgetter
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._dispatch import Ticket

__all__ = ["ANY", "BEFORE", "BLOCK", "NONE", "Blocks", "Key", "Waiting"]

Key = tuple[int, int]
"""A waiting request's place in the admission order: lower keys are tried first."""

BEFORE: Final[Key] = (-(1 << 62), -1)  # before every key
ANY: Final = 1 << 62  # a room every request fits in
NONE: Final = -(1 << 62)  # a room no request fits in (the server is down)
_KEY: Final = attrgetter("key")

BLOCK: Final = 64
"""Requests per block of a wait queue's index (a block splits at twice this).  A
search reads each block's least sizes, then scans inside the first block that has
a fit; both scans run in C.  Small blocks mean more blocks to read, large ones a
longer scan, and a longer recomputation of a block's least size when its smallest
request leaves."""


class Waiting:
    """A request waiting for room in a :class:`WaitQueue`: the arguments of
    :meth:`Dispatcher.acquire_nowait`, its ``key`` (its place in the order, unique
    per queue), and its ``ticket`` once admitted.  A driver may subclass it (with
    ``__slots__``) to add its own fields."""

    __slots__ = ("_queue", "avoid", "key", "new_tokens", "session", "ticket", "tokens")

    def __init__(self, tokens: int, session: Hashable = None, avoid: int | None = None, new_tokens: int | None = None) -> None:
        self.tokens = tokens
        self.session = session
        self.avoid = avoid
        self.new_tokens = new_tokens
        self.key: Key = BEFORE
        self.ticket: Ticket | None = None
        self._queue: Blocks | None = None


def _first(values: list[int], start: int, limit: int) -> int:
    """The index of the first of ``values[start:]`` that is at most ``limit``, or
    ``len(values)``: a scan in C (``limit.__ge__`` mapped over the values)."""
    return next(compress(count(start), map(limit.__ge__, islice(values, start, None))), len(values))


def _first_above(values: list[int], start: int, limit: int) -> int:
    """The index of the first of ``values[start:]`` that is more than ``limit``, or ``len(values)``."""
    return next(compress(count(start), map(limit.__lt__, islice(values, start, None))), len(values))


class Blocks:
    """Waiting requests of one kind in key order, searchable by size.

    A request's reservation is ``min(p + n, p + c)`` for the expected length ``c``
    (``p`` its prompt, less the hold it returns to; ``n`` its most new tokens, 0 for
    a reservation given whole).  The requests sit in sorted blocks, each keeping
    the least ``p`` and ``p + n`` of its own (and the most), so that a search for
    the first request after a key whose reservation fits a room (or is over a
    cap) reads only those until a block has one.  ``add`` and ``remove``:
    O(log + BLOCK); ``first_fit`` and ``first_over``: O(blocks) in C, plus a scan
    in C of each block it enters.
    """

    __slots__ = ("_highs", "_lows", "blocks", "firsts", "hi_p", "hi_pn", "lo_p", "lo_pn", "pns", "ps", "qid")

    def __init__(self, qid: int) -> None:
        self.qid = qid  # which queue of a WaitQueue this is (see _FRESH)
        self.blocks: list[list[Waiting]] = []
        self.firsts: list[Key] = []  # each block's first key
        self.ps: list[list[int]] = []  # each block's p, request by request
        self.pns: list[list[int]] = []  # ... and p + n
        self.lo_p: list[int] = []  # each block's least p
        self.lo_pn: list[int] = []  # ... and least p + n
        self.hi_p: list[int] = []  # each block's most p
        self.hi_pn: list[int] = []  # ... and most p + n
        # The least p and p + n of all (and the most), or None once a request that
        # had one of them left: a search that nothing can satisfy ends in O(1).
        self._lows: tuple[int, int] | None = (ANY, ANY)
        self._highs: tuple[int, int] | None = (NONE, NONE)

    def __bool__(self) -> bool:
        return bool(self.blocks)

    def __iter__(self) -> Iterator[Waiting]:
        return itertools.chain.from_iterable([list(block) for block in self.blocks])

    def least_p(self) -> int:
        return self.lows()[0]

    def lows(self) -> tuple[int, int]:
        """The least p and p + n of the requests here (``ANY`` when none)."""
        if self._lows is None:
            self._lows = (min(self.lo_p, default=ANY), min(self.lo_pn, default=ANY))
        return self._lows

    def highs(self) -> tuple[int, int]:
        """The most p and p + n of the requests here (``NONE`` when none)."""
        if self._highs is None:
            self._highs = (max(self.hi_p, default=NONE), max(self.hi_pn, default=NONE))
        return self._highs

    def fits_any(self, room: int, c: int) -> bool:
        """Whether some request's reservation fits ``room`` (``first_fit`` from the start finds one)."""
        lo_p, lo_pn = self.lows()
        return lo_p <= room - c or lo_pn <= room

    def may_be_over(self, cap: int, c: int) -> bool:
        """False when no request's reservation is over ``cap`` (``first_over`` finds none)."""
        hi_p, hi_pn = self.highs()
        return hi_p > cap - c and hi_pn > cap

    def add(self, w: Waiting, p: int, pn: int) -> None:
        w._queue = self
        if self._lows is not None:
            self._lows = (min(self._lows[0], p), min(self._lows[1], pn))
        if self._highs is not None:
            self._highs = (max(self._highs[0], p), max(self._highs[1], pn))
        b = bisect_right(self.firsts, w.key) - 1
        if b < 0 and not self.blocks:
            self.blocks.append([w])
            self.firsts.append(w.key)
            self.ps.append([p])
            self.pns.append([pn])
            self.lo_p.append(p)
            self.lo_pn.append(pn)
            self.hi_p.append(p)
            self.hi_pn.append(pn)
            return
        b = max(b, 0)
        block = self.blocks[b]
        j = bisect_right(block, w.key, key=_KEY)
        block.insert(j, w)
        self.ps[b].insert(j, p)
        self.pns[b].insert(j, pn)
        if j == 0:
            self.firsts[b] = w.key
        self.lo_p[b] = min(self.lo_p[b], p)
        self.lo_pn[b] = min(self.lo_pn[b], pn)
        self.hi_p[b] = max(self.hi_p[b], p)
        self.hi_pn[b] = max(self.hi_pn[b], pn)
        if len(block) > 2 * BLOCK:
            self._split(b)

    def _split(self, b: int) -> None:
        for parts in (self.blocks, self.ps, self.pns):
            parts.insert(b + 1, parts[b][BLOCK:])
            del parts[b][BLOCK:]
        self.firsts.insert(b + 1, self.blocks[b + 1][0].key)
        self.lo_p[b : b + 1] = [min(self.ps[b]), min(self.ps[b + 1])]
        self.lo_pn[b : b + 1] = [min(self.pns[b]), min(self.pns[b + 1])]
        self.hi_p[b : b + 1] = [max(self.ps[b]), max(self.ps[b + 1])]
        self.hi_pn[b : b + 1] = [max(self.pns[b]), max(self.pns[b + 1])]

    def remove(self, w: Waiting) -> None:
        w._queue = None
        b = bisect_right(self.firsts, w.key) - 1
        block = self.blocks[b]
        j = bisect_left(block, w.key, key=_KEY)
        assert block[j] is w, "a waiting request's key changed while it waited"
        del block[j]
        p, pn = self.ps[b].pop(j), self.pns[b].pop(j)
        if self._lows is not None and (p == self._lows[0] or pn == self._lows[1]):
            self._lows = None
        if self._highs is not None and (p == self._highs[0] or pn == self._highs[1]):
            self._highs = None
        if not block:
            for parts in (self.blocks, self.firsts, self.ps, self.pns, self.lo_p, self.lo_pn, self.hi_p, self.hi_pn):
                del parts[b]
            return
        if j == 0:
            self.firsts[b] = block[0].key
        if p == self.lo_p[b]:
            self.lo_p[b] = min(self.ps[b])
        if pn == self.lo_pn[b]:
            self.lo_pn[b] = min(self.pns[b])
        if p == self.hi_p[b]:
            self.hi_p[b] = max(self.ps[b])
        if pn == self.hi_pn[b]:
            self.hi_pn[b] = max(self.pns[b])

    def first_fit(self, after: Key, room: int, c: int) -> Waiting | None:
        """The first request after ``after`` whose reservation ``min(p + n, p + c)``
        is at most ``room``."""
        rc = room - c
        lo_p, lo_pn = self.lows()
        if lo_p > rc and lo_pn > room:
            return None
        b = max(0, bisect_right(self.firsts, after) - 1)
        while True:
            b = min(_first(self.lo_p, b, rc), _first(self.lo_pn, b, room))
            if b >= len(self.blocks):
                return None
            block = self.blocks[b]
            start = bisect_right(block, after, key=_KEY) if self.firsts[b] <= after else 0
            j = min(_first(self.ps[b], start, rc), _first(self.pns[b], start, room))
            if j < len(block):
                return block[j]
            b += 1

    def first_over(self, after: Key, cap: int, c: int) -> Waiting | None:
        """The first request after ``after`` whose reservation is more than ``cap``
        (asked while a server is idle: such a request goes alone to it)."""
        cc = cap - c
        hi_p, hi_pn = self.highs()
        if hi_p <= cc or hi_pn <= cap:
            return None
        b = max(0, bisect_right(self.firsts, after) - 1)
        while True:
            b = _first_above(self.hi_pn, b, cap)
            if b >= len(self.blocks):
                return None
            if self.hi_p[b] <= cc:  # every p + c fits the cap here
                b += 1
                continue
            block, ps = self.blocks[b], self.ps[b]
            start = bisect_right(block, after, key=_KEY) if self.firsts[b] <= after else 0
            for j in compress(count(start), map(cap.__lt__, islice(self.pns[b], start, None))):
                if ps[j] > cc:
                    return block[j]
            b += 1
