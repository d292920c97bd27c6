"""The discrete-event simulation of benchmarks/dispatch.py: a rollout step of the fleet
model (``fleetsim._model``), its turns sent round-robin (``static``) or by our
dispatcher (``ours``), each server vLLM's scheduler with its prefix cache and
preemption (see dispatch.py's docstring)."""

from __future__ import annotations

import heapq
import math

import anyio

from backends import Dispatcher, ServerLoad

from ._model import Params, Seq, Server, Traj


class Sim:
    def __init__(self, p: Params, trajs: list[Traj], policy: str) -> None:
        self.p, self.trajs, self.policy = p, trajs, policy
        self.servers = [Server(i) for i in range(p.servers)]
        self.events: list[tuple[float, int, str, object]] = []
        self.n = 0
        self.now = 0.0
        self.overflows = 0
        self.prefilled = 0
        self.order = 0
        self.queue: list[Seq] = []
        self.generated: dict[int, int] = {}
        self.dispatcher = (
            Dispatcher(
                [p.capacity] * p.servers,
                policy="budget",
                expected_new_tokens=p.expected,
                headroom=p.headroom,
                hold_reports=p.hold_reports,
            )
            if policy == "ours"
            else None
        )

    def push(self, t: float, kind: str, data: object) -> None:
        self.n += 1
        heapq.heappush(self.events, (t, self.n, kind, data))

    def run(self) -> float:
        for traj in self.trajs:
            traj.context = traj.prompt
            self.submit(traj)
        if self.dispatcher:
            self.push(self.p.poll_s, "poll", None)
        finished = 0
        while finished < len(self.trajs):
            self.now, _, kind, data = heapq.heappop(self.events)
            if kind == "step":
                finished += self.step(data)  # type: ignore[arg-type]
            elif kind == "tool":
                self.submit(data)  # type: ignore[arg-type]
            elif kind == "poll":
                for s in self.servers:
                    self.dispatcher.observe(s.index, ServerLoad(capacity_tokens=self.p.capacity, used_tokens=s.used()))  # type: ignore[union-attr]
                self.push(self.now + self.p.poll_s, "poll", None)
                self.admit()  # a report can show room, and end holds
        return self.now

    # -- the driver ------------------------------------------------------------------

    def submit(self, traj: Traj) -> None:
        seq = Seq(traj, traj.context, traj.turns[traj.turn])
        if self.dispatcher is None:
            if traj.home < 0:
                traj.home = traj.id % self.p.servers
            self.enqueue(seq, traj.home)
        elif not self.acquire(seq):
            self.queue.append(seq)

    def remaining(self, seq: Seq) -> int:
        """The trajectory's remaining token budget: the pool's ``max_tokens``."""
        return self.p.budget - self.generated.get(seq.traj.id, 0)

    def admit(self) -> None:
        """After releases or a report, every waiting turn tries again, as the
        pool's waiters do, in ``Params.order``.  (A first turn that found no room
        spares the larger first turns after it the call: they would not fit either.)"""
        waiting, self.queue = self.queue, []
        if self.p.order == "budget":
            waiting.sort(key=lambda seq: -self.remaining(seq))  # stable: oldest first among equals
        elif self.p.order == "oracle":
            waiting.sort(key=lambda seq: -sum(seq.traj.turns[seq.traj.turn:]))
        too_big = math.inf
        for seq in waiting:
            first = seq.traj.turn == 0 and seq.context == seq.traj.prompt
            if first and seq.context >= too_big:
                self.queue.append(seq)
            elif not self.acquire(seq):
                if first:
                    too_big = seq.context
                self.queue.append(seq)

    def acquire(self, seq: Seq) -> bool:
        d = self.dispatcher
        assert d is not None
        remaining = self.remaining(seq)
        try:
            if self.p.reserve is None:
                seq.ticket = d.acquire_nowait(seq.context, session=seq.traj.id, new_tokens=remaining)
            else:
                seq.ticket = d.acquire_nowait(seq.context + min(remaining, self.p.reserve), session=seq.traj.id)
        except anyio.WouldBlock:
            return False
        self.enqueue(seq, seq.ticket.server)
        return True

    def enqueue(self, seq: Seq, server: int) -> None:
        s = self.servers[server]
        s.waiting.append(seq)
        self.schedule(s)

    # -- a vLLM-like server ----------------------------------------------------------------

    def schedule(self, s: Server) -> None:
        self.admit_waiting(s)
        self.evict(s)
        if s.running and not s.busy:
            self.start_step(s)

    def admit_waiting(self, s: Server) -> None:
        p = self.p
        # vLLM admits waiting requests in order, none in a step that preempted, each only
        # if its whole context (prefix-cache hit included) plus one token fits the blocks
        # not held by running requests; cached blocks of other requests are evicted for it.
        while s.waiting and not s.preempted and len(s.running) < p.max_num_seqs:
            seq = s.waiting[0]
            problem, prompt = seq.traj.problem, seq.traj.prompt
            shared = s.live.get(problem, 0)
            if s.used() + seq.context - (prompt if shared else 0) + 1 > p.capacity:
                break
            s.waiting.popleft()
            own = s.cache.pop(seq.traj.id, 0)
            if shared:
                head = prompt
                s.dup += prompt
            else:
                head = s.cache.pop(-1 - problem, 0)
                s.cached -= head
                s.shared += prompt
            s.cached -= own
            hit = head + (own if head == prompt else 0)  # a prefix hit needs the whole chain before it
            s.live[problem] = shared + 1
            s.prefill += seq.context - hit
            self.order += 1
            seq.order, seq.start = self.order, s.step
            s.running[seq.order] = seq
            s.base += seq.context - prompt - s.step
            heapq.heappush(s.finish, (s.step + seq.target, seq.order))

    def start_step(self, s: Server) -> None:
        """The next step of the running requests, charged all prefill admitted since the last."""
        p = self.p
        s.busy = True
        dt = max(p.t_weights, (len(s.running) + s.prefill) * p.t_compute) + (s.used() + s.dup) * p.t_kv
        self.prefilled += s.prefill
        s.prefill = 0
        self.push(self.now + dt, "step", s)

    def evict(self, s: Server) -> None:
        """Free blocks hold the prefix cache: drop the least recently freed tokens
        (a request's tail first) until running requests and cache fit."""
        over = s.used() + s.cached - self.p.capacity
        while over > 0:
            traj, tokens = next(iter(s.cache.items()))
            drop = min(tokens, over)
            if drop == tokens:
                del s.cache[traj]
            else:
                s.cache[traj] = tokens - drop
            s.cached -= drop
            over -= drop

    def free(self, s: Server, seq: Seq, tokens: int) -> None:
        """``seq`` stops running with ``tokens`` of context: its own blocks go to the
        cache, its prompt's too if no other request of its problem runs here (after
        them: vLLM frees a request's blocks tail first)."""
        problem, prompt = seq.traj.problem, seq.traj.prompt
        del s.running[seq.order]
        s.base -= seq.context - prompt - seq.start
        s.cache[seq.traj.id] = tokens - prompt
        s.cached += tokens - prompt
        s.live[problem] -= 1
        if s.live[problem]:
            s.dup -= prompt
        else:
            del s.live[problem]
            s.shared -= prompt
            s.cache[-1 - problem] = prompt
            s.cached += prompt

    def step(self, s: Server) -> int:
        s.busy = False
        s.step += 1
        ended = finished = 0
        while s.finish and s.finish[0][0] <= s.step:
            _, order = heapq.heappop(s.finish)
            seq = s.running.get(order)
            if seq is not None:  # else preempted earlier
                self.free(s, seq, seq.context + seq.target)
                finished += self.end_turn(seq)
                ended += 1
        s.preempted = False
        while s.used() > self.p.capacity:  # out of blocks: vLLM preempts the newest, to recompute later
            self.overflows += 1
            s.preempted = True
            seq = next(reversed(s.running.values()))
            done = s.step - seq.start
            self.free(s, seq, seq.context + done)
            seq.context += done
            seq.target -= done
            s.waiting.appendleft(seq)
        self.schedule(s)
        if ended and self.dispatcher:
            self.admit()
        return finished

    def end_turn(self, seq: Seq) -> int:
        traj = seq.traj
        generated = traj.turns[traj.turn]
        self.generated[traj.id] = self.generated.get(traj.id, 0) + generated
        traj.context = seq.context + seq.target
        if seq.ticket is not None:
            self.dispatcher.release(seq.ticket, generated=generated)  # type: ignore[union-attr]
        traj.turn += 1
        if traj.turn >= len(traj.turns):
            if self.dispatcher:  # the agent loop's end_session(): its hold goes at once
                self.dispatcher.forget(traj.id)
            return 1
        tokens, latency = traj.tools[traj.turn - 1]
        traj.context += tokens
        self.push(self.now + latency, "tool", traj)
        return 0
