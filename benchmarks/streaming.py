"""Streaming benchmark: 20 RL steps of rStar2's stage 1 on a simulated fleet, trainer policies side by side.

benchmarks/dispatch.py's discrete-event fleet (its docstring has the calibration:
Qwen3-14B on H100s, vLLM's scheduler, prefix cache and preemption, the dispatcher
polling ``/metrics``, rStar2's turn, tool and response-length shapes), run for many
steps with a trainer around it, on 16 servers.  Each step is rStar2's stage 1: 128
problems x 32 samples, GRPO-RoC keeps 16 of each group (uniformly here: lengths do
not depend on rewards in the model); a problem's solve rate is Beta(0.5, 0.5)
(assumed), so ~20% of groups have equal rewards and are dropped.  Every policy sees
the same problems, trajectories and rewards (seeded per chunk of 128 problems).

The learner and the sync, modelled:

- An update takes its trained tokens x 8 x 14.8e9 FLOPs (6N forward and backward,
  2N for the old log-probs) on 32 H100s of its own at 40% MFU (assumed):
  5.1e15 FLOP/s, ~84 s for 128 kept groups (a batch keeps ~80% of them).
- A sync pauses the fleet for the load of 29.6 GB of bf16 weights at
  benchmarks/weight_sync.py's measured disk load (0.406 s per 1000 MiB here),
  plus its measured pause, flush, version and resume round trips: 11.5 s; then the
  prefix caches are flushed (their KV is of the old weights).

The policies (the trainer's code paths, rstar2_async/recipe):

- ``sync_static``, ``sync_ours``: on-policy (``run.max_staleness = 0``): a step's
  rollout, update and sync in turn; the fleet dispatched round-robin, or by our
  KV-budget dispatcher and the pool's retry order.
- ``one_step_overlap``: today's ``run.max_staleness = 1`` on-policy mode: step
  k + 1's rollout starts when step k's update does, and the sync waits for the
  turns in flight (``pause_mode = "wait"``).
- ``streaming_s1``, ``streaming_s2``: ``run.mode = "streaming"`` with
  ``max_staleness`` 1 and 2, as recipe/_streaming.py runs it: at most
  (S + 1) x 128 groups started ahead of the learner (in flight, finished but
  untrained, or in the update under way, whose room comes back after its sync);
  each batch is the next 128 positions of the stream, once all are finished, and
  trains the groups RoC kept of them (the on-policy step's data); a sync aborts the
  turns in flight, which resume from their tokens on the new weights.
- ``streaming_s1_keep_kv``: streaming_s1 with the sync the trainer does not do
  (yet): vLLM's ``pause_generation(mode="keep", clear_cache=False)`` (vLLM 0.32:
  docs.vllm.ai/en/v0.32.0/training/async_rl, ``EngineCore.pause_scheduler``): the
  turns in flight freeze for the same pause, then go on with their KV of the old
  weights, and the prefix caches are kept.  PipelineRL (arXiv 2509.19128, its
  Figure 7) measured the off-policyness this adds as negligible, and NeMo-RL maps
  its ``recompute_kv_cache_after_weight_updates`` to ``clear_cache`` (NVIDIA-NeMo/RL
  PR 3839).  A group's staleness still counts from its oldest token, so the
  bound and its proof are unchanged; what changes is that tokens after a sync
  attend to keys and values of the previous weights (the sampler's logprobs,
  which the loss's importance weight uses, are of exactly that).

Diagnostics, run only when named with ``--policies``: ``streaming_s1_no_sync``
(the fleet alone, never paused: every group is too stale, but its utilization is
the most this fleet and dispatcher reach with any sync), and
``streaming_s1_expected_keep`` (admission counting the groups in flight by the
keep rate observed so far: unsound, see recipe/_streaming.py; here its extra groups
wait in the engine's queue, ``max_in_flight``, so they cost nothing and gain nothing).

Figures per policy (medians over the seeds; steady state is from the first batch
taken to the last): ``trained_tokens_per_s`` (the kept samples' prompts, responses
and tool outputs per second), ``fleet_utilization`` (the work bound of the
trajectories finished in the window, dispatch.py's ``lower_bound``, over the
window: 1.0 is a fleet always at its most efficient), ``kv_fill`` and
``servers_idle_share`` (sampled each second), ``learner_idle_share``, the staleness
histogram of trained groups (mean count per run), and ``groups_wasted`` (generated,
kept by RoC, then too stale to train: the rule makes it 0; the largest over the
seeds).  Where the fleet's time goes, as shares of the servers' time in the window
(:meth:`Trainer.fleet_time`): ``time_work`` (weight reads as if every step
attended to a full cache, and attention: what the bound charges), ``time_below_full_cache``,
``time_prefill_bound`` (steps whose prefill outlasts the weight read) and
``time_idle`` (the pause); ``bound_prompt_credit`` is what the bound takes off for a
problem's 32 samples sharing one copy of its prompt, which they do only while they
run on one server at once: utilization ~ time_work - bound_prompt_credit.
Top level: streaming_s1's ``speedup_vs_sync_static`` and
``speedup_vs_sync_ours`` (medians of the per-seed ratios of trained tokens per
second), ``fleet_utilization`` and ``groups_wasted``.

Measured (8 seeds, 20 steps, every policy; ``python benchmarks/streaming.py``,
2026-12-02), trained tokens per second over synchronous static: sync_ours 1.214x,
one_step_overlap 1.262x, streaming_s1 **1.602x** (**1.321x** sync_ours),
streaming_s2 1.603x, streaming_s1_keep_kv 1.685x; fleet utilization 0.506, 0.614,
0.637, **0.811**, 0.812, 0.852; learner idle 87%, 84%, 84%, 79%, 79%, 78%; 0 groups
wasted in every policy; streaming_s1 trains 9% of its groups at staleness 0 and 91%
at 1.  Every policy now trains the same batches (a streaming batch is a step's 128
problems, as on-policy; the rule before took 128 *kept* groups a batch, ~25% more
per update and sync, and measured 1.635x, 1.349x and 0.827 then).  The pool's order
matters for streaming: ``streaming_s1_budget_order`` (on-policy's retry order,
largest remaining budget first, so new groups' first turns overtake the turns of the
group the learner waits for) reaches 1.458x and 0.697 of the bound.  S = 2 gains
nothing over S = 1: the fleet is the bottleneck at either bound.

Where the utilization goes (under the rule before, 4 seeds, 10 steps, ``--repeats 4
--steps 10``, all policies and the no-sync diagnostic: streaming_s1 1.640x static,
1.351x ours, 0.827 of the bound, 0 wasted; under today's rule the shares are alike:
pause 3.6%, prefill-bound 7.0%, below full cache 3.2%, prompt credit 5.0%).  Of
streaming_s1's server time, 2.9% is the pause (time_idle: 11.5 s of each ~396 s
step), 6.0% steps bound by prefill, 3.2% weight reads below a full cache, and the
bound credits 5.2% for shared prompts: 0.879 - 0.052 = 0.827.  Without any sync
(``streaming_s1_no_sync``) the same fleet reaches 0.886 (prefill 2.6%, below full
cache 3.3%, prompt credit 5.5%): no sync mechanism can take streaming_s1 to 0.9
here.  The syncs take 6.3% of the server time: the pause 2.9, and 3.4 recomputing
what the abort and the flush threw away (73M tokens prefilled in 10 steps against
38M).
``streaming_s1_keep_kv`` keeps the KV and recomputes nothing: 0.859 of the bound,
1.701x static, 0 wasted, every group at staleness 0 or 1 as in streaming_s1; with a 1 s pause (``--pause-s
1``, 1 seed, 4 steps: a what-if, not a measured load) it reached 0.882 against
streaming_s1's 0.849.  What the fleet loses without syncs is the dispatcher's: its
10% headroom keeps the caches ~0.85 full (less headroom fills them more but evicts
the prefixes of sessions between turns: 0.05 measured 0.864, 0.02 0.840, without
syncs, 1 seed, 5 steps), and a problem's 32 samples start as the engine has room and land
wherever the budget is, so they rarely hold one copy of the prompt (seeding each
first turn's affinity with its problem's first server, a what-if on the
dispatcher's sessions: 0.830 against 0.828, credit unchanged; 1 seed, 4 steps).
Rolling syncs would not help in this model: each server still pauses for its load
and recomputes its contexts, and the learner does not wait for the fleet (idle 79%).
Target: utilization 0.9 of the bound: not met (0.811; 0.852 with ``keep``).

Usage: ``python benchmarks/streaming.py [--repeats 8] [--steps 20] [--jobs 2]`` (the
simulation is deterministic: load changes its wall time, never its figures).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # backends
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this script

from _dispatch_sim import Sim
from _fleet_model import PARAMS, Params, Seq, Server, Traj, lower_bound, workload

from backends import ServerLoad

# The learner: 32 H100s of its own at 40% MFU (assumed), 8 x 14.8e9 FLOPs per trained
# token: 6N for the forward and backward pass, 2N for the old-logprob forward.
LEARNER_FLOPS_PER_S = 32 * 989e12 * 0.40
FLOPS_PER_TRAINED_TOKEN = 8 * PARAMS

# The sync's pause: benchmarks/weight_sync.py's disk load of 1000 MiB (median of three
# runs here, see the docstring) scaled by bytes to 29.6 GB of bf16 weights, plus its
# measured pause, flush, version and resume round trips.
LOAD_S_PER_MIB = 0.406 / 1000
WEIGHT_BYTES = 2 * PARAMS
SYNC_OVERHEAD_S = 0.019
PAUSE_S = WEIGHT_BYTES / (1 << 20) * LOAD_S_PER_MIB + SYNC_OVERHEAD_S


@dataclass
class Setup:
    steps: int = 20
    servers: int = 16
    batch: int = 128
    """Problems per step, in every mode (rStar2: 128)."""
    samples: int = 32
    keep: int = 16
    """rStar2's oversampling: 32 samples per problem, RoC keeps 16."""
    solve: tuple[float, float] = (0.5, 0.5)
    """A problem's solve probability ~ Beta(0.5, 0.5) (assumed: many problems are
    nearly always or never solved): 20% of groups have 32 equal rewards and are dropped."""
    max_in_flight: int = 4096
    """The engine's ``rollout.max_in_flight``: one synchronous step's trajectories,
    so that a synchronous step starts them all at once, as dispatch.py does."""
    pause_s: float = PAUSE_S
    overlap_pause: str = "wait"
    """The one-step overlap's ``pause_mode``: today's default, ``wait``."""

    def params(self, order: str = "budget") -> Params:
        return Params(servers=self.servers, trajectories=self.batch * self.samples, group=self.samples, order=order)


