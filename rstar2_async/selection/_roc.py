"""GRPO-RoC resampling: Resample-on-Correct (rStar2-Agent, arXiv 2508.20722, Sec. 3.2).

Rollouts are oversampled (``n_oversample`` per problem, rStar2: 32) and each finished
group is downsampled to ``n`` (rStar2: 16) before the GRPO update:

0. A group holding a trajectory that stopped at an infrastructure failure
   (``Trajectory.infra_failed``: the sandbox or the servers failed, not the model) is
   dropped whole (this project's rule; rStar2 has none).  Why dropped and not re-rolled
   here: the rollout engine has already rolled such a sample again
   (``rollout.infra_rerolls`` times, in its slot), so what reaches RoC failed every
   try, and waiting for more tries would hold the step through an outage (the run's
   circuit breaker, ``run.max_infra_failed_rate``, is what answers an outage).  Why the
   whole group: its baseline (the group's mean reward) must not count a reward the
   model never earned or lost, and the group without the sample is no longer the
   ``n_oversample`` draws the other rules assume; a re-rolled sample is (the
   infrastructure's failures hang on timing, not on what the sample wrote).
1. A group whose rewards are all equal carries no advantage signal: dropped whole.
2. Each class keeps its share of the oversampled group, rounded (rStar2's released
   code: Python's ``round``, half to even), and a class that would fall below
   ``min_per_class`` (rStar2: 2) is raised to that (or to all it has), the other
   class taking the rest: :func:`split_counts`.
3. Positives are filtered for quality by a penalty (lower is better)::

       penalty = tool_error_ratio + format_penalty
       tool_error_ratio = errors / tool calls          (0.5 with no tool call)
       format_penalty   = 1                             if <answer> is missing/malformed
                        = min(1, (answers - 1) / turns) otherwise

   ``selection="lowest_penalty"`` keeps the positives with the smallest penalty
   (rStar2's released code; ties broken by a seeded shuffle);
   ``selection="inverse_penalty"`` samples them without replacement with
   probability proportional to ``1 / (penalty + PENALTY_FLOOR)`` (the paper's text).
4. Negatives are sampled uniformly at random: their failures are kept diverse.

Pure policy (STYLE habit 7): no I/O, no torch. Deterministic for a given
``random.Random`` state. Every decision is reported in :class:`RocDecision`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, final

import msgspec

from ..reward import answer_format
from ..types import Group, Trajectory

PENALTY_FLOOR = 0.05
"""Added to a penalty before inverting it for ``inverse_penalty`` sampling, so a
clean trajectory (penalty 0) is ~11x as likely as one with penalty 0.5, not
infinitely more likely."""

Selection = Literal["lowest_penalty", "inverse_penalty"]
Rounding = Literal["half_even", "half_up"]


class FormatVerdict(NamedTuple):
    """What a format checker reports about a trajectory's final answer."""

    ok: bool
    """An ``<answer>`` block is present and well formed."""
    num_blocks: int
    """``<answer>`` blocks over the whole response."""


def default_format_check(traj: Trajectory) -> FormatVerdict:
    """The default checker. With the response text it asks the reward's parser
    (:func:`rstar2_async.reward.answer_format`: complete blocks, stray tags, a boxed
    answer in the last block) about the model's own text (``Trajectory.model_text``,
    tool outputs left out); without text it trusts what the rollout recorded
    (``Turn.num_answer_blocks``). Either way a trajectory that did not end with an
    answer (turn limit, token budget, timeout, error) has a missing answer.

    Pass a different ``check`` to :func:`format_penalty` / :func:`trajectory_penalty`
    to change the rule.
    """
    if traj.response_text:
        fmt = answer_format(traj.model_text)  # a tool's output holds no answer of the model's
        ok = fmt.answer_blocks >= 1 and fmt.unmatched_tags == 0 and fmt.boxed_in_answer
        return FormatVerdict(ok and traj.finish_reason == "answer", fmt.answer_blocks)
    blocks = sum(t.num_answer_blocks for t in traj.turns)
    return FormatVerdict(traj.finish_reason == "answer" and blocks >= 1, blocks)


FormatCheck = Callable[[Trajectory], FormatVerdict]


