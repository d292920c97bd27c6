"""GRPO advantages and loss against hand-computed values (no engine involved)."""

from __future__ import annotations

import math

import pytest
import torch

from rstar2_async.learn import collate, group_advantages, logprob_diff, policy_loss, sequences_from_groups
from rstar2_async.types import Group, Problem, Trajectory, Turn


def test_advantages_by_hand() -> None:
    # mean 0.5; unbiased std sqrt(1/3)
    a = group_advantages([1.0, 0.0, 0.0, 1.0], eps=0.0)
    assert a == pytest.approx([math.sqrt(3) / 2, -math.sqrt(3) / 2, -math.sqrt(3) / 2, math.sqrt(3) / 2])
    # mean 1/3, deviations 2/3, -1/3, -1/3; var 1/3
    a = group_advantages([1.0, 0.0, 0.0], eps=0.0)
    assert a == pytest.approx([2 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)])
    assert group_advantages([1.0, 0.0, 0.0], std_normalize=False) == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert group_advantages([0.3, 0.3], eps=1e-6) == [0.0, 0.0]
    assert group_advantages([2.0]) == [0.0]


def _loss(logp, old, adv, mask, **kw):  # noqa: ANN001, ANN202
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return policy_loss(t(logp), t(old), t(adv), t(mask), clip_low=0.2, clip_high=0.28, **kw)


def test_clipped_loss_by_hand() -> None:
    ratios = [1.5, 0.5, 1.1, 0.9]
    old = [-1.0] * 4
    logp = torch.tensor([o + math.log(r) for o, r in zip(old, ratios)], requires_grad=True)
    loss, st = policy_loss(
        logp, torch.tensor(old), torch.tensor([1.0, -1.0, -1.0, 1.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]),
        clip_low=0.2, clip_high=0.28,
    )  # fmt: skip
    # t0: A=+1, r=1.5 -> clipped at 1.28 -> -1.28;  t1: A=-1, r=0.5 -> clipped at 0.8 -> +0.8
    # t2: A=-1, r=1.1 inside -> +1.1;  t3: masked out.
    assert loss.item() == pytest.approx(-1.28 + 0.8 + 1.1, abs=1e-6)
    assert float(st["clipped"]) == 2
    assert float(st["ratio"]) == pytest.approx(1.5 + 0.5 + 1.1, rel=1e-6)
    loss.backward()
    # Clipped tokens get no gradient; d(-A r)/dlogp = -A r for t2.
    assert logp.grad.tolist() == pytest.approx([0.0, 0.0, 1.1, 0.0], abs=1e-6)


def test_clip_is_pessimistic_and_asymmetric() -> None:
    # A>0 with a ratio below 1-clip_low is *not* clipped (min picks the unclipped 0.5).
    loss, st = _loss([math.log(0.5)], [0.0], [1.0], [1.0])
    assert loss.item() == pytest.approx(-0.5) and float(st["clipped"]) == 0
    # A<0 with a ratio above 1+clip_high is not clipped either.
    loss, st = _loss([math.log(1.5)], [0.0], [-1.0], [1.0])
    assert loss.item() == pytest.approx(1.5) and float(st["clipped"]) == 0
    # Upper clip is 1.28, lower is 0.8: different bounds.
    assert _loss([math.log(2.0)], [0.0], [1.0], [1.0])[0].item() == pytest.approx(-1.28)
    assert _loss([math.log(0.1)], [0.0], [-1.0], [1.0])[0].item() == pytest.approx(0.8)


def test_kl_entropy_and_is_weight_by_hand() -> None:
    # k3 with d = ref - logp = 0.5: e^0.5 - 0.5 - 1
    k3 = math.exp(0.5) - 1.5
    loss, st = _loss([-1.0], [-1.0], [0.0], [1.0], ref_logp=torch.tensor([-0.5]), kl_coef=0.1)
    assert loss.item() == pytest.approx(0.1 * k3) and float(st["kl"]) == pytest.approx(k3)
    loss, st = _loss([-1.0], [-1.0], [1.0], [1.0], entropy=torch.tensor([2.0]), entropy_coef=0.01)
    assert loss.item() == pytest.approx(-1.0 - 0.02) and float(st["entropy"]) == pytest.approx(2.0)
    loss, _ = _loss([-1.0], [-1.0], [1.0], [1.0], is_weight=torch.tensor([0.5]))
    assert loss.item() == pytest.approx(-0.5)