@dataclass(frozen=True)
class Policy:
    dispatch: str  # "static" or "ours"
    mode: str  # "sync", "overlap" or "stream"
    max_staleness: int = 0
    order: str = "budget"
    """The pool's retry order of waiting turns (``ServerPool(order=...)``): largest
    remaining budget first (``budget``, on-policy), or the oldest trajectory's first
    (``session``, what streaming mode sets)."""
    pause: str = "abort"
    """How a streaming sync pauses the servers: ``abort`` (the trainer's: turns in
    flight stop and resume from their tokens, caches flushed), ``keep`` (vLLM's
    ``pause(mode="keep", clear_cache=False)``: they freeze and go on with the KV of
    the old weights, caches kept) or ``none`` (no sync at all: the fleet alone, a
    diagnostic whose groups are all too stale)."""
    expected_keep: bool = False
    """Admission counts the groups in flight scaled by the keep rate observed so far
    (a proposal for RoC-heavy runs, unsound: when more of them are kept than
    expected, the youngest are trained past the bound; a diagnostic of its waste)."""


POLICIES = {
    "sync_static": Policy("static", "sync"),
    "sync_ours": Policy("ours", "sync"),
    "one_step_overlap": Policy("ours", "overlap", 1),
    "streaming_s1": Policy("ours", "stream", 1, "session"),
    "streaming_s2": Policy("ours", "stream", 2, "session"),
    "streaming_s1_budget_order": Policy("ours", "stream", 1, "budget"),
    "streaming_s1_keep_kv": Policy("ours", "stream", 1, "session", "keep"),
}
DIAGNOSTICS = {
    "streaming_s1_no_sync": Policy("ours", "stream", 1, "session", "none"),
    "streaming_s1_expected_keep": Policy("ours", "stream", 1, "session", expected_keep=True),
}
"""Run only when named (``--policies``): not trainer policies, yardsticks."""


