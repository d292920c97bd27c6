"""The wait queue admits exactly what the pool's old loop over every waiting turn did.

The reference is that loop: every waiting request, in key order, tried with
``Dispatcher.acquire_nowait``.  Two dispatchers are driven by the same random
operations (arrivals, releases, reports, hold ends, servers down and up,
cancellations, held periods), one with a :class:`WaitQueue`, one with the loop;
every arrival and every pass must admit the same requests, in the same order, with
the same tickets, and the dispatchers must end in the same state.
"""

from __future__ import annotations

import random
from collections.abc import Hashable

import anyio
import msgspec
import pytest

import backends._dispatch as dispatch_module
from backends._dispatch import Dispatcher, ServerLoad, Ticket
from backends._waitqueue import Waiting, WaitQueue


def attempt(d: Dispatcher, w: Waiting) -> Ticket | None:
    try:
        return d.acquire_nowait(w.tokens, w.session, avoid=w.avoid, new_tokens=w.new_tokens)
    except anyio.WouldBlock:  # NoServerUp included
        return None


class LoopQueue:
    """The reference: the pool's admission before the wait queue (a sorted list, all tried)."""

    def __init__(self, d: Dispatcher) -> None:
        self.d = d
        self.waiting: list[Waiting] = []

    def add(self, w: Waiting) -> None:
        self.waiting.append(w)
        self.waiting.sort(key=lambda x: x.key)

    def remove(self, w: Waiting) -> None:
        self.waiting.remove(w)

    def admit(self) -> list[Waiting]:
        admitted, kept = [], []
        for w in self.waiting:
            w.ticket = attempt(self.d, w)
            (kept if w.ticket is None else admitted).append(w)
        self.waiting = kept
        return admitted


def state(d: Dispatcher) -> msgspec.Struct:
    return msgspec.structs.replace(d.statistics(), blocked=0)  # the loop tries more: more ``blocked``


CONFIGS = {
    "budget": {"capacities": (4000, 3000, 5000), "headroom": 0.1},
    "no-headroom": {"capacities": (4000, 4000), "headroom": 0.0, "hold_headroom": 0.0},
    "one-server": {"capacities": (5000,), "headroom": 0.1},
    "eight-servers": {"capacities": (2000, 2500, 3000, 3500, 4000, 4500, 5000, 6000), "headroom": 0.2},
    "no-queue-slack": {"capacities": (4000, 3000, 5000), "headroom": 0.1, "affinity_queue_slack": None, "hold_reports": 1},
    "no-holds": {"capacities": (4000, 3000, 5000), "headroom": 0.1, "hold_reports": 0},
    "round-robin": {"capacities": (4000, 3000, 5000), "policy": "round_robin"},
}