def test_dual_clip_by_hand() -> None:
    # clip 0.2 / 0.28, clip_c 3.  Per token, verl's max(-A r, -A clip(r)) then, for A < 0,
    # min(that, -A * 3):
    # t0: A=-1,   r=5   -> max(5, 1.28) = 5, capped at 3          (dual)
    # t1: A=-2,   r=2   -> max(4, 2.56) = 4, cap 6 not reached
    # t2: A=+1,   r=5   -> max(-5, -1.28) = -1.28                 (clipped high; no cap for A > 0)
    # t3: A=-1,   r=0.5 -> max(0.5, 0.8) = 0.8, cap 3             (clipped low)
    # t4: A=-0.5, r=10  -> masked out
    ratios, adv = [5.0, 2.0, 5.0, 0.5, 10.0], [-1.0, -2.0, 1.0, -1.0, -0.5]
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    old = torch.full((5,), -2.0)

    def run(**kw):
        logp = torch.tensor([-2.0 + math.log(r) for r in ratios], requires_grad=True)
        loss, st = policy_loss(logp, old, torch.tensor(adv), mask, clip_low=0.2, clip_high=0.28, **kw)
        return logp, loss, st

    logp, loss, st = run(clip_c=3.0)
    assert loss.item() == pytest.approx(3.0 + 4.0 - 1.28 + 0.8, abs=1e-5)
    assert {k: float(v) for k, v in st.items()} == pytest.approx(
        {"clipped": 2, "clipped_low": 1, "clipped_high": 1, "clipped_dual": 1, "ratio": 12.5, "ratio_max": 5.0}
    )
    loss.backward()
    # Capped and clipped tokens get no gradient; t1: d(-A r)/dlogp = -A r = 4.
    assert logp.grad.tolist() == pytest.approx([0.0, 4.0, 0.0, 0.0, 0.0], abs=1e-5)
    # Off (None or 0): the pessimistic bound alone, 5 for t0; no clipped_dual stat.
    for off in (None, 0.0):
        _, loss, st = run(clip_c=off)
        assert loss.item() == pytest.approx(5.0 + 4.0 - 1.28 + 0.8, abs=1e-5) and "clipped_dual" not in st
    # The importance weight applies after the cap (verl's rollout_is_weights): t0 -> 3 * 0.5.
    _, loss, _ = run(clip_c=3.0, is_weight=torch.tensor([0.5, 1.0, 1.0, 1.0, 1.0]))
    assert loss.item() == pytest.approx(1.5 + 4.0 - 1.28 + 0.8, abs=1e-5)
    # The cap binds from ratio 3 on (A = -1): at 2.9 not yet, at 3.5 it does.
    for r, want in ((2.9, 2.9), (3.5, 3.0)):
        lp = torch.tensor([math.log(r)])
        got = policy_loss(lp, torch.zeros(1), torch.tensor([-1.0]), torch.ones(1), clip_low=0.2, clip_high=0.28, clip_c=3.0)
        assert got[0].item() == pytest.approx(want, abs=1e-5)


def test_logprob_diff_by_hand() -> None:
    total, top = logprob_diff(
        torch.tensor([-1.0, -2.0, -3.0, -0.1]), torch.tensor([-1.5, -2.0, -1.0, -0.4]), torch.tensor([1.0, 1.0, 0.0, 1.0])
    )  # |0.5|, 0, masked (2.0), |0.3|
    assert float(total) == pytest.approx(0.8) and float(top) == pytest.approx(0.5)


def test_sequences_mask_tool_tokens_and_align_targets() -> None:
    # prompt [10, 11]; response: 2 generated, 2 tool tokens (masked), 1 generated.
    t = Trajectory(
        problem_id="p", sample_index=0, prompt_ids=[10, 11], response_ids=[20, 21, 30, 31, 22],
        loss_mask=[1, 1, 0, 0, 1], logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3],
        turns=[Turn(start=0, num_generated=2, num_appended=2, weight_version=0, finish="stop")],
        finish_reason="answer", weight_version=0, reward=1.0,
    )  # fmt: skip
    u = msgspec_replace(t, sample_index=1, reward=0.0)
    seqs = sequences_from_groups([Group(Problem(id="p", problem="", answer=""), [t, u])], eps=0.0)
    # rewards [1, 0]: mean 0.5, unbiased std sqrt(0.5) -> +-0.5 / sqrt(0.5)
    assert [s.advantage for s in seqs] == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)])
    mb = collate(seqs[:1])
    assert mb.input_ids.tolist() == [[10, 11, 20, 21, 30, 31, 22]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6]]
    # Position j predicts token j+1: the loss falls on positions predicting 20, 21, 22.
    assert mb.targets.tolist() == [11, 20, 21, 30, 31, 22, 0]
    assert mb.mask.tolist() == [0, 1, 1, 0, 0, 1, 0]
    assert mb.old_logprobs.tolist() == pytest.approx([0, -0.1, -0.2, 0, 0, -0.3, 0])


def msgspec_replace(t: Trajectory, **kw: object) -> Trajectory:
    import msgspec

    return msgspec.structs.replace(t, **kw)
