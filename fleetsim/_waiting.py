"""The streaming fleet's waiting turns (:class:`Waiting`), kept in the pool's retry order
with numpy columns so that a retry pass asks the dispatcher only about the turns that
can fit (``_stream_fleet.Fleet.admit``).  It reads the fleet through :class:`FleetView`
(what ``Fleet`` offers it), so the two modules do not import each other."""

from __future__ import annotations

import bisect
import itertools
from typing import Protocol

import numpy as np

from ._model import Params, Seq


class FleetView(Protocol):
    """What the waiting turns read of their fleet."""

    p: Params
    holds: dict[int, tuple[int, int, int]]
    """A session's hold: (the poll it ends at, its server, its tokens), by trajectory id."""
    hold_slack: int

    def remaining(self, seq: Seq) -> int: ...


class Waiting:
    """The driver's waiting turns in the pool's retry order (the policy's ``order``,
    then oldest), with numpy columns (context, remaining budget, and the
    session's hold: the poll it ends at, its server, its tokens) so that a retry
    pass finds in C the few turns that can fit."""

    def __init__(self, fleet: FleetView) -> None:
        self.fleet = fleet
        self.seqs: list[Seq] = []
        self.keys: list[tuple[int, int]] = []
        self.cols = np.zeros((5, 1 << 14), np.int64)
        self.count = itertools.count()
        # What the last pass left: no waiting turn fits in less than ``least`` free
        # tokens, or, held at server s, ``least_at[s]`` (its need less its hold), at
        # expected length ``floor[0]`` and poll ``floor[1]`` (holds end at polls),
        # when the servers' free budgets were ``free``.
        self.floor: tuple[int, int] | None = None
        self.least = 0
        self.least_at = np.zeros(0, np.int64)
        self.free = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, seq: Seq) -> None:
        """Queue a turn in its place (``Sim.submit`` calls this ``append``)."""
        f, n = self.fleet, len(self.seqs)
        remaining = f.remaining(seq)
        key = (seq.traj.id if f.p.order == "session" else -remaining, next(self.count))
        i = bisect.bisect(self.keys, key)
        if n == self.cols.shape[1]:
            self.cols = np.concatenate([self.cols, np.zeros_like(self.cols)], axis=1)
        self.cols[:, i + 1 : n + 1] = self.cols[:, i:n]
        self.cols[:, i] = column = (seq.context, remaining, *f.holds.get(seq.traj.id, (0, 0, 0)))
        self.seqs.insert(i, seq)
        self.keys.insert(i, key)
        if self.floor is not None:
            expected, polls = self.floor
            need = seq.context + min(remaining, expected)
            if column[2] > polls:
                self.least_at[column[3]] = min(self.least_at[column[3]], need - column[4] - f.hold_slack)
            else:
                self.least = min(self.least, need)

    def nothing_fits(self, released: np.ndarray, expected: int, polls: int) -> bool:
        """Whether the last pass proves that no waiting turn fits now, without asking
        the dispatcher: until a report, a server's free budget grows by at most the
        reservations released on it, and a turn's need moves by at most the change
        of the expected length."""
        if self.floor is None or self.floor[1] != polls:
            return False
        drift = abs(expected - self.floor[0])
        free = self.free + released
        return bool(free.max() < self.least - drift and np.all(free < self.least_at - drift))

    def set_floor(self, need: np.ndarray, held: np.ndarray, home: np.ndarray, hold: np.ndarray,
                  left: np.ndarray, expected: int, polls: int, free: np.ndarray) -> None:
        """After a pass that left the free budgets at ``free``: the turns ``left`` (a mask) fit nowhere."""
        self.floor, self.free = (expected, polls), free
        free_only = left & ~held
        self.least = int(need[free_only].min()) if free_only.any() else 1 << 62
        self.least_at = np.full(self.fleet.p.servers, 1 << 62, np.int64)
        at = left & held
        np.minimum.at(self.least_at, home[at], (need - hold)[at])

    def pop(self, taken: list[int]) -> None:
        """Drop the turns at these positions (ascending; a pass admits few)."""
        for i in reversed(taken):
            n = len(self.seqs)
            self.cols[:, i : n - 1] = self.cols[:, i + 1 : n]
            del self.seqs[i], self.keys[i]
