"""Requests waiting for room on a :class:`backends._dispatch.Dispatcher`: the pool's queue.

:class:`WaitQueue` admits waiting requests exactly as trying each of them with
:meth:`Dispatcher.acquire_nowait`, in key order, would (the same requests, in the
same order, to the same servers), but tries only those that can fit after what
changed.  The pool used to run that loop over every waiting turn on every release,
report and hold's end: O(waiting turns) per release, at rStar2's scale thousands
of turns waiting on an over-subscribed fleet and thousands of releases a second.
``benchmarks/paper_scale.py`` measures the cost per release as the queue grows
(both, side by side); ``tests/backends/test_waitqueue.py`` checks the equivalence
against that loop over random operations.

It is a companion of the dispatcher, in the same package: it reads the
dispatcher's bookkeeping (its servers' room, the servers up and idle, which
servers' room grew, which sessions' holds began or ended) rather than widening
the dispatcher's public surface for one caller.  Pure: no I/O, no tasks, no clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator
from itertools import compress, count, islice
from operator import attrgetter
from typing import Final, Generic, TypeVar, cast, final

import anyio

from ._dispatch import Dispatcher, Ticket

__all__ = ["Key", "WaitQueue", "Waiting"]

Key = tuple[int, int]
"""A waiting request's place in the admission order: lower keys are tried first."""

_BEFORE: Final[Key] = (-(1 << 62), -1)  # before every key
_ANY: Final = 1 << 62  # a room every request fits in
_NONE: Final = -(1 << 62)  # a room no request fits in (the server is down)
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
        self.key: Key = _BEFORE
        self.ticket: Ticket | None = None
        self._queue: _Blocks | None = None


def _first(values: list[int], start: int, limit: int) -> int:
    """The index of the first of ``values[start:]`` that is at most ``limit``, or
    ``len(values)``: a scan in C (``limit.__ge__`` mapped over the values)."""
    return next(compress(count(start), map(limit.__ge__, islice(values, start, None))), len(values))


def _first_above(values: list[int], start: int, limit: int) -> int:
    """The index of the first of ``values[start:]`` that is more than ``limit``, or ``len(values)``."""
    return next(compress(count(start), map(limit.__lt__, islice(values, start, None))), len(values))


class _Blocks:
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
        self._lows: tuple[int, int] | None = (_ANY, _ANY)
        self._highs: tuple[int, int] | None = (_NONE, _NONE)

    def __bool__(self) -> bool:
        return bool(self.blocks)

    def __iter__(self) -> Iterator[Waiting]:
        return itertools.chain.from_iterable([list(block) for block in self.blocks])

    def least_p(self) -> int:
        return self.lows()[0]

    def lows(self) -> tuple[int, int]:
        """The least p and p + n of the requests here (``_ANY`` when none)."""
        if self._lows is None:
            self._lows = (min(self.lo_p, default=_ANY), min(self.lo_pn, default=_ANY))
        return self._lows

    def highs(self) -> tuple[int, int]:
        """The most p and p + n of the requests here (``_NONE`` when none)."""
        if self._highs is None:
            self._highs = (max(self.hi_p, default=_NONE), max(self.hi_pn, default=_NONE))
        return self._highs

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


_FRESH, _AVOID, _NEW = -1, -2, -3  # a WaitQueue's queues; a home queue's id is its server


W = TypeVar("W", bound=Waiting)