def tool_error_ratio(traj: Trajectory) -> float:
    """Share of tool responses that are errors; 0.5 for a trajectory with no call
    (neutral: neither rewarded nor punished for not using the tool)."""
    calls = traj.num_tool_calls
    return 0.5 if calls == 0 else traj.num_tool_errors / calls


def format_penalty(traj: Trajectory, check: FormatCheck = default_format_check) -> float:
    """1 if the answer is missing or malformed, else ``min(1, (blocks - 1) / turns)``:
    0 for exactly one answer, growing with extra answer blocks per turn."""
    fmt = check(traj)
    if not fmt.ok:
        return 1.0
    return min(1.0, (fmt.num_blocks - 1) / max(1, traj.num_turns))


def trajectory_penalty(traj: Trajectory, check: FormatCheck = default_format_check) -> float:
    """RoC's quality penalty of a positive trajectory, in [0, 2]; lower is better."""
    return tool_error_ratio(traj) + format_penalty(traj, check)


@final
class Dropped(msgspec.Struct, frozen=True):
    """One trajectory left out, and why (``infra_failed``: it stopped at an infrastructure
    failure; ``infra_group``: another of its group did; ``all_equal_rewards``,
    ``negative_downsampled``, ``positive_penalty`` or ``positive_sampled_out``)."""

    sample_index: int
    reason: str
    reward: float
    penalty: float | None = None


@final
class RocDecision(msgspec.Struct, frozen=True):
    """The outcome of downsampling one group.

    ``group`` is None when the whole group was dropped; otherwise it holds the kept
    trajectories in their original order. ``kept + [d.sample_index for d in dropped]``
    is a permutation of the group's sample indices.
    """

    group: Group | None
    kept: list[int]
    dropped: list[Dropped]
    num_positive: int
    num_negative: int
    reason: str = ""


def split_counts(
    num_pos: int, num_neg: int, n: int, *, min_per_class: int, rounding: Rounding
) -> tuple[int, int]:
    """How many positives and negatives to keep out of ``num_pos + num_neg > n``.

    rStar2's released rule (``rstar2_agent/down_sample/roc.py``), in its order:

    1. each class keeps ``round(count * n / total)``, rounded half to even
       (``"half_even"``, Python's ``round``) or half up (``"half_up"``);
    2. if *both* classes round below ``min_per_class``, the group is kept whole:
       ``(num_pos, num_neg)`` is returned (this needs ``n < 2 * min_per_class``);
    3. negatives get ``n`` minus the positives' count (the two roundings already sum
       to ``n`` except at a tie: always with half up, with half to even when ``n`` is
       odd; the positives' rounding decides there, where rStar2's code fails its assert);
    4. negatives below ``min(min_per_class, num_neg)`` are raised to it, positives
       taking the rest; then positives below ``min(min_per_class, num_pos)`` likewise.

    Otherwise always sums to ``n``.  For 32 kept to 16 with half to even and 2 per
    class, 5 positives keep 2 and 2 positives keep both; half up with 1 per class
    (this project's rule before) keeps 3 and 1.

    Raises:
        ValueError: ``rounding`` is neither ``"half_even"`` nor ``"half_up"``.
    """
    total = num_pos + num_neg
    assert total > n >= 1, f"split_counts needs num_pos + num_neg > n >= 1, got {total}, {n}"
    assert min_per_class >= 0, f"split_counts: min_per_class must be >= 0, got {min_per_class}"
    k_pos = _round(num_pos * n / total, rounding)
    if k_pos < min_per_class and _round(num_neg * n / total, rounding) < min_per_class:
        return num_pos, num_neg
    k_neg = n - k_pos
    if k_neg < min(min_per_class, num_neg):
        k_neg = min(min_per_class, num_neg)
        k_pos = n - k_neg
    if k_pos < min(min_per_class, num_pos):
        k_pos = min(min_per_class, num_pos)
        k_neg = n - k_pos
    return k_pos, k_neg


def _round(x: float, rounding: Rounding) -> int:
    if rounding == "half_even":
        return round(x)  # Python's: 2.5 -> 2, 3.5 -> 4 (x is exact at ties: count * n / total)
    if rounding == "half_up":
        return math.floor(x + 0.5)
    raise ValueError(f"split_counts rounding: expected 'half_even' or 'half_up', got {rounding!r}")


