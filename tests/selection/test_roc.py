"""GRPO-RoC resampling: penalties by hand, selection properties with hypothesis."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstar2_async.selection import (
    FormatVerdict,
    format_penalty,
    roc_downsample,
    split_counts,
    tool_error_ratio,
    trajectory_penalty,
)
from rstar2_async.types import Group, Problem, ToolResult, Trajectory, Turn

PROBLEM = Problem(id="p", problem="1+1?", answer="2")


def traj(
    i: int,
    reward: float,
    *,
    tools: tuple[tuple[str, ...], ...] = (),
    answers: tuple[int, ...] = (1,),
    finish: str = "answer",
    text: str = "",
) -> Trajectory:
    """A trajectory with one turn per entry of ``answers`` (answer blocks in that turn);
    ``tools[k]`` lists the tool statuses of turn k."""
    turns = [
        Turn(
            start=0,
            num_generated=1,
            num_appended=0,
            weight_version=0,
            finish="stop",
            tool_results=[ToolResult(status=s, output="") for s in (tools[k] if k < len(tools) else ())],
            num_answer_blocks=a,
        )
        for k, a in enumerate(answers)
    ]
    return Trajectory(
        problem_id="p", sample_index=i, prompt_ids=[1], response_ids=[2], loss_mask=[1],
        logprobs=[-0.1], turns=turns, finish_reason=finish, weight_version=0,
        response_text=text, reward=reward,
    )  # fmt: skip


def test_tool_error_ratio_by_hand() -> None:
    assert tool_error_ratio(traj(0, 1.0)) == 0.5  # no call: neutral
    assert tool_error_ratio(traj(0, 1.0, tools=(("ok", "error"), ("timeout", "ok")), answers=(0, 1))) == 0.5
    assert tool_error_ratio(traj(0, 1.0, tools=(("ok", "ok", "ok", "invalid_call"),))) == 0.25
    assert tool_error_ratio(traj(0, 1.0, tools=(("ok",),))) == 0.0


def test_format_penalty_by_hand() -> None:
    assert format_penalty(traj(0, 1.0, answers=(1,))) == 0.0
    assert format_penalty(traj(0, 1.0, answers=(0,))) == 1.0  # missing
    assert format_penalty(traj(0, 1.0, answers=(1,), finish="turn_limit")) == 1.0
    assert format_penalty(traj(0, 1.0, answers=(0, 0, 1, 1))) == pytest.approx(0.25)  # 1 extra / 4 turns
    assert format_penalty(traj(0, 1.0, answers=(3,))) == 1.0  # min(1, 2 / 1)
    # With response text, a malformed final answer counts as missing.
    assert format_penalty(traj(0, 1.0, text="<answer>42</answer>")) == 1.0
    assert format_penalty(traj(0, 1.0, text="x <answer>so \\boxed{42}</answer>")) == 0.0
    assert format_penalty(traj(0, 1.0, text="<answer>\\boxed{42}")) == 1.0
    two = "<answer>\\boxed{1}</answer> wait <answer>\\boxed{2}</answer>"
    assert format_penalty(traj(0, 1.0, answers=(0, 2), text=two)) == pytest.approx(0.5)  # 1 extra / 2 turns
    # A pluggable checker (e.g. reward.answer_format) replaces the default.
    assert format_penalty(traj(0, 1.0), check=lambda t: FormatVerdict(True, 3)) == 1.0
    assert trajectory_penalty(traj(0, 1.0, tools=(("error", "ok"),), answers=(2, 0))) == 1.0


def test_all_equal_rewards_dropped_with_reason() -> None:
    group = Group(PROBLEM, [traj(i, 1.0) for i in range(8)])
    d = roc_downsample(group, 4, random.Random(0))
    assert d.group is None and d.reason == "all_equal_rewards"
    assert sorted(x.sample_index for x in d.dropped) == list(range(8))


def test_small_group_kept_whole() -> None:
    group = Group(PROBLEM, [traj(0, 1.0), traj(1, 0.0), traj(2, 0.0)])
    d = roc_downsample(group, 4, random.Random(0))
    assert d.group == group and d.dropped == []


def test_lowest_penalty_keeps_cleanest_positives() -> None:
    # 4 positives with penalties 0, 0.5(no tool), 1(all errors), 1.5; 4 negatives; n=4.
    trajs = [
        traj(0, 1.0, tools=(("ok",),)),
        traj(1, 1.0),
        traj(2, 1.0, tools=(("error",),)),
        traj(3, 1.0, tools=(("error",),), answers=(0, 1)),
    ] + [traj(4 + i, 0.0) for i in range(4)]
    d = roc_downsample(Group(PROBLEM, trajs), 4, random.Random(1))
    assert d.group is not None
    kept_pos = [i for i in d.kept if i < 4]
    assert kept_pos == [0, 1]
    assert {x.sample_index: x.reason for x in d.dropped if x.sample_index < 4} == {
        2: "positive_penalty",
        3: "positive_penalty",
    }


def test_split_counts_by_hand() -> None:
    assert split_counts(16, 16, 16) == (8, 8)
    assert split_counts(1, 31, 16) == (1, 15)  # 0.5 rounds up, and >= 1 anyway
    assert split_counts(31, 1, 16) == (15, 1)  # at least one negative
    assert split_counts(3, 29, 16) == (2, 14)  # 1.5 -> 2
    assert split_counts(20, 2, 16) == (15, 1)  # 14.5 -> 15
    assert split_counts(2, 20, 16) == (1, 15)  # 1.45 -> 1


@st.composite
def groups(draw: st.DrawFn) -> tuple[Group, int]:
    size = draw(st.integers(2, 40))
    n = draw(st.integers(1, 20))
    trajs = []
    for i in range(size):
        statuses = draw(st.lists(st.sampled_from(["ok", "error", "timeout"]), max_size=4))
        answers = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
        trajs.append(
            traj(i, draw(st.sampled_from([0.0, 1.0])), tools=(tuple(statuses),), answers=tuple(answers))
        )
    return Group(PROBLEM, trajs), n


@settings(max_examples=200, deadline=None)
@given(groups(), st.integers(0, 2**32), st.sampled_from(["lowest_penalty", "inverse_penalty"]))
def test_roc_properties(gn: tuple[Group, int], seed: int, selection: str) -> None:
    group, n = gn
    d = roc_downsample(group, n, random.Random(seed), selection=selection)  # type: ignore[arg-type]
    rewards = group.rewards
    n_pos = sum(r > 0.5 for r in rewards)
    n_neg = len(rewards) - n_pos
    # Accounting: kept + dropped is a partition of the group.
    assert sorted(d.kept + [x.sample_index for x in d.dropped]) == list(range(len(rewards)))
    assert (d.num_positive, d.num_negative) == (n_pos, n_neg)
    if n_pos == 0 or n_neg == 0:
        assert d.group is None and d.reason == "all_equal_rewards"
        return
    assert d.group is not None
    assert [t.sample_index for t in d.group.trajectories] == d.kept
    assert len(d.kept) == min(n, len(rewards))
    k_pos = sum(rewards[i] > 0.5 for i in d.kept)
    k_neg = len(d.kept) - k_pos
    if len(rewards) > n:
        # Ratio kept (within rounding), both classes present when n allows it.
        assert abs(k_pos - n * n_pos / len(rewards)) <= 1 or k_pos in (1, n - 1)
        if n >= 2:
            assert k_pos >= 1 and k_neg >= 1
    if selection == "lowest_penalty":
        pens = {i: trajectory_penalty(group.trajectories[i]) for i in range(len(rewards)) if rewards[i] > 0.5}
        kept_pos = [pens[i] for i in d.kept if i in pens]
        dropped_pos = [pens[i] for i in pens if i not in d.kept]
        if kept_pos and dropped_pos:
            assert max(kept_pos) <= min(dropped_pos)
    # Deterministic: the same seed gives the same decision.
    assert roc_downsample(group, n, random.Random(seed), selection=selection) == d  # type: ignore[arg-type]


def test_inverse_penalty_prefers_clean_positives() -> None:
    # One clean positive (penalty 0) among 9 dirty ones (penalty 2): kept far more
    # often than the 1/10 a uniform pick would give.
    clean = traj(0, 1.0, tools=(("ok",),))
    dirty = [traj(i, 1.0, tools=(("error",),), answers=(0,)) for i in range(1, 10)]
    negs = [traj(10 + i, 0.0) for i in range(10)]
    group = Group(PROBLEM, [clean, *dirty, *negs])
    rng = random.Random(0)
    hits = sum(0 in roc_downsample(group, 2, rng, selection="inverse_penalty").kept for _ in range(400))
    assert hits > 300
    # Negatives are uniform: each of the 10 is kept about 1/10 of the time.
    rng = random.Random(1)
    counts = [0] * 20
    for _ in range(1000):
        for i in roc_downsample(group, 2, rng).kept:
            counts[i] += 1
    assert counts[0] == 1000
    assert all(50 < c < 160 for c in counts[10:])