def drive(seed: int, config: dict, ops: int) -> tuple[int, int, int]:
    """Run ``ops`` random operations on both; returns (admitted, queue tries, loop tries)."""
    rng = random.Random(seed)
    config = dict(config)
    caps = list(config.pop("capacities"))
    kw = {"expected_new_tokens": 300, "hold_reports": 2} | config
    dq, dl = Dispatcher(caps, **kw), Dispatcher(caps, **kw)
    queue, loop = WaitQueue(dq), LoopQueue(dl)
    twins: dict[int, Waiting] = {}  # id(loop's request) -> the queue's
    live: list[tuple[Ticket, Ticket]] = []
    sessions: list[Hashable] = [None, *range(40)]
    due = held = False  # a change not yet followed by a pass; a pool.held() block
    arrivals = admitted = loop_tries = 0

    def a_pass() -> None:
        nonlocal due, admitted, loop_tries
        if held:
            return
        loop_tries += len(loop.waiting)
        got_q, got_l = queue.admit(), loop.admit()
        assert [w.key for w in got_q] == [w.key for w in got_l]
        for wq, wl in zip(got_q, got_l, strict=True):
            assert twins.pop(id(wl)) is wq
            assert wq.ticket == wl.ticket
            live.append((wq.ticket, wl.ticket))  # type: ignore[arg-type]
        admitted += len(got_q)
        due = False
        assert len(queue) == len(loop.waiting)
        assert state(dq) == state(dl)

    def changed() -> None:
        nonlocal due
        due = True
        if rng.random() < 0.8:  # the pool passes after every change; a driver may batch them
            a_pass()

    for _ in range(ops):
        op = rng.random()
        if op < 0.30:  # a turn arrives
            size = rng.choice([0, 50, 400, 700, 900, 1500, 2000, 3000, 6000, 9000])
            new = rng.choice([None, None, 0, 100, 250, 400, 1000])
            avoid = rng.choice([None] * 10 + list(range(len(caps))))
            remaining = rng.choice([8000, 8000, 8000, 7000, 5000, 3000, 200])
            arrivals += 1
            wq, wl = (Waiting(size, rng.choice(sessions), avoid, new) for _ in range(2))
            wl.session = wq.session
            wq.key = wl.key = (-remaining, arrivals)
            if not held and not due:  # the pool tries a turn at once when nothing changed since the last pass
                tq, tl = attempt(dq, wq), attempt(dl, wl)
                assert tq == tl
                if tq is not None:
                    live.append((tq, tl))  # type: ignore[arg-type]
                    assert state(dq) == state(dl)
                    continue
                queue.add(wq, tried=True)
            else:
                queue.add(wq, tried=False)
            loop.add(wl)
            twins[id(wl)] = wq
        elif op < 0.52 and live:  # a turn ends (normally, with its length, or aborted)
            tq, tl = live.pop(rng.randrange(len(live)))
            generated = rng.choice([None, 0, 10, 250, 299, 300, 301, 700, 2000])
            dq.release(tq, generated=generated)
            dl.release(tl, generated=generated)
            changed()
        elif op < 0.60:  # a load report, sometimes with a new capacity
            s = rng.randrange(len(caps))
            if rng.random() < 0.1:
                caps[s] = rng.choice([2000, 3000, 4000, 5000, 8000])
            load = ServerLoad(capacity_tokens=caps[s], used_tokens=rng.randrange(caps[s] + 1000))
            dq.observe(s, load)
            dl.observe(s, load)
            changed()
        elif op < 0.63:  # a trajectory ends
            session = rng.choice(sessions)
            dq.forget(session)
            dl.forget(session)
            changed()
        elif op < 0.65:  # a server goes down or comes back
            s, up = rng.randrange(len(caps)), rng.random() < 0.6
            dq.set_up(s, up)
            dl.set_up(s, up)
            changed()
        elif op < 0.68 and loop.waiting:  # a waiting turn is cancelled
            wl = loop.waiting[rng.randrange(len(loop.waiting))]
            loop.remove(wl)
            queue.remove(twins.pop(id(wl)))
        elif op < 0.70:  # a weight sync's held block begins or ends
            held = not held
            if not held:
                a_pass()
        else:
            a_pass()
    held = False
    a_pass()
    while live:  # everything ends: whatever still waits gets in
        tq, tl = live.pop()
        dq.release(tq, generated=300)
        dl.release(tl, generated=300)
        a_pass()
    return admitted, queue.tries, loop_tries


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", CONFIGS)
def test_the_queue_admits_what_the_loop_over_every_waiter_admits(name: str, seed: int) -> None:
    admitted, _, _ = drive(seed, CONFIGS[name], ops=2000)
    assert admitted > 100  # the run did exercise admission


@pytest.mark.parametrize("seed", range(3))
def test_the_same_when_sessions_are_evicted_for_room(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # An admission that evicts the least recently used session ends its hold elsewhere.
    monkeypatch.setattr(dispatch_module, "MAX_SESSIONS", 8)
    drive(seed, CONFIGS["budget"], ops=2000)


def test_the_queue_tries_far_fewer_than_the_loop() -> None:
    _, queue_tries, loop_tries = drive(0, CONFIGS["eight-servers"], ops=2000)
    assert queue_tries * 5 < loop_tries


def test_a_release_tries_only_the_requests_that_can_fit_then() -> None:
    d = Dispatcher([1000, 1000], headroom=0.0, hold_reports=0)
    a, b = d.acquire_nowait(900), d.acquire_nowait(900)
    queue = WaitQueue(d)
    for i in range(1000):  # 1,000 turns of 500 tokens wait: none fits the 100 free
        w = Waiting(500)
        w.key = (0, i)
        queue.add(w, tried=False)
    assert queue.admit() == [] and queue.tries == 1000  # untried: all tried once
    small = Waiting(50)
    small.key = (0, 1000)  # last in the order
    queue.add(small, tried=False)
    assert queue.admit() == [small] and queue.tries == 1001  # nothing grew: only the new one is tried
    d.release(a)
    got = queue.admit()
    assert [w.key for w in got] == [(0, 0)] and got[0].ticket.server == a.server  # type: ignore[union-attr]
    assert queue.tries == 1002  # the first that fits; with the room left none does: not 999 tries
    d.release(b)
    assert [w.key for w in queue.admit()] == [(0, 1), (0, 2)] and queue.tries == 1004
    assert len(queue) == 997


def test_a_request_larger_than_any_cache_goes_alone_to_an_idle_server() -> None:
    d = Dispatcher([1000, 1000], headroom=0.0, hold_reports=0)
    a, b = d.acquire_nowait(100), d.acquire_nowait(100)
    queue = WaitQueue(d)
    huge = Waiting(5000)
    huge.key = (0, 0)
    queue.add(huge, tried=True)
    d.release(a)  # a server idles: the huge request goes there, alone
    assert queue.admit() == [huge] and huge.ticket is not None and huge.ticket.server == a.server
    d.release(b)
