"""benchmarks/dispatch.py's fleet run for many steps, as benchmarks/streaming.py's trainer
drives it (:class:`Fleet`): trajectories join at any time, servers run their decode
steps in spans (:class:`FleetServer`), and weight syncs pause it."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from backends import ServerLoad

from ._dispatch import Sim
from ._model import Params, Seq, Server, Traj
from ._waiting import Waiting


@dataclass
class FleetServer(Server):
    """A server whose decode steps run in spans: ``k`` steps of the same running
    requests are one event, which ends early if a request joins (see :meth:`Fleet.start_step`)."""

    gen: int = 0  # bumped to cancel the span's event
    t0: float = 0.0  # the span's first step started then
    step0: int = 0  # steps done before the span
    first: float = 0.0  # the first step's duration (it carries the prefill)
    rest: float = 0.0  # step j > 0 takes rest + j * grow: its context grows by a token per request
    grow: float = 0.0
    k: int = 0
    batch: int = 0  # the span's running requests (one joining ends the span)
    attended0: int = 0  # its first step attends to this much context, the next ones ``batch`` more each
    charged: int = 0  # the prefill its first step carries

    def boundary(self, j: int) -> float:
        """When step ``j`` of the span (from 0) ends."""
        return self.t0 + self.first + j * self.rest + self.grow * j * (j + 1) / 2



class Fleet(Sim):
    """dispatch.py's fleet, run for many steps: trajectories join at any time, and a
    weight sync pauses it (``abort``: turns in flight stop and resume on the new
    weights; ``wait``: they finish first), flushes the prefix caches and bumps the version.

    Two changes of speed, not of behaviour: a server runs its decode steps in spans
    (one event until a request ends, joins or is preempted, instead of one a step),
    and a retry pass of the waiting turns calls the dispatcher only for those that
    can fit (held turns, and others whose reservation is within the largest free
    budget), in the same order: a turn that cannot fit fails without side effects.
    """

    def __init__(self, p: Params, policy: str, on_end: Callable[[Traj], None]) -> None:
        super().__init__(p, [], policy)
        self.servers: list[FleetServer] = [FleetServer(i) for i in range(p.servers)]  # type: ignore[assignment]
        self.queue = Waiting(self)  # type: ignore[assignment]
        self.on_end = on_end
        self.version = 0
        self.holding = False  # a sync is under way: the driver sends no turn
        self.held: list[Traj] = []  # trajectories whose next turn waits for the resume
        self.on_drained: Callable[[], None] | None = None
        self.partial: dict[int, int] = {}  # tokens of an interrupted turn made before its resume
        self.first_version: dict[int, int] = {}  # the version of a trajectory's first token
        self.holds: dict[int, tuple[int, int, int]] = {}  # the dispatcher's: (the poll it ends at, server, tokens)
        self.polls = 0
        self.aborted = 0
        self.released = np.zeros(p.servers, np.int64)  # reservations released on each server since the last pass
        d = self.dispatcher
        self.hold_slack = max(0, int((d.headroom - d.hold_headroom) * p.capacity)) if d else 0
        """A held turn may also fill the headroom down to ``hold_headroom``."""
        self.spans: list[tuple[float, int, int, float]] = []
        """Each span's (end, steps finished, context they attended to, seconds their
        tokens took beyond the weight read): where the time goes."""

    # -- the event loop ----------------------------------------------------------------

    def call_at(self, t: float, fn: Callable[[], None]) -> None:
        self.push(t, "call", fn)

    def run_until(self, done: Callable[[], bool]) -> None:
        if self.dispatcher:
            self.push(self.now + self.p.poll_s, "poll", None)
        while not done():
            self.now, _, kind, data = heapq.heappop(self.events)
            if kind == "span":
                self.end_span(*data)  # type: ignore[misc]
            elif kind == "tool":
                self.submit(data)  # type: ignore[arg-type]
            elif kind == "poll":
                self.poll()
            else:
                data()  # type: ignore[operator]

    def poll(self) -> None:
        for s in self.servers:
            self.advance(s)
            self.dispatcher.observe(s.index, ServerLoad(capacity_tokens=self.p.capacity, used_tokens=s.used()))  # type: ignore[union-attr]
        self.polls += 1
        self.push(self.now + self.p.poll_s, "poll", None)
        self.admit()

    # -- servers in spans ----------------------------------------------------------------

    def start_step(self, s: FleetServer) -> None:  # type: ignore[override]
        """Run the next steps as one span, up to the first that ends a request or
        overflows the cache (vLLM preempts then); a step that preempted runs alone
        (vLLM admits again after it).  A request joining mid-span ends the span with
        the step under way (:meth:`schedule`)."""
        p = self.p
        b = len(s.running)
        attended = s.used() + s.dup
        s.first = max(p.t_weights, (b + s.prefill) * p.t_compute) + attended * p.t_kv
        s.rest = max(p.t_weights, b * p.t_compute) + attended * p.t_kv
        s.grow = b * p.t_kv
        self.prefilled += s.prefill
        s.batch, s.attended0, s.charged, s.prefill = b, attended, s.prefill, 0
        to_finish = s.finish[0][0] - s.step
        to_overflow = (p.capacity - s.used()) // b + 1
        s.k = 1 if s.preempted else max(1, min(to_finish, to_overflow))
        s.busy, s.t0, s.step0 = True, self.now, s.step
        self.push_span(s)

    def push_span(self, s: FleetServer) -> None:
        s.gen += 1
        self.push(s.boundary(s.k - 1), "span", (s, s.gen))

    def advance(self, s: FleetServer) -> None:
        """Bring ``s.step`` to the steps of its span done by now, and evict as vLLM
        would have at each (the cache only shrinks while contexts grow)."""
        if not s.busy:
            return
        x = self.now - s.t0 - s.first  # j steps after the first end when j * rest + grow * j (j + 1) / 2 <= x
        done = 0
        if x >= 0:
            half = s.rest + s.grow / 2
            j = int((math.sqrt(half * half + 2 * s.grow * x) - half) / s.grow)
            while j > 0 and s.boundary(j) > self.now:
                j -= 1
            while s.boundary(j + 1) <= self.now:
                j += 1
            done = j + 1
        s.step = s.step0 + min(done, s.k - 1)
        self.evict(s)

    def schedule(self, s: FleetServer) -> None:  # type: ignore[override]
        if not s.busy:
            return super().schedule(s)
        self.advance(s)
        running = len(s.running)
        self.admit_waiting(s)
        self.evict(s)
        if len(s.running) != running:  # the span ends with the step under way
            s.k = s.step - s.step0 + 1
            self.push_span(s)

    def account(self, s: FleetServer, steps: int) -> None:
        """A span ends (``steps`` of it finished; a sync may cut the next one short)."""
        p, b = self.p, s.batch
        beyond = lambda tokens: max(0.0, tokens * p.t_compute - p.t_weights)
        compute = beyond(b + s.charged) + (steps - 1) * beyond(b) if steps else 0.0
        attended = steps * s.attended0 + b * steps * (steps - 1) // 2
        self.spans.append((self.now, steps, attended, compute))

    def end_span(self, s: FleetServer, gen: int) -> None:
        if gen != s.gen:
            return
        self.account(s, s.k)
        s.step = s.step0 + s.k - 1
        self.evict(s)
        self.step(s)  # the last step of the span: dispatch.py's step end (Sim.step)
        if self.on_drained and self.idle():
            on_drained, self.on_drained = self.on_drained, None
            on_drained()

    def idle(self) -> bool:
        return not any(s.running or s.waiting for s in self.servers)

    # -- the driver ------------------------------------------------------------------------

    def submit(self, traj: Traj) -> None:
        if self.holding:
            self.held.append(traj)
        else:
            super().submit(traj)

    def remaining(self, seq: Seq) -> int:
        return super().remaining(seq) - self.partial.get(seq.traj.id, 0)

    def admit(self) -> None:
        """Every waiting turn tries again (dispatch.py's ``Sim.admit``), but only those
        that fit call the dispatcher, by its rules (its module docstring): a turn
        without a hold fits iff its reservation is within the largest free budget;
        one with a hold iff it is within its server's free budget, its own hold
        and the headroom above ``hold_headroom``."""
        q, d = self.queue, self.dispatcher
        if self.holding or not len(q):
            return
        assert d is not None
        expected = math.ceil(d.expected_new_tokens())
        if q.nothing_fits(self.released, expected, self.polls):
            return
        free = self.free_budgets()
        context, remaining, until, home, hold = q.cols[:, : len(q)]
        need = context + np.minimum(remaining, expected)
        held = until > self.polls
        own = hold + self.hold_slack  # a held turn's room at home: its hold and part of the headroom
        taken: list[int] = []
        start = 0
        while True:
            room = np.where(held[start:], free[home[start:]] + own[start:], free.max())
            fits = np.flatnonzero(need[start:] <= room) + start
            for j in fits:
                seq = q.seqs[j]
                if self.acquire(seq):
                    assert seq.ticket is not None
                    free[seq.ticket.server] -= seq.ticket.tokens
                    if held[j]:  # the hold turned into the reservation
                        free[home[j]] += hold[j]
                    taken.append(j)
                    start = j + 1
                    break
            else:  # none fits (or a rule copied wrong: the dispatcher said no)
                break
        left = np.ones(len(q), bool)
        left[taken] = False
        q.set_floor(need, held, home, own, left, expected, self.polls, free)
        self.released[:] = 0
        if taken:
            q.pop(taken)

    def free_budgets(self) -> np.ndarray:
        """Each server's free budget, as the dispatcher counts it."""
        h = self.p.headroom
        return np.array([
            s.capacity_tokens - int(h * s.capacity_tokens) - max(s.reserved_tokens, s.observed_tokens + s.pending_tokens) - s.held_tokens
            for s in self.dispatcher.statistics().servers  # type: ignore[union-attr]
        ])

    def end_turn(self, seq: Seq) -> int:
        traj = seq.traj
        before = self.partial.pop(traj.id, 0)  # an interrupted turn: what it made before the resume
        if seq.ticket is not None:
            self.released[seq.ticket.server] += seq.ticket.tokens
        self.first_version.setdefault(traj.id, self.version)
        finished = super().end_turn(seq)
        traj.turns[traj.turn - 1] += before
        self.generated[traj.id] += before
        if finished:
            del self.generated[traj.id]
            self.call_at(self.now, lambda: self.on_end(traj))  # after this step's bookkeeping
        elif self.dispatcher and seq.ticket is not None and self.p.hold_reports:  # held for its next turn
            self.holds[traj.id] = (self.polls + self.p.hold_reports, seq.ticket.server, seq.context + seq.target)
        return finished

    # -- weight sync -----------------------------------------------------------------------

    def pause(self, mode: str, then: Callable[[], None]) -> None:
        """Stop sending turns; ``abort``: end those in flight now, to resume after
        :meth:`resume`; ``wait``: let them finish; ``keep``: freeze them where they
        are.  ``then`` runs once the fleet is idle (or frozen)."""
        self.holding = True
        if mode == "abort":
            for s in self.servers:
                self.abort(s)
        elif mode == "keep":
            for s in self.servers:
                self.freeze(s)
            return then()
        if self.idle():
            then()
        else:
            self.on_drained = then

    def abort(self, s: FleetServer) -> None:
        self.advance(s)
        if s.busy:
            self.account(s, s.step - s.step0)
        for seq in list(s.running.values()):
            done = s.step - seq.start
            self.free(s, seq, seq.context + done)
            self.interrupt(seq, done)
        while s.waiting:
            self.interrupt(s.waiting.popleft(), 0)
        s.finish.clear()
        s.busy, s.preempted, s.prefill = False, False, 0
        s.gen += 1

    def freeze(self, s: FleetServer) -> None:
        """vLLM's ``pause(mode="keep", clear_cache=False)``: the running requests stay,
        with their KV (of the old weights), and go on after the resume; the step
        under way is lost (its prefill is charged again if it was the span's first)."""
        if not s.busy:
            return
        self.advance(s)
        self.account(s, s.step - s.step0)
        if s.step == s.step0:
            s.prefill += s.charged
            self.prefilled -= s.charged
        for seq in s.running.values():
            if s.step > seq.start:  # its turn has tokens of the old weights
                self.first_version.setdefault(seq.traj.id, self.version)
        s.busy = False
        s.gen += 1

    def interrupt(self, seq: Seq, done: int) -> None:
        """An aborted turn: its tokens so far stay in the trajectory, the rest of the
        turn waits for the resume (the pool resubmits it from its tokens)."""
        traj = seq.traj
        if seq.ticket is not None:
            self.dispatcher.release(seq.ticket)  # type: ignore[union-attr]  # aborted: no hold, no length
            self.released[seq.ticket.server] += seq.ticket.tokens
        left = seq.target - done
        made = traj.turns[traj.turn] - left
        if made:
            self.first_version.setdefault(traj.id, self.version)
        self.partial[traj.id] = self.partial.get(traj.id, 0) + made
        traj.turns[traj.turn] = left
        traj.context = seq.context + done
        self.holds.pop(traj.id, None)
        self.held.append(traj)
        self.aborted += 1

    def resume(self, flush: bool = True) -> None:
        """New weights: caches flushed (their KV is of the old ones; ``keep`` keeps
        them, and the frozen requests go on), every held turn queued and retried in
        the pool's order."""
        for s in self.servers:
            if flush:
                s.cache.clear()
                s.cached = 0
            elif s.running:
                self.schedule(s)
        self.version += 1
        self.holding = False
        held, self.held = self.held, []
        for traj in held:
            if self.dispatcher:
                self.queue.append(Seq(traj, traj.context, traj.turns[traj.turn]))
            else:
                self.submit(traj)
        if self.dispatcher:
            self.admit()