@dataclass
class Group:
    index: int
    trajs: list[Traj]
    keep: list[int] | None
    """The samples RoC keeps (uniformly at random: lengths do not depend on rewards
    here); ``None``: all rewards equal, dropped."""
    tokens: int
    """What the learner trains on if it is kept: the kept samples' prompts and responses
    (generated and tool tokens)."""
    step: int = -1
    left: int = 0
    version: int = 1 << 30
    """The oldest weight version of any of its tokens."""


def problem_chunk(setup: Setup, seed: int, chunk: int) -> list[Group]:
    """Problems ``chunk * batch`` onwards: the same trajectories and rewards for every policy."""
    rng = random.Random(f"{seed}/{chunk}")
    n = setup.batch * setup.samples
    trajs = workload(setup.params(), rng)
    groups = []
    for j in range(setup.batch):
        members = trajs[j * setup.samples : (j + 1) * setup.samples]
        for t in members:
            t.id += chunk * n
            t.problem += chunk * setup.batch
        solve = rng.betavariate(*setup.solve)
        rewards = [rng.random() < solve for _ in members]
        keep = None if len(set(rewards)) == 1 else rng.sample(range(setup.samples), setup.keep)
        tokens = sum(members[i].prompt + sum(members[i].turns) + sum(x for x, _ in members[i].tools) for i in keep or ())
        groups.append(Group(chunk * setup.batch + j, members, keep, tokens, left=setup.samples))
    return groups


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


