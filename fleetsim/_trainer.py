"""One trainer policy's run on the streaming fleet (:class:`Trainer`): the problem
stream, the engine's in-flight limit, the mode's admission and batches, the learner
(updates timed by FLOPs) and the weight syncs, and the figures benchmarks/streaming.py
reports (:meth:`Trainer.report`)."""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from ._model import PARAMS, Traj, lower_bound
from ._setup import Group, Policy, Setup, problem_chunk
from ._stream_fleet import Fleet

# The learner: 32 H100s of its own at 40% MFU (assumed), 8 x 14.8e9 FLOPs per trained
# token: 6N for the forward and backward pass, 2N for the old-logprob forward.
LEARNER_FLOPS_PER_S = 32 * 989e12 * 0.40
FLOPS_PER_TRAINED_TOKEN = 8 * PARAMS


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
        rate = max(rate, 1 / limit)  # a keep rate of 0 so far (RoC dropped every group) would admit without end
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