@final
class WaitQueue(Generic[W]):
    """Requests waiting for room on a :class:`Dispatcher`, admitted in key order.

    A pass (:meth:`admit`) decides exactly as trying every waiting request with
    :meth:`Dispatcher.acquire_nowait`, in key order, would: the same requests are
    admitted, in the same order, to the same servers.  It tries only those that
    can fit, so its cost follows what changed, not how many wait.

    Why that is the same: a request that found no room cannot fit until room
    grows on a server (a release, a report, a hold's end: the dispatcher records
    which), or a server goes up or down (which moves the cap past which a request
    goes alone to an idle server, and the servers open to one that avoids a
    server: the dispatcher records every server), or the expected generation
    length falls, or its session's hold begins or ends (recorded too).  (The
    dispatcher's O(1) refusal of a request at least as large as one that found no
    room is exact too: it does not apply to requests that avoid a server, whose
    cap differs.)  So a pass looks at

    - requests not tried since they came or since their hold changed: all tried;
    - requests that avoid a server (resubmissions, rare): tried when room grew;
    - requests returning to a hold on a server whose room grew: those whose
      reservation beyond the hold fits that room plus the headroom they may use;
    - other requests, when room grew: those that fit the largest room among the
      servers where it grew, and while a server is idle, those larger than any
      usable cache (admitted alone there);
    - when the expected length fell: the servers where it can open room, from
      each server's room as last read and each queue's least prompt.

    It merges these, in key order, from one search per kind; what an admission
    changes (that server's room, a hold elsewhere) updates the searches of the
    rest of the pass.  Requests the pass has gone past are not tried again in it,
    as in a single scan.  Cost: O(servers whose room grew + requests admitted or
    tried) searches, each O(blocks + BLOCK).

    Not thread-safe; the dispatcher's driver owns both and calls :meth:`admit`
    after changes (a pass with nothing new to try costs O(1)).  One queue per
    dispatcher.  ``passes`` and ``tries`` count passes and ``acquire_nowait``
    calls (for tests and benchmarks).
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        d = self._d = dispatcher
        d._hold_log = []
        n = len(d._servers)
        self._fresh = _Blocks(_FRESH)  # not tried since they came, or since their hold began or ended
        self._avoid = _Blocks(_AVOID)  # resubmissions that avoid a server
        self._new = _Blocks(_NEW)  # without a hold: they fit wherever the most room is
        self._homes = [_Blocks(i) for i in range(n)]  # returning to their hold on server i
        self._sessions: dict[Hashable, list[Waiting]] = {}
        self._count = 0
        # The expected length when the requests filed were tried (the most of them):
        # if it falls below, shorter reservations may fit where they did not.
        self._c = math.ceil(d._expected)
        # Each server's room as last read: no less than its room now, unless it
        # grew since (then the dispatcher has it in ``_grown``).
        self._seen = [self._room(i) for i in range(n)]
        # No more than each home's least p less the headroom its turns may use, and
        # than the new requests' least p: with ``_seen``, where a fall can open room.
        self._need = [_ANY] * n
        self._new_need = self._avoid_need = _ANY
        # The most headroom a turn returning to a hold has been allowed on any server: no
        # less than any server's now, but for those whose capacity grew since (in ``_grown``).
        self._max_extra = max(map(self._extra, range(n)))
        self.passes = self.tries = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[W]:
        """Every waiting request (a snapshot, in no particular order)."""
        queues = (self._fresh, self._avoid, self._new, *self._homes)
        return iter(cast("list[W]", [w for q in queues for block in q.blocks for w in block]))

    def add(self, w: W, *, tried: bool) -> None:
        """Queue ``w``, whose ``key`` is set.  ``tried``: it was just found not to fit
        (``acquire_nowait`` raised ``WouldBlock`` and nothing changed since); else
        the next pass tries it at its place."""
        if tried:
            self._file(w)
        else:
            self._fresh.add(w, 0, 0)
        if w.session is not None:
            self._sessions.setdefault(w.session, []).append(w)
        self._count += 1

    def remove(self, w: W) -> None:
        """Take out a request that was not admitted (its turn was cancelled)."""
        assert w._queue is not None, "not waiting here"
        w._queue.remove(w)
        if w.session is not None:
            same = self._sessions[w.session]
            same.remove(w)
            if not same:
                del self._sessions[w.session]
        self._count -= 1

    def admit(self) -> list[W]:
        """Admit what fits now, in key order (see the class docstring).

        Returns:
            The requests admitted, each with its ``ticket``; they have left the queue.
            Empty when every server is down (each would raise ``NoServerUp``).
        """
        d = self._d
        self._refile()
        if not self._count or not d._up:
            return []
        self.passes += 1
        grown, d._grown = d._grown, set()
        c = math.ceil(d._expected)
        if c < self._c:
            grown |= self._opened(c)
        self._c = c
        return cast("list[W]", _Pass(self, grown, c).run())

    # -- filing --------------------------------------------------------------------

    def _file(self, w: Waiting) -> None:
        """File a request that found no room by what it waits for."""
        self._c = max(self._c, math.ceil(self._d._expected))
        n = 0 if w.new_tokens is None else w.new_tokens
        hold = self._d._hold(w.session)
        if w.avoid is not None:  # its server set is its own: filed by what bounds it anywhere
            p = w.tokens - (0 if hold is None else hold[1])
            self._avoid_need = min(self._avoid_need, p - self._max_extra)
            self._avoid.add(w, p, p + n)
        elif hold is None:
            self._new_need = min(self._new_need, w.tokens)
            self._new.add(w, w.tokens, w.tokens + n)
        else:
            server, held = hold
            p = w.tokens - held
            self._need[server] = min(self._need[server], p - self._extra(server))
            self._homes[server].add(w, p, p + n)

    def _refile(self) -> list[int]:
        """Move the requests whose session's hold began or ended back among the
        untried; returns the queues they left."""
        log = self._d._hold_log
        if not log:
            return []
        self._d._hold_log = []
        left = []
        for session in log:
            for w in self._sessions.get(session, ()):
                queue = w._queue
                if queue is not None and queue is not self._fresh:
                    queue.remove(w)
                    self._fresh.add(w, 0, 0)
                    left.append(queue.qid)
        return left

    def _take(self, w: Waiting) -> None:
        self.remove(w)

    def _try(self, w: Waiting) -> Ticket | None:
        self.tries += 1
        try:
            return self._d.acquire_nowait(w.tokens, w.session, avoid=w.avoid, new_tokens=w.new_tokens)
        except anyio.WouldBlock:
            return None

    # -- rooms ---------------------------------------------------------------------

    def _room(self, server: int) -> int:
        """The largest reservation a request without a hold can make on ``server``."""
        s = self._d._servers[server]
        if not s.up:
            return _NONE
        return _ANY if self._d.policy == "round_robin" else s.free

    def _extra(self, server: int) -> int:
        """The headroom a turn returning to its hold on ``server`` may use."""
        d = self._d
        return max(0, int((d.headroom - d.hold_headroom) * d._servers[server].capacity))

    def _cap(self) -> int:
        return max(self._d._servers[i].usable for i in self._d._up)

    def _opened(self, c: int) -> set[int]:
        """The servers where reservations computed with expected length ``c`` may
        fit although they did not with a longer one."""
        opened = set(compress(count(), map(c.__le__, map(operator.sub, self._seen, self._need))))
        for queue, need in ((self._new, self._new_need), (self._avoid, self._avoid_need)):
            if queue:
                opened.update(compress(count(), map((c + need).__le__, self._seen)))
        return opened


class _Pass:
    """One pass of a :class:`WaitQueue`: its candidates, one per queue, merged in key order."""

    __slots__ = ("best", "c", "cursor", "d", "grew", "heap", "q", "rooms", "seq")

    def __init__(self, q: WaitQueue, grown: set[int], c: int) -> None:
        self.q, self.d, self.c = q, q._d, c
        self.cursor = _BEFORE  # the key of the request tried last: the pass goes on after it
        self.heap: list[tuple[Key, int, int]] = []  # (candidate's key, tie, queue id); stale ones skipped
        self.best: dict[int, Waiting | None] = {}  # queue id -> its candidate now
        self.seq = itertools.count()
        self.rooms = {s: q._room(s) for s in grown}  # the servers in play, and their room
        self.grew: set[int] = set()  # servers whose room grew during the pass

    def run(self) -> list[Waiting]:
        q, d = self.q, self.d
        self._push(_FRESH)
        self._push(_AVOID)
        self._push(_NEW)
        for s in self.rooms:
            self._push(s)
        admitted: list[Waiting] = []
        while self.heap:
            key, _, qid = heapq.heappop(self.heap)
            w = self.best.get(qid)
            if w is None or w.key != key:
                continue  # stale: the queue's candidate changed since
            self.best[qid] = None
            self.cursor = key
            ticket = q._try(w)
            if ticket is not None:
                q._take(w)
                w.ticket = ticket
                admitted.append(w)
            elif qid == _FRESH:
                q._fresh.remove(w)
                q._file(w)
            grown, d._grown = d._grown, set()  # by the admission: a hold it ended, a session it evicted
            self.grew |= grown
            for left in q._refile():
                self._push(left)
                self._push(_FRESH)
            self._after(qid, None if ticket is None else ticket.server, grown)
        d._grown |= self.grew  # what the pass went past may fit there now: the next pass looks
        self._record()
        return admitted

    def _after(self, qid: int, used: int | None, grown: set[int]) -> None:
        """Update the candidates after a try from queue ``qid`` that admitted a
        request to server ``used`` (if any) and may have grown room on ``grown``."""
        if used is not None and used in self.rooms:
            grown = grown | {used}
        moved = False
        for s in grown:
            room = self.q._room(s)
            if self.rooms.get(s) != room:
                self.rooms[s] = room
                moved = True
                self._push(s)
        self._push(qid)
        if moved:  # the largest rooms, which bound the new and the avoiding requests, may have moved
            for other in (_NEW, _AVOID):
                if other != qid:
                    self._push(other)

    def _push(self, qid: int) -> None:
        w = self._find(qid)
        self.best[qid] = w
        if w is not None:
            heapq.heappush(self.heap, (w.key, next(self.seq), qid))

    def _find(self, qid: int) -> Waiting | None:
        """Queue ``qid``'s first request after the cursor that can fit now."""
        q, cursor = self.q, self.cursor
        if qid == _FRESH:
            return q._fresh.first_fit(cursor, _ANY, 0) if q._fresh else None
        if not self.rooms:
            return None
        if qid == _AVOID:  # bounded by the most room plus headroom (a hold), or any size while a server idles
            if not q._avoid:
                return None
            if self.d._idle and self.d.policy == "budget":
                return q._avoid.first_fit(cursor, _ANY, 0)
            return q._avoid.first_fit(cursor, max(r + q._extra(s) for s, r in self.rooms.items()), self.c)
        if qid == _NEW:
            if not q._new:
                return None
            w = q._new.first_fit(cursor, max(self.rooms.values()), self.c)
            if self.d._idle and self.d.policy == "budget":
                over = q._new.first_over(cursor, q._cap(), self.c)
                if over is not None and (w is None or over.key < w.key):
                    w = over
            return w
        room = self.rooms.get(qid)
        home = q._homes[qid]
        if room is None or not home:
            return None
        return home.first_fit(cursor, room + q._extra(qid), self.c)

    def _record(self) -> None:
        """Tighten what the queue knows of the servers in play, for the next fall of the expected length."""
        q = self.q
        for s in self.rooms:
            extra = q._extra(s)
            q._seen[s] = q._room(s)
            q._need[s] = q._homes[s].least_p() - extra if q._homes[s] else _ANY
            q._max_extra = max(q._max_extra, extra)
        if self.rooms:
            q._new_need = q._new.least_p()
            q._avoid_need = q._avoid.least_p() - q._max_extra