class Waiting:
    """The driver's waiting turns in the pool's retry order (the policy's ``order``,
    then oldest), with numpy columns (context, remaining budget, and the
    session's hold: the poll it ends at, its server, its tokens) so that a retry
    pass finds in C the few turns that can fit."""

    def __init__(self, fleet: Fleet) -> None:
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
        self.step(s)  # the last step of the span: dispatch.py's step end
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
        """Every waiting turn tries again (dispatch.py's ``admit``), but only those
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


@dataclass
class Batch:
    taken: float
    seconds: float
    tokens: int
    staleness: list[int]


class Trainer:
    """One policy's run: the problem stream, the engine's in-flight limit, the mode's
    admission and batches, and the learner (updates timed by FLOPs, then a sync)."""

    def __init__(self, setup: Setup, policy: Policy, seed: int) -> None:
        self.setup, self.policy, self.seed = setup, policy, seed
        self.fleet = Fleet(setup.params(policy.order), policy.dispatch, self.trajectory_ended)
        self.chunks: dict[int, list[Group]] = {}
        self.group_of: dict[int, Group] = {}
        self.running = 0  # trajectories in the engine, at most max_in_flight
        self.engine_queue: deque[Traj] = deque()
        self.next_problem = 0
        # streaming, as recipe/_streaming.py keeps it: groups started and not finished,
        # finished and kept by stream position, RoC-dropped positions not yet passed,
        # the next position to train, and the groups of the update under way
        self.in_flight: dict[int, Group] = {}
        self.kept: dict[int, Group] = {}
        self.dropped: set[int] = set()
        self.head = 0
        self.updating = 0
        self.rollouts: dict[int, list[Group]] = {}  # sync and overlap: step -> its finished groups
        self.taken = 0
        self.loop_free = True  # sync and overlap: the trainer's loop waits in take()
        self.batches: list[Batch] = []
        self.updates = 0
        self.learning = False
        self.syncing = False
        self.finished: list[tuple[float, Traj]] = []
        self.wasted: list[Group] = []  # generated, kept by RoC, then past the staleness bound
        self.roc_dropped = 0
        self.trained_groups = 0  # streaming: taken by a batch (for the observed keep rate)
        self.samples: list[tuple[float, float, float]] = []  # (time, KV fill, servers idle), each poll_s

    def run(self) -> dict:
        if self.policy.mode == "stream":
            self.fill()
        else:
            self.begin_rollout(0)
        self.sample()
        self.fleet.run_until(lambda: self.updates == self.setup.steps)
        return self.report()

    # -- the rollout side -------------------------------------------------------------------

    def group(self, i: int) -> Group:
        chunk, j = divmod(i, self.setup.batch)
        if chunk not in self.chunks:
            self.chunks[chunk] = problem_chunk(self.setup, self.seed, chunk)
        return self.chunks[chunk][j]

    def start_group(self, i: int, step: int = -1) -> None:
        g = self.group(i)
        g.step = step
        for traj in g.trajs:
            self.group_of[traj.id] = g
            self.start_trajectory(traj)

    def start_trajectory(self, traj: Traj) -> None:
        if self.running >= self.setup.max_in_flight:
            self.engine_queue.append(traj)
            return
        self.running += 1
        traj.context = traj.prompt
        self.fleet.submit(traj)

    def trajectory_ended(self, traj: Traj) -> None:
        self.running -= 1
        if self.engine_queue:
            self.start_trajectory(self.engine_queue.popleft())
        self.finished.append((self.fleet.now, traj))
        g = self.group_of.pop(traj.id)
        g.version = min(g.version, self.fleet.first_version.pop(traj.id))
        g.left -= 1
        if g.left == 0:
            self.group_done(g)

    def group_done(self, g: Group) -> None:
        if self.policy.mode != "stream":
            self.rollouts[g.step].append(g)
            if len(self.rollouts[g.step]) == self.setup.batch:
                self.take()
        else:
            del self.in_flight[g.index]
            if g.keep is None:
                self.roc_dropped += 1
                self.dropped.add(g.index)
            else:
                self.kept[g.index] = g
            self.fill()
            self.train_ready()

    # -- synchronous and one-step overlap: the trainer's loop as it is ----------------------------

    def begin_rollout(self, step: int) -> None:
        self.rollouts[step] = []
        for i in range(step * self.setup.batch, (step + 1) * self.setup.batch):
            self.start_group(i, step)

    def take(self) -> None:
        """``Rollouts.take``: step k's rollout once it is done and the loop is back;
        the overlap then starts step k + 1's, which runs through k's update and sync."""
        k = self.taken
        done = self.rollouts.get(k)
        if not self.loop_free or done is None or len(done) < self.setup.batch:
            return
        self.loop_free = False
        self.taken += 1
        if self.policy.mode == "overlap" and k + 1 < self.setup.steps:
            self.begin_rollout(k + 1)
        kept = [g for g in self.rollouts.pop(k) if g.keep is not None]
        self.roc_dropped += self.setup.batch - len(kept)
        self.train(kept, then=lambda: self.sync(then=self.loop_back))

    def loop_back(self) -> None:
        self.loop_free = True
        if self.policy.mode == "sync" and self.taken < self.setup.steps:
            self.begin_rollout(self.taken)
        self.take()

    # -- streaming --------------------------------------------------------------------------------

    def fill(self) -> None:
        """The trainer's staleness rule (recipe/_streaming.py, AReaL's in groups): at
        most (S + 1) x B groups started ahead of the learner: in flight, finished but
        untrained (kept, or RoC-dropped and not yet passed by a batch), or in the update
        under way (their room comes back once its sync is done)."""
        limit = (self.policy.max_staleness + 1) * self.setup.batch
        resolved = self.roc_dropped + len(self.kept) + self.trained_groups
        rate = 1.0 if not self.policy.expected_keep or not resolved else 1 - self.roc_dropped / resolved
        while rate * len(self.in_flight) + len(self.kept) + len(self.dropped) + self.updating < limit:
            self.in_flight[self.next_problem] = self.group(self.next_problem)
            self.start_group(self.next_problem)
            self.next_problem += 1

    def train_ready(self) -> None:
        """The trainer's order: when the learner and the sync are free, the next B
        positions once all are finished (their RoC-kept groups trained), waiting for
        the oldest unfinished group even when newer ones are done."""
        s = self.setup
        if self.learning or self.syncing or len(self.batches) >= s.steps:
            return
        positions = range(self.head, self.head + s.batch)
        if not all(p in self.kept or p in self.dropped for p in positions):
            return
        take = [p for p in positions if p in self.kept]
        self.dropped.difference_update(positions)
        self.head += s.batch
        self.updating = s.batch
        self.trained_groups += len(take)
        self.train([self.kept.pop(p) for p in take], then=lambda: self.sync(then=self.streamed))

    def streamed(self) -> None:
        """The update and its sync are done (the trainer's learn_step): their room comes back."""
        self.updating = 0
        self.fill()
        self.train_ready()

    # -- the learner and the sync -----------------------------------------------------------------

    def train(self, groups: list[Group], then: Callable[[], None]) -> None:
        """An update on the groups within the staleness bound (the trainer's ``_update``)."""
        b = len(self.batches)
        fresh = self.within_bound(groups)
        tokens = sum(g.tokens for g in fresh)
        seconds = tokens * FLOPS_PER_TRAINED_TOKEN / LEARNER_FLOPS_PER_S
        self.batches.append(Batch(self.fleet.now, seconds, tokens, [b - g.version for g in fresh]))
        self.learning = True

        def done() -> None:
            self.learning = False
            self.updates += 1
            then()

        self.fleet.call_at(self.fleet.now + seconds, done)

    def within_bound(self, groups: list[Group]) -> list[Group]:
        """The groups the next batch may train on; the others are wasted."""
        b = len(self.batches)
        fresh = [g for g in groups if b - g.version <= self.policy.max_staleness]
        self.wasted += [g for g in groups if b - g.version > self.policy.max_staleness]
        return fresh

    def sync(self, then: Callable[[], None] | None) -> None:
        """Pause (streaming: abort; the overlap: its pause mode), load, flush, resume."""
        assert not self.syncing, "a sync started before the last one ended: the learner outran the load"
        mode = self.setup.overlap_pause if self.policy.mode == "overlap" else self.policy.pause
        if mode == "none":
            return then() if then else None
        self.syncing = True

        def resume() -> None:
            self.fleet.resume(flush=mode != "keep")
            self.syncing = False
            if then:
                then()

        self.fleet.pause(mode, lambda: self.fleet.call_at(self.fleet.now + self.setup.pause_s, resume))

    # -- figures ----------------------------------------------------------------------------------

    def sample(self) -> None:
        """What the fleet is doing, once a poll interval: the share of KV held by
        running requests, and of servers with none (idle, paused or drained)."""
        f = self.fleet
        for s in f.servers:
            f.advance(s)
        fill = sum(s.used() for s in f.servers) / (len(f.servers) * f.p.capacity)
        idle = sum(not s.running for s in f.servers) / len(f.servers)
        self.samples.append((f.now, fill, idle))
        f.call_at(f.now + f.p.poll_s, self.sample)

    def report(self) -> dict:
        """Steady state: from the first batch taken to the last (sync: whole cycles of
        rollout, update and sync), trajectories finished between them for the fleet."""
        p, batches = self.fleet.p, self.batches
        t0, t1 = batches[0].taken, batches[-1].taken
        window = t1 - t0
        done = [t for at, t in self.finished if t0 < at <= t1]
        work, _ = lower_bound(p, done)
        unshared, _ = lower_bound(replace(p, group=1), done)
        wasted = {t.id for g in self.wasted for t in g.trajs}
        wasted_work, _ = lower_bound(p, [t for _, t in self.finished if t.id in wasted])
        all_work, _ = lower_bound(p, [t for _, t in self.finished])
        steady = [x for x in self.samples if t0 < x[0] <= t1]
        end = batches[-1].taken + batches[-1].seconds
        return {
            "trained_tokens_per_s": sum(b.tokens for b in batches[1:]) / window,
            "trained_tokens_per_s_whole_run": sum(b.tokens for b in batches) / end,
            "fleet_utilization": work / window,
            "kv_fill": statistics.mean(x[1] for x in steady),
            "servers_idle_share": statistics.mean(x[2] for x in steady),
            "wasted_work_share": wasted_work / all_work,
            "learner_idle_share": 1 - sum(b.seconds for b in batches[:-1]) / window,
            "staleness": Counter(x for b in batches for x in b.staleness),
            "groups_wasted": len(self.wasted),
            "groups_trained": sum(len(b.staleness) for b in batches),
            "groups_roc_dropped": self.roc_dropped,
            "groups_in_flight_at_end": len({g.index for g in self.group_of.values()}),
            "run_s": end,
            "step_s": window / (len(batches) - 1),
            "update_s": statistics.mean(b.seconds for b in batches),
            "turns_aborted": self.fleet.aborted,
            "prefill_tokens": self.fleet.prefilled,
            "preemptions": self.fleet.overflows,
            **self.fleet_time(t0, t1),
            "bound_prompt_credit": (unshared - work) / window,
        }

    def fleet_time(self, t0: float, t1: float) -> dict[str, float]:
        """Where the servers' time in the window goes, as shares of it (they add up
        to 1): ``time_work``, the steps' weight reads as if each attended to a full
        cache and their attention (what the bound charges, less its prompt sharing);
        ``time_below_full_cache``, the rest of the weight reads; ``time_prefill_bound``,
        steps whose tokens' GEMMs outlast the weight read (prefill: new prompts, tool
        outputs, and contexts recomputed after an abort, a flush or an eviction);
        ``time_idle``, no step running (the pause, drained servers) or one a sync cut
        short.  ``bound_prompt_credit`` (top level) is what the
        bound takes off for a problem's samples sharing one copy of its prompt, which
        they do only while running on the same server: utilization = time_work -
        bound_prompt_credit, within the work of trajectories that straddle the window."""
        p = self.fleet.p
        spans = [x for x in self.fleet.spans if t0 < x[0] <= t1]
        total = p.servers * (t1 - t0)
        steps, attended, compute = (sum(x[i] for x in spans) for i in range(1, 4))
        work = attended / p.capacity * p.t_weights + attended * p.t_kv
        below = (steps - attended / p.capacity) * p.t_weights
        return {
            "time_work": work / total,
            "time_below_full_cache": below / total,
            "time_prefill_bound": compute / total,
            "time_idle": 1 - (work + below + compute) / total,
        }


def simulate(task: tuple[Setup, str, int]) -> tuple[str, int, dict]:
    setup, name, seed = task
    wall, cpu = time.perf_counter(), time.process_time()
    row = Trainer(setup, {**POLICIES, **DIAGNOSTICS}[name], seed).run()
    row["sim_wall_s"], row["sim_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    return name, seed, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=Setup.steps)
    parser.add_argument("--servers", type=int, default=Setup.servers)
    parser.add_argument("--seed", type=int, default=0, help="the first seed; the repeats use seed, seed + 1, ...")
    parser.add_argument("--max-in-flight", type=int, default=Setup.max_in_flight)
    parser.add_argument("--overlap-pause", choices=["wait", "abort"], default=Setup.overlap_pause)
    parser.add_argument("--pause-s", type=float, default=PAUSE_S, help="a sync's pause (default: measured, scaled)")
    parser.add_argument("--policies", nargs="+", choices=[*POLICIES, *DIAGNOSTICS], default=list(POLICIES))
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="simulations run at once")
    args = parser.parse_args()
    setup = Setup(steps=args.steps, servers=args.servers, max_in_flight=args.max_in_flight,
                  overlap_pause=args.overlap_pause, pause_s=args.pause_s)  # fmt: skip
    tasks = [(setup, name, seed) for seed in range(args.seed, args.seed + args.repeats) for name in args.policies]
    rows: dict[str, dict[int, dict]] = {name: {} for name in args.policies}
    wall, cpu = time.perf_counter(), time.process_time()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for name, seed, row in pool.imap_unordered(simulate, tasks):
            rows[name][seed] = row
            print(json.dumps({"seed": seed, "policy": name, **row}), file=sys.stderr)
    ordered = {name: [by_seed[k] for k in sorted(by_seed)] for name, by_seed in rows.items()}
    cpu = time.process_time() - cpu + sum(r["sim_cpu_s"] for rs in ordered.values() for r in rs)  # parent + workers
    print(json.dumps(summary(ordered, args, setup, time.perf_counter() - wall, cpu)))


def summary(rows: dict[str, list[dict]], args: argparse.Namespace, setup: Setup, wall: float, cpu: float) -> dict:
    med = lambda name, key: statistics.median(r[key] for r in rows[name])
    per_policy = {}
    for name, rs in rows.items():
        hist: Counter[int] = Counter()
        for r in rs:
            hist.update(r["staleness"])
        per_policy[name] = {
            **{k: round(med(name, k), 3) for k in rs[0] if k != "staleness"},
            "staleness_histogram": {str(k): round(v / len(rs), 1) for k, v in sorted(hist.items())},
            "groups_wasted_max": max(r["groups_wasted"] for r in rs),
        }

    def speedup(name: str, base: str) -> float | None:
        if name not in rows or base not in rows:
            return None
        return round(statistics.median(a["trained_tokens_per_s"] / b["trained_tokens_per_s"] for a, b in zip(rows[name], rows[base])), 3)

    head = "streaming_s1"
    return {
        "benchmark": "streaming",
        "servers": setup.servers,
        "steps": setup.steps,
        "repeats": args.repeats,
        "speedup_vs_sync_static": speedup(head, "sync_static"),
        "speedup_vs_sync_ours": speedup(head, "sync_ours"),
        "fleet_utilization": per_policy.get(head, {}).get("fleet_utilization"),
        "groups_wasted": per_policy.get(head, {}).get("groups_wasted_max"),
        "speedups_vs_sync_static": {n: speedup(n, "sync_static") for n in rows},
        "policies": per_policy,
        "pause_s": round(setup.pause_s, 2),
        "max_in_flight": setup.max_in_flight,
        "overlap_pause": setup.overlap_pause,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    main()
