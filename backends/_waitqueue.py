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
from collections.abc import Collection, Hashable, Iterator
from itertools import compress, count
from typing import Generic, TypeVar, cast, final

import anyio

from ._dispatch import Dispatcher, Ticket
from ._waitindex import ANY, BEFORE, NONE, Blocks, Key, Waiting

__all__ = ["Key", "WaitQueue", "Waiting"]

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
        self._fresh = Blocks(_FRESH)  # not tried since they came, or since their hold began or ended
        self._avoid = Blocks(_AVOID)  # resubmissions that avoid a server
        self._new = Blocks(_NEW)  # without a hold: they fit wherever the most room is
        self._homes = [Blocks(i) for i in range(n)]  # returning to their hold on server i
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
        self._need = [ANY] * n
        self._new_need = self._avoid_need = ANY
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
        if not self._fresh and not self._may_fit(grown, c):
            self._record(grown)  # what a pass that finds nothing to try learns
            return []
        return cast("list[W]", _Pass(self, grown, c).run())

    def _may_fit(self, servers: set[int], c: int) -> bool:
        """Whether a pass over the rooms of ``servers`` could find a request to try.

        False only when each queue's least sizes (or, for a request going alone to
        an idle server, its most) rule out every request: then each of the pass's
        searches would come back empty, and the pass is skipped.  It is the most
        common pass: a release whose room fits no waiting request (the request
        that fits it best comes back after its tool call).
        """
        if not servers:
            return False
        rooms = {s: self._room(s) for s in servers}
        idle = bool(self._d._idle) and self._d.policy == "budget"
        if self._avoid and (idle or self._avoid.fits_any(max(r + self._extra(s) for s, r in rooms.items()), c)):
            return True
        if self._new and (self._new.fits_any(max(rooms.values()), c) or (idle and self._new.may_be_over(self._cap(), c))):
            return True
        homes = self._homes
        return any(homes[s] and homes[s].fits_any(r + self._extra(s), c) for s, r in rooms.items())

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
            return NONE
        return ANY if self._d.policy == "round_robin" else s.free

    def _extra(self, server: int) -> int:
        """The headroom a turn returning to its hold on ``server`` may use."""
        d = self._d
        return max(0, int((d.headroom - d.hold_headroom) * d._servers[server].capacity))

    def _cap(self) -> int:
        return max(self._d._servers[i].usable for i in self._d._up)

    def _record(self, servers: Collection[int]) -> None:
        """Tighten what the queue knows of the servers a pass had in play, for the
        next fall of the expected length."""
        for s in servers:
            extra = self._extra(s)
            self._seen[s] = self._room(s)
            self._need[s] = self._homes[s].least_p() - extra if self._homes[s] else ANY
            self._max_extra = max(self._max_extra, extra)
        if servers:
            self._new_need = self._new.least_p()
            self._avoid_need = self._avoid.least_p() - self._max_extra

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
        self.cursor = BEFORE  # the key of the request tried last: the pass goes on after it
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
        q._record(self.rooms)
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
            return q._fresh.first_fit(cursor, ANY, 0) if q._fresh else None
        if not self.rooms:
            return None
        if qid == _AVOID:  # bounded by the most room plus headroom (a hold), or any size while a server idles
            if not q._avoid:
                return None
            if self.d._idle and self.d.policy == "budget":
                return q._avoid.first_fit(cursor, ANY, 0)
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
