"""Training-health figures and the jump warning, against literal values."""

from __future__ import annotations

import math

import pytest

from rstar2_async.recipe import PLOTS, rollout_metrics
from rstar2_async.recipe._health import HealthWatch, Watch, jump_warnings, update_metrics
from rstar2_async.recipe._state import RolloutResult
from rstar2_async.selection import Dropped, RocDecision
from rstar2_async.types import Group, Problem, ToolResult, Trajectory, Turn

PROBLEM = Problem(id="p", problem="q", answer="1")


def traj(length: int, finish: str, tools: tuple[str, ...] = (), *, reward: float = 0.0, version: int = 0) -> Trajectory:
    turn = Turn(start=0, num_generated=length, num_appended=0, weight_version=version, finish="stop",
                tool_results=[ToolResult(status=s, output="") for s in tools])  # fmt: skip
    return Trajectory(
        problem_id="p", sample_index=0, prompt_ids=[1], response_ids=[2] * length, loss_mask=[1] * length,
        logprobs=[-0.1] * length, turns=[turn], finish_reason=finish, weight_version=version, reward=reward,
    )  # type: ignore[arg-type]  # fmt: skip


def test_rollout_figures_by_hand() -> None:
    groups = [
        Group(PROBLEM, [traj(3, "answer", ("ok", "ok", "error"), reward=1.0), traj(5, "token_budget")]),
        Group(PROBLEM, [traj(10, "token_budget", ("timeout",)), traj(2, "turn_limit")]),
    ]
    m = rollout_metrics(groups)
    assert m["rollout/response_tokens_mean"] == 5.0  # (3 + 5 + 10 + 2) / 4
    assert m["rollout/response_tokens_max"] == 10
    assert m["rollout/finish_token_budget"] == 0.5  # 2 of 4 hit the budget
    assert m["rollout/tool_calls_mean"] == 1.0  # 4 calls / 4 trajectories
    assert m["rollout/tool_error_rate"] == 0.5  # error + timeout of 4 calls
    assert rollout_metrics([Group(PROBLEM, [traj(1, "answer")])])["rollout/tool_error_rate"] == 0.0  # no call


def test_roc_share_and_staleness_by_hand() -> None:
    done = RolloutResult()
    kept = [Group(PROBLEM, [traj(1, "answer", reward=1.0, version=3), traj(1, "answer", version=3)]),
            Group(PROBLEM, [traj(1, "answer", reward=1.0, version=2), traj(1, "answer", version=3)]),
            Group(PROBLEM, [traj(1, "answer", reward=1.0, version=1), traj(1, "answer", version=1)])]  # fmt: skip
    for g in kept:
        done.add(g, RocDecision(g, [0, 1], [], 1, 1))
    same = Group(PROBLEM, [traj(1, "answer"), traj(1, "answer")])
    done.add(same, RocDecision(None, [], [Dropped(0, "all_equal_rewards", 0.0)] * 2, 0, 2, "all_equal_rewards"))
    # Version 3; the third group (version 1) was too stale to train.
    m = update_metrics(done, kept[:2], 3)
    assert m["roc/all_equal_share"] == 0.25  # 1 of 4 finished groups
    assert m["roc/dropped_all_equal_rewards"] == 2 and m["roc/groups_kept"] == 2
    assert m["async/stale_groups_dropped"] == 1
    assert (m["async/staleness_mean"], m["async/staleness_max"]) == (0.5, 1)  # 3-3, 3-2
    assert "async/staleness_mean" not in update_metrics(done, [], 3)  # nothing trained


MISMATCH = "learner/logprob_diff_current_mean"
RATIO = "learner/ratio_max"


def test_jump_means_three_times_the_running_median_or_above_the_ceiling() -> None:
    history = {MISMATCH: [0.02, 0.03, 0.025], RATIO: [1.5, 1.6, 1.7]}
    assert jump_warnings(7, {MISMATCH: 0.07, RATIO: 4.6}, history) == []  # 2.8x and 2.9x: noise
    lines = jump_warnings(7, {MISMATCH: 0.1, RATIO: 6.0}, history)
    assert lines == [
        (
            "step 7: learner/logprob_diff_current_mean = 0.1, 4.0x its running median 0.025 "
            "(train/inference mismatch: is the weight sync broken?)"
        ),
        "step 7: learner/ratio_max = 6, 3.8x its running median 1.6 (importance ratio: stale or mismatched samples?)",
    ]
    # Above the ceiling warns even without history; below it, too little history says nothing.
    assert jump_warnings(1, {MISMATCH: 0.35}, {}) == [
        "step 1: learner/logprob_diff_current_mean = 0.35, above 0.3 (train/inference mismatch: is the weight sync broken?)"
    ]
    assert jump_warnings(3, {MISMATCH: 0.2}, {MISMATCH: [0.01, 0.01]}) == []
    # Under the floor a relative jump is noise around zero (an fp32 learner and server).
    assert jump_warnings(9, {MISMATCH: 1e-6}, {MISMATCH: [1e-7] * 5}) == []
    assert jump_warnings(9, {MISMATCH: 0.02}, {MISMATCH: [0.0] * 5}) == [
        (
            "step 9: learner/logprob_diff_current_mean = 0.02, its running median is 0 "
            "(train/inference mismatch: is the weight sync broken?)"
        )
    ]
    # Only the last 20 steps count: 20 of 0.1 after older zeros -> median 0.1.
    assert jump_warnings(40, {MISMATCH: 0.25}, {MISMATCH: [0.0] * 10 + [0.1] * 20}) == []
    # A step with nothing trained has no learner figures: skipped.
    assert jump_warnings(5, {"rollout/reward_mean": 0.5}, history) == []


