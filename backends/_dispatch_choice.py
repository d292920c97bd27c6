"""Which server a request goes to: the budget policy's choice and the static baseline's.

Functions of a :class:`backends._dispatch.Dispatcher`'s state (its servers' free
budgets and holds, its sessions' affinity, its counters), kept apart from the
bookkeeping of reservations, holds and reports that feeds them (described in
:mod:`backends._dispatch`).  They read that state through :class:`DispatchState`, so
this module does not import the dispatcher that calls it.

The budget policy (``"budget"``):

- A session with a hold goes back to its server whenever the turn fits there,
  the hold counting as its own room, and it may also fill the headroom down to
  ``hold_headroom``: turns of sessions under way come before new ones, which
  stop at ``headroom``.  If it does not fit it waits rather than moving, which
  would recompute its whole context elsewhere.  In the calibrated dispatch
  benchmark (KV cache over-subscribed), holds cut the tokens prefilled from
  12.7M to 3.0M and the makespan by 15%.
- A later turn without a hold goes back to the server of its previous turn
  (its prefix may still be cached there) unless that server cannot fit it, or
  has ``affinity_slack`` of its capacity less free budget than the best
  server, or has more than ``affinity_queue_slack`` requests in flight beyond
  the least busy server that fits it (the turn then goes to that server).
- Otherwise the server with the most free budget that fits the request wins
  (ties: fewer requests in flight).  If none fits,
  :meth:`Dispatcher.acquire_nowait` raises ``anyio.WouldBlock`` and the driver
  waits for a release.  A request larger than any server's whole capacity is
  admitted alone on an idle server (it cannot run anywhere else).

The baseline (``"round_robin"``): each new session is assigned the next server in
rotation and keeps it for all its turns; no budget is checked (static assignment,
as in most RL frameworks).  It never blocks.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import anyio

from ._dispatch_types import ServerState

__all__ = ["DispatchState", "choose_budget", "choose_static"]


class DispatchState(Protocol):
    """The part of a dispatcher's state the choices read, and the counters they move."""

    headroom: float
    hold_headroom: float
    affinity_slack: float
    affinity_queue_slack: int | None
    _servers: list[ServerState]
    _up: list[int]
    _frees: list[int]
    _busy: list[int]
    _order: list[int]
    _rotation: int
    _blocked: int
    _floor: float
    _floor_cap: int


def choose_static(d: DispatchState, up: list[int], previous: int | None) -> int:
    """The round-robin baseline: a session keeps its server; a new one takes the next in rotation."""
    if previous is not None and previous in up:
        return previous
    n = len(d._servers)
    for step in range(n):
        candidate = (d._rotation + step) % n
        if candidate in up:
            d._rotation = candidate + 1
            return candidate
    raise AssertionError("unreachable: up is not empty")


def choose_budget(
    d: DispatchState, up: list[int], previous: int | None, tokens: int, held: int | None, session: Hashable
) -> int:
    """The budget policy's server for a request of ``tokens`` (see :mod:`backends._dispatch`).

    Raises:
        anyio.WouldBlock: no server has room for it now (counted in ``d._blocked``).
    """
    servers = d._servers
    if held is not None and held in up:
        home = servers[held]
        room = home.free + home.holds[session][0]  # its own hold is room for it
        room += max(0, int((d.headroom - d.hold_headroom) * home.capacity))
        if room >= tokens:
            return held
        d._blocked += 1  # wait for room there rather than recompute its context elsewhere
        raise anyio.WouldBlock
    if len(up) == len(servers):  # the most free budget, then the fewest in flight, then the first
        best = -max(zip(d._frees, d._busy, d._order))[2]
    else:
        best = max(up, key=lambda i: (servers[i].free, -servers[i].in_flight))
    if previous is not None and previous in up:
        p = servers[previous]
        if p.free >= tokens and servers[best].free - p.free <= d.affinity_slack * p.capacity:
            slack = d.affinity_queue_slack
            if slack is None:
                return previous
            fits = [i for i in up if servers[i].free >= tokens]
            shortest = min(fits, key=lambda i: (servers[i].in_flight, -servers[i].free))
            if p.in_flight - servers[shortest].in_flight <= slack:
                return previous
            return shortest  # overloaded by its queue: to the least busy server that fits
    if servers[best].free >= tokens:
        return best
    # Larger than any free budget: admit it alone on an idle server only if it
    # could never fit anywhere (bigger than a whole usable cache); otherwise wait.
    cap = max(servers[i].usable for i in up)
    if tokens > cap:
        idle = [i for i in up if servers[i].in_flight == 0]
        if idle:
            return max(idle, key=lambda i: servers[i].capacity)
    elif len(up) == len(d._up) and tokens < d._floor:
        d._floor, d._floor_cap = tokens, cap  # all servers were tried: none has this much room
    d._blocked += 1
    raise anyio.WouldBlock
