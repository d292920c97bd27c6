"""A server killed and restarted under a waiting queue: nothing waits forever.

``test_waitqueue.py`` checks that the :class:`WaitQueue` admits what the loop over
every waiting turn admits.  Here the random operations add what a SIGKILL and a
restart do to the dispatcher (the server marked down with turns in flight, those
turns released while it is down, some ending normally so that their session
would be held, resubmissions that avoid it, its return with a fresh report of an
empty cache, possibly a new capacity), and the run ends with a liveness check:
once every turn has ended, every session is over and every server is up and
reports an empty cache, both the queue and the loop admit every waiting turn.  A
waiting turn that neither ever tries again (a lost wake-up, a stale ``_floor``)
fails it.
"""

from __future__ import annotations

import random
from collections.abc import Hashable

import pytest

from backends._dispatch import Dispatcher, ServerLoad, Ticket
from backends._waitqueue import Waiting, WaitQueue
from tests.backends.test_waitqueue import CONFIGS, LoopQueue, attempt, state


class Twins:
    """One dispatcher with a :class:`WaitQueue`, one with the loop, driven alike."""

    def __init__(self, caps: list[int], config: dict) -> None:
        kw = {"expected_new_tokens": 300, "hold_reports": 2} | config
        self.dq, self.dl = Dispatcher(caps, **kw), Dispatcher(caps, **kw)
        self.queue, self.loop = WaitQueue(self.dq), LoopQueue(self.dl)
        self.twins: dict[int, Waiting] = {}  # id(loop's request) -> the queue's
        self.live: list[tuple[Ticket, Ticket]] = []
        self.held = self.due = False
        self.admitted = 0

    def a_pass(self) -> None:
        if self.held:
            return
        got_q, got_l = self.queue.admit(), self.loop.admit()
        assert [w.key for w in got_q] == [w.key for w in got_l]
        for wq, wl in zip(got_q, got_l, strict=True):
            assert self.twins.pop(id(wl)) is wq
            assert wq.ticket == wl.ticket
            self.live.append((wq.ticket, wl.ticket))  # type: ignore[arg-type]
        self.admitted += len(got_q)
        self.due = False
        assert len(self.queue) == len(self.loop.waiting)
        assert state(self.dq) == state(self.dl)

    def arrive(self, key: tuple[int, int], size: int, session: Hashable, avoid: int | None, new: int | None) -> None:
        wq, wl = Waiting(size, session, avoid, new), Waiting(size, session, avoid, new)
        wq.key = wl.key = key
        if not self.held and not self.due:  # the pool tries a turn at once when nothing changed since the last pass
            tq, tl = attempt(self.dq, wq), attempt(self.dl, wl)
            assert tq == tl
            if tq is not None:
                self.live.append((tq, tl))  # type: ignore[arg-type]
                return
            self.queue.add(wq, tried=True)
        else:
            self.queue.add(wq, tried=False)
        self.loop.add(wl)
        self.twins[id(wl)] = wq

    def release(self, i: int, generated: int | None) -> None:
        tq, tl = self.live.pop(i)
        self.dq.release(tq, generated=generated)
        self.dl.release(tl, generated=generated)

    def each(self, method: str, *args: object) -> None:
        getattr(self.dq, method)(*args)
        getattr(self.dl, method)(*args)


def drive(seed: int, config: dict, ops: int) -> int:
    """Random operations with kills and restarts, then the liveness check; returns the admissions."""
    rng = random.Random(seed)
    config = dict(config)
    caps = list(config.pop("capacities"))
    t = Twins(caps, config)
    sessions: list[Hashable] = [None, *range(30)]
    arrivals = 0

    def changed() -> None:
        t.due = True
        if rng.random() < 0.8:
            t.a_pass()

    for _ in range(ops):
        op = rng.random()
        if op < 0.30:  # a turn arrives; a resubmission avoids the server it failed on
            arrivals += 1
            avoid = rng.choice([None] * 6 + list(range(len(caps))))
            key = (-rng.choice([8000, 7000, 5000, 3000, 200]), arrivals)
            size = rng.choice([0, 20, 50, 400, 700, 900, 1500, 2000, 3000, 6000, 9000])
            t.arrive(key, size, rng.choice(sessions), avoid, rng.choice([None, None, 0, 4, 100, 250, 400, 1000]))
        elif op < 0.50 and t.live:  # a turn ends (normally, with its length, or aborted)
            t.release(rng.randrange(len(t.live)), rng.choice([None, 0, 10, 250, 300, 700, 2000]))
            changed()
        elif op < 0.58:  # a report: often an empty cache, sometimes a new capacity
            s = rng.randrange(len(caps))
            if rng.random() < 0.1:
                caps[s] = rng.choice([2000, 3000, 4000, 5000, 8000])
            used = 0 if rng.random() < 0.4 else rng.randrange(caps[s] + 1000)
            t.each("observe", s, ServerLoad(capacity_tokens=caps[s], used_tokens=used))
            changed()
        elif op < 0.61:  # a trajectory ends
            t.each("forget", rng.choice(sessions))
            changed()
        elif op < 0.66:  # a kill: down; its turns fail (some are released later); often back at once
            s = rng.randrange(len(caps))
            t.each("set_up", s, False)
            changed()
            for i in reversed(range(len(t.live))):
                if t.live[i][0].server == s and rng.random() < 0.7:
                    t.release(i, rng.choice([None, None, 300]))  # a turn that ended as the server died is held
                    changed()
            if rng.random() < 0.7:  # the restart: the poller reports its empty cache, then brings it back
                if rng.random() < 0.2:
                    caps[s] = rng.choice([2000, 3000, 4000, 5000, 8000])
                t.each("observe", s, ServerLoad(capacity_tokens=caps[s], used_tokens=0))
                t.each("set_up", s, True)
                changed()
        elif op < 0.68 and t.loop.waiting:  # a waiting turn is cancelled
            wl = t.loop.waiting[rng.randrange(len(t.loop.waiting))]
            t.loop.remove(wl)
            t.queue.remove(t.twins.pop(id(wl)))
        elif op < 0.70:  # a weight sync's held block begins or ends
            t.held = not t.held
            if not t.held:
                t.a_pass()
        else:
            t.a_pass()
    # The end: every server comes back; turns end, sessions end, servers report an
    # empty cache, again and again: every waiting turn must get in.
    t.held = False
    for s in range(len(caps)):
        t.each("set_up", s, True)
    t.a_pass()
    for _ in range(4 * (len(t.loop.waiting) + len(t.live)) + 4):
        if not t.live and not t.loop.waiting:
            break
        while t.live:
            session = t.live[-1][0].session
            t.release(len(t.live) - 1, 300)
            t.each("forget", session)
            t.a_pass()
        for s in range(len(caps)):
            t.each("observe", s, ServerLoad(capacity_tokens=caps[s], used_tokens=0))
            t.a_pass()
    stats = t.dq.statistics()
    assert not t.loop.waiting and not t.live, (len(t.loop.waiting), stats)
    assert len(t.queue) == 0
    return t.admitted


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", CONFIGS)
def test_after_kills_and_restarts_every_waiting_turn_gets_in(name: str, seed: int) -> None:
    assert drive(seed, CONFIGS[name], ops=1500) > 100
