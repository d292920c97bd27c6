"""The setup of benchmarks/streaming.py's runs: the fleet and step sizes, the trainer
policies compared (and the diagnostics), and the problem stream every policy sees
(:func:`problem_chunk`: the same trajectories and rewards, seeded per chunk)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._model import PARAMS, Params, Traj, workload

# The sync's pause: benchmarks/weight_sync.py's disk load of 1000 MiB (median of three
# runs here, see streaming.py's docstring) scaled by bytes to 29.6 GB of bf16 weights, plus its
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
