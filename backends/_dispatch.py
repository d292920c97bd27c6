"""Which server gets the next turn: a pure policy, no I/O, no tasks, no clock.

rStar2-Agent's rollout scheduler gives each request to the server with the most
free KV-cache capacity instead of assigning trajectories statically, so that no
server overflows its cache (preemption, recomputation) while another idles at the
end of a long tail.  This module is that policy; :mod:`backends._pool` is the thin
async driver that feeds it observations and waits when it says "no room".

The budget policy (``"budget"``):

- A server's *load* is its best known KV usage in tokens:
  ``max(reserved, observed + pending)``, where ``reserved`` sums the
  reservations of the requests we have in flight on it, ``observed`` is the
  server's own last report (it sees sequences that outgrew their reservation,
  and other clients), and ``pending`` sums the reservations of the requests
  admitted since that report and still in flight (the report cannot contain
  them).  Its *free budget* is
  ``capacity * (1 - headroom) - load - held`` (holds: below).
- A request reserves KV for its prompt plus the new tokens it is expected to
  hold.  Called with ``new_tokens`` (the most it may generate), the dispatcher
  reserves ``prompt + min(new_tokens, expected)``, where ``expected`` is the
  running mean of the generation lengths reported to :meth:`Dispatcher.release`
  (``expected_new_tokens`` until the first report).  Called without, ``tokens``
  is reserved as given: the driver reserves prompt + ``max_tokens``, the most KV
  the request can ever hold, and a server given only such requests can never
  overflow (at the price of concurrency: a 32K budget per turn holds a cache of
  400K tokens to a dozen sequences).
- Expected reservations are what the server will hold on average; a sequence
  that runs long holds more, which the next ``observed`` shows.  ``headroom``
  keeps that fraction of each cache out of admission as the margin for growth
  between reports, so that the server does not preempt.
- When a session's turn ends normally (released with ``generated``, for an
  expected reservation), its context, ``prompt + generated`` tokens, stays
  *held* on that server: it sits in the server's prefix cache, and counting it
  as load keeps new admissions from evicting it before the session's next turn,
  which follows a tool call (rStar2: 0.3 s on average).  A hold ends when that
  turn is admitted, on :meth:`Dispatcher.forget` (the driver's signal that the
  trajectory ended), when the server goes down, or ``hold_reports`` load
  reports of the server later (the session waited too long, or ended without
  the signal).  Only the session's latest turn is held, on the server it ran
  on: the server the session's affinity names.
- Where the request goes: :mod:`backends._dispatch_choice`.
- A reservation is held until :meth:`Dispatcher.release` (the turn ended,
  normally or not).

The baseline (``"round_robin"``), static assignment: :mod:`backends._dispatch_choice`.

Servers marked down are skipped by both policies; their sessions move.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Final, final

import anyio

from ._dispatch_choice import choose_budget, choose_static
from ._dispatch_types import (
    DispatchStatistics,
    NoServerUp,
    Policy,
    ServerLoad,
    ServerState,
    ServerStatistics,
    Ticket,
)

__all__ = ["DispatchStatistics", "Dispatcher", "NoServerUp", "Policy", "ServerLoad", "ServerStatistics", "Ticket"]

MAX_SESSIONS: Final = 1 << 17
"""Sessions whose server is remembered; the least recently used is forgotten
beyond this.  A session is a trajectory: 128K covers several steps of rStar2's
batch (64 problems x 32 samples) without ever growing without bound."""

MEAN_WINDOW: Final = 256
"""Generation lengths the running mean effectively averages over (an exponential
moving average with weight 1/256): long enough that one long-tailed response
barely moves it, short enough to follow the policy's responses as they grow
over training."""


@final
class Dispatcher:
    """Assigns requests to servers; see the module docstring for the policies.

    Args:
        capacities: each server's KV capacity in tokens until the first
            :meth:`observe` replaces it (the driver polls before dispatching).
        policy: ``"budget"`` (ours) or ``"round_robin"`` (static baseline).
        affinity_slack: fraction of a server's capacity by which the best server
            must have more free budget before a session leaves its own server.
            0 disables affinity; 1 never moves a session that still fits.
        expected_new_tokens: the generation length an expected reservation
            assumes until :meth:`release` reports real ones (> 0).
        affinity_queue_slack: requests in flight by which a session's server may
            exceed the least busy server that fits the turn before the turn
            moves (>= 0); ``None``: no such rule.  Tuned (8) on an earlier,
            lighter benchmark model, where it shortened the makespan by 2%; in
            the calibrated one it measures neutral: most later turns return
            to a hold, which it does not apply to.
        headroom: fraction of each cache kept out of admission (0..0.9): the
            margin for sequences that outgrow their expected reservation
            between two observations.  0 when every request reserves its
            whole budget.
        hold_reports: for how many of its server's load reports a session's
            context stays held after a turn (>= 0; 0: no holds).  Holds end
            on reports (or :meth:`forget`): a driver that never calls
            :meth:`observe` should pass 0.  With the pool's 1 s polls, 2 holds
            it 1-2 s, against rStar2's 0.3 s tool calls; in the dispatch
            benchmark 1 report loses many holds (1.16x static against 1.24x),
            3-6 measure like 2 (also once trajectory ends were signalled:
            4 and 10 within 1% of 2).
        hold_headroom: fraction of each cache (0..0.9) kept out of admission
            even for a session returning to its hold: such turns may fill the
            rest of ``headroom``, new ones may not.  0.04 leaves a poll's
            growth (~1% of a cache) with margin; in the dispatch benchmark
            (8 seeds) 0.02-0.05 measure alike, 0.03 preempted once and 0.04
            never.

    Not thread-safe; one event loop drives it.  Every method is O(servers); a
    request without a hold or a server to avoid, at least as large as one that
    found no room, fails in O(1) until a release, report, hold's end or server
    change.  It records which servers' room may have grown and (for a
    :class:`backends._waitqueue.WaitQueue`) which sessions' holds began or ended,
    so that the pool retries only the waiting turns that can fit.
    """

    def __init__(
        self,
        capacities: Sequence[int],
        *,
        policy: Policy = "budget",
        affinity_slack: float = 0.25,
        affinity_queue_slack: int | None = 8,
        expected_new_tokens: int = 1024,
        headroom: float = 0.0,
        hold_reports: int = 2,
        hold_headroom: float = 0.04,
    ) -> None:
        if not capacities:
            raise ValueError("capacities: expected at least one server")
        if any(c <= 0 for c in capacities):
            raise ValueError(f"capacities: expected positive token counts, got {list(capacities)!r}")
        if policy not in ("budget", "round_robin"):
            raise ValueError(f"policy: expected 'budget' or 'round_robin', got {policy!r}")
        if not 0.0 <= affinity_slack <= 1.0:
            raise ValueError(f"affinity_slack: expected 0..1, got {affinity_slack!r}")
        if affinity_queue_slack is not None and affinity_queue_slack < 0:
            raise ValueError(f"affinity_queue_slack: expected >= 0 or None, got {affinity_queue_slack!r}")
        if expected_new_tokens <= 0:
            raise ValueError(f"expected_new_tokens: expected > 0, got {expected_new_tokens!r}")
        if not 0.0 <= headroom <= 0.9:
            raise ValueError(f"headroom: expected 0..0.9, got {headroom!r}")
        if hold_reports < 0:
            raise ValueError(f"hold_reports: expected >= 0, got {hold_reports!r}")
        if not 0.0 <= hold_headroom <= 0.9:
            raise ValueError(f"hold_headroom: expected 0..0.9, got {hold_headroom!r}")
        self.policy: Policy = policy
        self.affinity_slack = affinity_slack
        self.affinity_queue_slack = affinity_queue_slack
        self.headroom = headroom
        self.hold_reports = hold_reports
        self.hold_headroom = hold_headroom
        self._expected = float(expected_new_tokens)
        # Each server's free budget and -in_flight, kept by the servers: the best
        # server is one max() over them, in C (requests read it on every try).
        self._frees, self._busy = [0] * len(capacities), [0] * len(capacities)
        self._order = [-i for i in range(len(capacities))]  # ties: the first server
        self._servers = [ServerState(i, c, headroom, self._frees, self._busy) for i, c in enumerate(capacities)]
        self._up = list(range(len(capacities)))  # the servers up, in order: every request reads it
        self._idle = len(capacities)  # servers up with nothing in flight
        # session -> the server of its latest turn, which also holds its context
        # between turns if its ``holds`` has the session: the one record of a hold.
        self._sessions: OrderedDict[Hashable, int] = OrderedDict()
        self._live: dict[int, tuple[Ticket, int, int | None]] = {}  # id -> (ticket, its server's epoch, prompt)
        self._ids = itertools.count()
        self._rotation = 0
        self._dispatched = self._hits = self._moves = self._blocked = 0
        # Requests without a hold of at least ``_floor`` tokens (and at most
        # ``_floor_cap``, past which one may go alone to an idle server) fit nowhere
        # until room grows: a waiting queue's retries fail in O(1), not O(servers).
        # Not for requests that avoid a server: their cap is over fewer servers, so
        # one above it may go alone to an idle server although the floor says no
        # (an answer that then hung on which requests were tried before it).
        self._floor: float = math.inf
        self._floor_cap = 0
        # What a WaitQueue reads to retry only the waiting requests that can fit:
        # servers whose room may have grown, and sessions whose hold began or ended
        # (recorded once a queue asks for it), since it last looked.
        self._grown: set[int] = set()
        self._hold_log: list[Hashable] | None = None

    # -- observations --------------------------------------------------------------

    def observe(self, server: int, load: ServerLoad) -> None:
        """Record a server's polled load (capacity and tokens in use).  The report
        is taken to include every request admitted before it."""
        s = self._servers[server]
        if load.capacity_tokens > 0:
            s.capacity = load.capacity_tokens
        s.observed = max(0, load.used_tokens)
        s.pending = 0
        s.refresh()
        self._floor = math.inf
        self._grown.add(server)
        s.epoch += 1
        while s.holds and next(iter(s.holds.values()))[1] <= s.epoch - self.hold_reports:
            self._drop_hold(s, next(iter(s.holds)))

    def set_up(self, server: int, up: bool) -> None:
        """Mark a server usable or not.  Reservations on a server marked down stay
        until released: its requests are still being given up by the driver.
        Its holds go: a restarted server's cache is empty."""
        s = self._servers[server]
        if s.up != up and s.in_flight == 0:
            self._idle += 1 if up else -1
        s.up = up
        self._up = [i for i, t in enumerate(self._servers) if t.up]
        self._floor = math.inf
        # Room elsewhere is as it was, but what fits there is not: a request that
        # avoids the last other server up may now use it, and the cap past which a
        # request goes alone to an idle server moved.  Rare: every server is looked at.
        self._grown.update(range(len(self._servers)))
        if not up:
            for session in list(s.holds):
                self._drop_hold(s, session)

    def is_up(self, server: int) -> bool:
        return self._servers[server].up

    def servers_up(self) -> int:
        """How many servers are up (O(1))."""
        return len(self._up)

    def forget(self, session: Hashable) -> None:
        """Drop a finished session's affinity and hold.  Optional, as old sessions
        age out and holds expire, but a hold given back at once is room for
        others 1-2 reports sooner.  A session that comes back later is new."""
        server = self._sessions.pop(session, None)
        if server is not None:
            self._drop_hold(self._servers[server], session)

    # -- admission -----------------------------------------------------------------

    def expected_new_tokens(self) -> float:
        """The generation length an expected reservation assumes now."""
        return self._expected

    def acquire_nowait(
        self, tokens: int, session: Hashable = None, *, avoid: int | None = None, new_tokens: int | None = None
    ) -> Ticket:
        """Pick a server for a request and reserve KV for it there.

        Args:
            tokens: without ``new_tokens``, the reservation itself (prompt plus
                the new tokens it may generate); with it, the prompt's length.
            session: the trajectory's key; ``None`` for one-off requests.
            avoid: a server not to use unless it is the only one up (the one a
                resubmitted request just failed on).
            new_tokens: the most new tokens the request may generate; reserves
                ``tokens + min(new_tokens, expected_new_tokens())`` (an expected
                reservation, see the module docstring; only these are held
                between turns).

        Returns:
            A ticket; the reservation holds until :meth:`release`.

        Raises:
            NoServerUp: every server is down.
            anyio.WouldBlock: (budget policy) no server has room now; retry after
                a release or an observation.
        """
        if tokens < 0:
            raise ValueError(f"tokens: expected >= 0, got {tokens}")
        prompt = tokens if new_tokens is not None else None
        if new_tokens is not None:
            if new_tokens < 0:
                raise ValueError(f"new_tokens: expected >= 0, got {new_tokens}")
            tokens += min(new_tokens, math.ceil(self._expected))
        previous = self._sessions.get(session) if session is not None else None
        held = previous if previous is not None and session in self._servers[previous].holds else None
        if held is None and avoid is None and self._floor <= tokens <= self._floor_cap:
            self._blocked += 1
            raise anyio.WouldBlock
        up = self._up  # read, never changed, by the choices below
        if not up:
            self._blocked += 1
            raise NoServerUp("no server is up")
        if avoid is not None and len(up) > 1 and avoid in up:
            up = [i for i in up if i != avoid]
        if self.policy == "round_robin":
            server = choose_static(self, up, previous)
        else:
            server = choose_budget(self, up, previous, tokens, held, session)
        if held is not None:  # at home it turns into this reservation; elsewhere it is of no use
            self._drop_hold(self._servers[held], session)
        if previous is not None:
            if server == previous:
                self._hits += 1
            else:
                self._moves += 1
        if session is not None:
            self._sessions[session] = server
            self._sessions.move_to_end(session)
            if len(self._sessions) > MAX_SESSIONS:
                self.forget(next(iter(self._sessions)))
        s = self._servers[server]
        if s.in_flight == 0:
            self._idle -= 1
        s.reserved += tokens
        s.pending += tokens
        s.in_flight += 1
        s.refresh()
        s.dispatched += 1
        self._dispatched += 1
        ticket = Ticket(next(self._ids), server, tokens, session)
        self._live[ticket.id] = (ticket, s.epoch, prompt)
        return ticket

    def release(self, ticket: Ticket, *, generated: int | None = None) -> None:
        """End a request's reservation.  Call exactly once per ticket, however the
        request ended.

        Args:
            generated: the new tokens the request produced, when it ran to its
                end (stop or length); updates the running mean that expected
                reservations use, and holds a session's context on its server
                for its next turn.  Leave it out for an aborted request.

        Raises:
            RuntimeError: the ticket was already released (or never issued here).
        """
        live = self._live.pop(ticket.id, None)
        if live is None:
            raise RuntimeError(f"cannot release ticket {ticket.id}: not in flight (released twice?)")
        if generated is not None and generated >= 0:
            self._expected += (generated - self._expected) / MEAN_WINDOW
        _, epoch, prompt = live
        self._floor = math.inf
        self._grown.add(ticket.server)
        s = self._servers[ticket.server]
        s.reserved -= ticket.tokens
        if epoch == s.epoch:  # admitted after the last report: not in ``observed``
            s.pending -= ticket.tokens
        s.in_flight -= 1
        s.refresh()
        if s.in_flight == 0 and s.up:
            self._idle += 1
        session = ticket.session
        if session is None or prompt is None or generated is None or not s.up:
            return
        # Only the session's latest turn is held (not one that a later turn
        # overtook elsewhere), once: its server is the one the affinity names.
        latest = self._sessions.get(session) == ticket.server
        if self.policy == "budget" and self.hold_reports and latest and session not in s.holds:
            s.holds[session] = (prompt + generated, s.epoch)
            s.held += prompt + generated
            s.refresh()
            if self._hold_log is not None:
                self._hold_log.append(session)

    def _drop_hold(self, s: ServerState, session: Hashable) -> None:
        hold = s.holds.pop(session, None)
        if hold is not None:
            s.held -= hold[0]
            s.refresh()
            self._floor = math.inf
            self._grown.add(s.index)
            if self._hold_log is not None:
                self._hold_log.append(session)

    def _hold(self, session: Hashable) -> tuple[int, int] | None:
        """The server holding ``session``'s context and its size, if one does
        (then its next turn is admitted only there: see :func:`backends._dispatch_choice.choose_budget`)."""
        server = self._sessions.get(session) if session is not None else None
        hold = None if server is None else self._servers[server].holds.get(session)
        return None if hold is None else (server, hold[0])

    # -- observation ---------------------------------------------------------------

    def statistics(self) -> DispatchStatistics:
        return DispatchStatistics(
            policy=self.policy,
            servers=[
                ServerStatistics(s.up, s.capacity, s.reserved, s.observed, s.in_flight, s.dispatched, s.pending, s.held)
                for s in self._servers
            ],
            in_flight=len(self._live),
            dispatched=self._dispatched,
            affinity_hits=self._hits,
            affinity_moves=self._moves,
            blocked=self._blocked,
            expected_new_tokens=self._expected,
        )