def test_entropy_that_triples_above_its_floor_warns() -> None:
    """A sharp policy's entropy swings several-fold around a few hundredths: quiet.  A
    policy that falls apart spreads its mass: warned at the step it triples past 0.2."""
    key = "learner/entropy"
    assert jump_warnings(9, {key: 0.15}, {key: [0.04, 0.05, 0.03, 0.05]}) == []  # 3.4x, under the floor
    assert jump_warnings(22, {key: 0.25}, {key: [0.05] * 20}) == [
        f"step 22: {key} = 0.25, 5.0x its running median 0.05 (policy entropy: is the policy collapsing into noise?)"
    ]
    assert jump_warnings(9, {key: 1.2}, {key: [0.5, 0.6, 0.55]}) == []  # a model whose normal level is high


def test_training_reward_that_falls_to_a_third_over_two_steps_warns() -> None:
    """One hard batch is noise; two steps averaging under a third of the running median
    is a policy falling apart (the rule's median leaves those two steps out)."""
    key = "rollout/reward_mean"
    healthy = [0.75, 0.8, 0.7, 0.78, 0.72]
    assert jump_warnings(6, {key: 0.2}, {key: healthy}) == []  # one bad batch: (0.72 + 0.2) / 2
    assert jump_warnings(7, {key: 0.08}, {key: [*healthy, 0.29]}) == [
        f"step 7: {key} = 0.08, 2-step mean 0.185, 0.25x its running median 0.75 "
        "(training reward: is the policy collapsing?)"
    ]
    # A policy that never earned reward cannot fall: under the floor, quiet.
    assert jump_warnings(7, {key: 0.0}, {key: [0.2, 0.25, 0.2, 0.22, 0.0]}) == []


def test_smoothed_history_keeps_the_window_and_its_recent_steps() -> None:
    watch = HealthWatch(watched=[Watch("r", 0.3, -math.inf, "m", falls=True, smooth=2)])
    for step in range(30):
        watch.check(step, {"r": 0.8})
    assert len(watch.history["r"]) == 21  # the 20-step window, and the one step averaged with the next


def test_health_watch_keeps_history_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    watch = HealthWatch([{"step": 1, MISMATCH: 0.02}, {"step": 2, "sft/loss": 1.0}, {"step": 3, MISMATCH: 0.02}],
                        watched=[Watch(MISMATCH, 0.01, 0.3, "m")])  # fmt: skip
    values: dict = {MISMATCH: 0.02}
    assert watch.check(4, values) == [] and "health/warnings" not in values
    values = {MISMATCH: 0.09}
    assert watch.check(5, values) == ["step 5: learner/logprob_diff_current_mean = 0.09, 4.5x its running median 0.02 (m)"]
    assert values["health/warnings"] == "step 5: learner/logprob_diff_current_mean = 0.09, 4.5x its running median 0.02 (m)"
    assert "rstar2 train: warning: step 5:" in capsys.readouterr().err
    assert watch.history[MISMATCH] == [0.02, 0.02, 0.02, 0.09]


def test_health_figures_are_plotted() -> None:
    drawn = {k for keys in PLOTS.values() for k in keys}
    assert {MISMATCH, "learner/entropy", "learner/clip_frac_dual", "roc/all_equal_share", "learner/tis_capped_frac"} <= drawn


@pytest.mark.parametrize(("precision", "quiet", "loud"), [("fp32", 2e-5, 2e-3), ("bf16", 0.02, 0.2)])
def test_a_current_mismatch_above_its_precisions_bound_warns_at_the_first_step(
    precision: str, quiet: float, loud: float
) -> None:
    """No history needed: a sync that serves other weights shows at once (issue 35's
    stale tied head: 1.8e-3 mean at the first step after the sync, in fp32)."""
    assert HealthWatch(precision=precision).check(1, {MISMATCH: quiet}) == []
    [line] = HealthWatch(precision=precision).check(1, {MISMATCH: loud})
    assert line.startswith(f"step 1: {MISMATCH} = {loud:.4g}, above ") and f"the {precision} bound" in line
    top = "learner/logprob_diff_current_max"
    assert HealthWatch(precision=precision).check(1, {top: 100 * loud})[0].startswith(f"step 1: {top} = ")


def test_stop_on_health_ends_the_run_with_the_warning_once_the_step_is_checked() -> None:
    from rstar2_async.errors import TrainError

    quiet, stopping = HealthWatch(stop=False), HealthWatch(stop=True)
    for watch in (quiet, stopping):
        watch.check(1, {MISMATCH: 1e-6})
        watch.enforce()  # nothing to stop on
        watch.check(2, {MISMATCH: 0.05})
    quiet.enforce()
    with pytest.raises(TrainError, match=r"stopped on a health warning \(run.stop_on_health\): step 2: learner/logprob_diff"):
        stopping.enforce()
