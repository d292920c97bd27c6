"""What a :class:`backends._dispatch.Dispatcher` takes in, hands out and reports,
and its record of one server (kept apart from the policy that reads them)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Literal

import anyio
import msgspec

__all__ = ["DispatchStatistics", "NoServerUp", "Policy", "ServerLoad", "ServerState", "ServerStatistics", "Ticket"]

Policy = Literal["budget", "round_robin"]


class NoServerUp(anyio.WouldBlock):
    """Every server is marked down: nothing can be dispatched until one comes back."""


class ServerLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A server's own report of its KV cache, as polled by the driver.

    ``capacity_tokens`` is the whole KV cache in tokens; ``used_tokens`` the part
    held by requests now (both >= 0).
    """

    capacity_tokens: int
    used_tokens: int = 0
    running: int = 0
    waiting: int = 0


class Ticket(msgspec.Struct, frozen=True):
    """One admitted request: hand it back to :meth:`Dispatcher.release` exactly once."""

    id: int
    server: int
    tokens: int
    session: Hashable = None


class ServerStatistics(msgspec.Struct, frozen=True):
    up: bool
    capacity_tokens: int
    reserved_tokens: int
    observed_tokens: int
    in_flight: int
    dispatched: int
    pending_tokens: int = 0
    """Reservations admitted since the last observation."""
    held_tokens: int = 0
    """Contexts of sessions between turns, held for their next turn."""


class DispatchStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the dispatcher's state and counters."""

    policy: str
    servers: list[ServerStatistics]
    in_flight: int
    dispatched: int
    affinity_hits: int
    """Later turns that went back to their session's server."""
    affinity_moves: int
    """Later turns moved away from their server (it was full, overloaded or down)."""
    blocked: int
    """Calls to ``acquire_nowait`` that found no room."""
    expected_new_tokens: float = 0.0
    """The running mean generation length that expected reservations use."""


class ServerState:
    """What the dispatcher knows of one server: its budget, reservations and holds."""

    __slots__ = (
        "busy", "capacity", "dispatched", "epoch", "free", "frees", "headroom", "held", "holds", "in_flight", "index",
        "observed", "pending", "reserved", "up", "usable",
    )

    def __init__(self, index: int, capacity: int, headroom: float, frees: list[int], busy: list[int]) -> None:
        self.index = index
        self.frees, self.busy = frees, busy  # the dispatcher's: every server's free budget, and -in_flight
        self.up = True
        self.capacity = capacity
        self.headroom = headroom
        self.reserved = 0
        self.observed = 0
        self.pending = 0
        self.epoch = 0  # observations so far: a ticket admitted in this epoch is in ``pending``
        self.in_flight = 0
        self.dispatched = 0
        self.held = 0
        self.holds: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()  # session -> (tokens, epoch), oldest first
        self.refresh()

    def refresh(self) -> None:
        """Recompute ``usable`` and ``free`` (and the dispatcher's lists of them):
        called after every change of the figures they are made of."""
        self.usable = self.capacity - int(self.headroom * self.capacity)
        self.free = self.usable - max(self.reserved, self.observed + self.pending) - self.held
        self.frees[self.index] = self.free
        self.busy[self.index] = -self.in_flight