def roc_downsample(
    group: Group,
    n: int,
    rng: random.Random,
    *,
    selection: Selection = "lowest_penalty",
    min_per_class: int = 2,
    rounding: Rounding = "half_even",
    positive_threshold: float = 0.5,
    check: FormatCheck = default_format_check,
) -> RocDecision:
    """Downsample one finished group to at most ``n`` trajectories (GRPO-RoC).

    Args:
        group: all trajectories of one problem, with rewards (None counts as 0).
        n: group size after downsampling; a group of ``n`` or fewer is kept whole
            unless its rewards are all equal.
        rng: the only source of randomness; the same state gives the same decision.
        selection: how positives are chosen (module docstring).
        min_per_class, rounding: how many of each class are kept (:func:`split_counts`;
            the defaults are rStar2's).
        positive_threshold: a trajectory with reward > this is a positive.
        check: answer-format checker used by the penalty.

    Returns:
        A :class:`RocDecision` listing what was kept and what was dropped, and why
        (``reason``: ``infra_failed`` or ``all_equal_rewards`` for a group dropped whole).
    """
    assert n >= 1, f"roc_downsample: n must be >= 1, got {n}"
    trajs = group.trajectories
    rewards = group.rewards
    pos = [i for i, r in enumerate(rewards) if r > positive_threshold]
    neg = [i for i, r in enumerate(rewards) if r <= positive_threshold]
    if any(t.infra_failed for t in trajs):
        why = ["infra_failed" if t.infra_failed else "infra_group" for t in trajs]
        dropped = [Dropped(t.sample_index, w, r) for t, w, r in zip(trajs, why, rewards)]
        return RocDecision(None, [], dropped, len(pos), len(neg), "infra_failed")
    if len(set(rewards)) <= 1:
        dropped = [Dropped(t.sample_index, "all_equal_rewards", r) for t, r in zip(trajs, rewards)]
        return RocDecision(None, [], dropped, len(pos), len(neg), "all_equal_rewards")
    if len(trajs) <= n:
        return RocDecision(group, [t.sample_index for t in trajs], [], len(pos), len(neg))

    k_pos, k_neg = split_counts(len(pos), len(neg), n, min_per_class=min_per_class, rounding=rounding)
    penalties = {i: trajectory_penalty(trajs[i], check) for i in pos}
    keep_pos, out_pos = _choose_positives(pos, penalties, k_pos, rng, selection)
    keep_neg = sorted(rng.sample(neg, k_neg))
    keep = sorted(keep_pos + keep_neg)
    kept_neg = set(keep_neg)

    pos_reason = "positive_penalty" if selection == "lowest_penalty" else "positive_sampled_out"
    dropped = [Dropped(trajs[i].sample_index, pos_reason, rewards[i], penalties[i]) for i in out_pos]
    dropped += [
        Dropped(trajs[i].sample_index, "negative_downsampled", rewards[i])
        for i in neg
        if i not in kept_neg
    ]
    kept_group = Group(problem=group.problem, trajectories=[trajs[i] for i in keep])
    return RocDecision(kept_group, [trajs[i].sample_index for i in keep], dropped, len(pos), len(neg))


def _choose_positives(
    pos: Sequence[int],
    penalties: dict[int, float],
    k: int,
    rng: random.Random,
    selection: Selection,
) -> tuple[list[int], list[int]]:
    """Split positive indices into (kept, dropped)."""
    order = list(pos)
    if selection == "lowest_penalty":
        rng.shuffle(order)  # seeded tie-break; sort is stable
        order.sort(key=lambda i: penalties[i])
    elif selection == "inverse_penalty":
        # Weighted sampling without replacement (Efraimidis-Spirakis): the k largest
        # keys u ** (1 / w) with w = 1 / (penalty + floor).
        keys = {i: rng.random() ** (penalties[i] + PENALTY_FLOOR) for i in order}
        order.sort(key=lambda i: -keys[i])
    else:  # pragma: no cover - Literal guards this
        raise ValueError(f"roc selection: expected 'lowest_penalty' or 'inverse_penalty', got {selection!r}")
    return sorted(order[:k]), sorted(order[k:])
