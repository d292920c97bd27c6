"""The training-health figures of a real GRPO update (DeepSpeed on CPU): the
train/inference logprob mismatch, entropy measured without an entropy bonus, and the
split clip fractions."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest
import torch

pytestmark = pytest.mark.usefixtures("single_process_env")

SHIFT = 0.3
"""The sampling logprobs below are the policy's own minus this on every generated token."""


def groups_sampled_by(model_path: Path) -> list:
    """``fixed_groups(0)`` with each generated token's sampling logprob set to the
    model's own logprob minus ``SHIFT``: a server that is off by exactly that much."""
    from _learnkit import fixed_groups
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    out = []
    for g in fixed_groups(0):
        trajs = []
        for t in g.trajectories:
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].float(), -1)  # [L, V]
            p = len(t.prompt_ids)
            own = [float(logp[p - 1 + i, tok]) for i, tok in enumerate(t.response_ids)]
            lps = [o - SHIFT if m else 0.0 for o, m in zip(own, t.loss_mask)]
            trajs.append(msgspec.structs.replace(t, logprobs=lps))
        out.append(msgspec.structs.replace(g, trajectories=trajs))
    return out


@pytest.mark.parametrize("tis_cap", [None, 2.0, 1.2])
def test_mismatch_entropy_and_clip_fractions(tiny_lm: Path, tis_cap: float | None) -> None:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    groups = groups_sampled_by(tiny_lm)
    cfg = LearnerConfig(
        precision="fp32", zero_stage=0, lr=1e-2, warmup_steps=0, gradient_checkpointing=False, micro_batch_tokens=96,
        tis_cap=tis_cap, entropy_coef=0.0,
    )  # fmt: skip
    st = grpo_step(Learner(cfg, tiny_lm), groups)
    # The learner's logprob before any update is the model's: every token is off by SHIFT.
    assert st.logprob_diff_mean == pytest.approx(SHIFT, abs=1e-4)
    assert st.logprob_diff_max == pytest.approx(SHIFT, abs=1e-4)
    # Without TIS the ratio is pi_learner / pi_sampler = e^0.3 on every token: above
    # 1 + clip_high, so exactly the positive-advantage tokens are clipped (high).
    if tis_cap is None:
        assert st.ratio_mean == pytest.approx(1.3498588, abs=1e-4)
        assert st.ratio_max == pytest.approx(1.3498588, abs=1e-4)
        ts = [t for g in groups for t in g.trajectories]
        positive = sum(sum(t.loss_mask) for t in ts if t.reward > 0.5) / sum(sum(t.loss_mask) for t in ts)
        assert st.clip_frac_high == pytest.approx(positive) and 0 < positive < 1
        assert st.clip_frac_low == 0.0 and st.clip_frac_dual == 0.0
        assert math.isnan(st.tis_weight_mean) and math.isnan(st.tis_capped_frac)
    else:  # against the learner's own old policy: exactly 1, nothing clipped
        assert st.ratio_mean == pytest.approx(1.0, abs=1e-6) and st.ratio_max == pytest.approx(1.0, abs=1e-6)
        assert st.clip_frac == 0.0
        # Each token's weight is pi_learner / pi_sampler = e^0.3: under a cap of 2, cut at 1.2.
        assert st.tis_weight_mean == pytest.approx(min(1.3498588, tis_cap), abs=1e-4)
        assert st.tis_capped_frac == (1.0 if tis_cap < 1.3 else 0.0)
    assert st.clip_frac == pytest.approx(st.clip_frac_low + st.clip_frac_high)
    # Entropy is measured with entropy_coef = 0: a 32-token vocabulary near uniform at init.
    assert 3.0 < st.entropy <= torch.log(torch.tensor(32.0)).item() + 1e-5


def two_versions(groups: list) -> list:
    """Each trajectory of ``groups`` split into two turns, the first sampled at version 0
    (its logprobs off by ``SHIFT``, as in ``groups_sampled_by``: the policy has moved
    since) and the second at version 1 (exact: the learner's weights)."""
    from rstar2_async.types import Turn

    out = []
    for g in groups:
        trajs = []
        for t in g.trajectories:
            n, m = len(t.response_ids), t.loss_mask
            first = m.index(0) if 0 in m else n // 2
            second = next((i for i in range(first, n) if m[i]), n)
            turns = [Turn(start=0, num_generated=first, num_appended=second - first, weight_version=0, finish="stop"),
                     Turn(start=second, num_generated=n - second, num_appended=0, weight_version=1, finish="stop")]
            lps = [lp + SHIFT if i >= second and mask else lp for i, (lp, mask) in enumerate(zip(t.logprobs, m))]
            trajs.append(msgspec.structs.replace(t, turns=turns, logprobs=lps))
        out.append(msgspec.structs.replace(g, trajectories=trajs))
    return out


def test_mismatch_of_the_learners_version_leaves_out_stale_tokens(tiny_lm: Path) -> None:
    """Streaming trains tokens of older weights: their logprobs differ by the policy's
    drift, which must not read as a broken sync (the health check watches the
    current-version mismatch)."""
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    groups = two_versions(groups_sampled_by(tiny_lm))
    cfg = LearnerConfig(precision="fp32", zero_stage=0, lr=1e-2, warmup_steps=0, gradient_checkpointing=False,
                        micro_batch_tokens=96, tis_cap=2.0)  # fmt: skip
    learner = Learner(cfg, tiny_lm)
    ts = [t for g in groups for t in g.trajectories]
    fresh = sum(sum(t.loss_mask[t.turns[1].start :]) for t in ts)
    st = grpo_step(learner, groups, version=1)
    assert 0 < fresh < st.loss_tokens
    assert st.logprob_diff_current_tokens == fresh
    assert st.logprob_diff_current_mean == pytest.approx(0.0, abs=1e-4)
    assert st.logprob_diff_current_max == pytest.approx(0.0, abs=1e-4)  # the stale tokens' SHIFT is left out
    assert st.logprob_diff_mean == pytest.approx(SHIFT * (1 - fresh / st.loss_tokens), abs=1e-4)
    assert st.logprob_diff_max == pytest.approx(SHIFT, abs=1e-4)
    # Stale tokens weigh e^0.3, the fresh ones 1.
    stale = 1 - fresh / st.loss_tokens
    assert st.tis_weight_mean == pytest.approx(1.3498588 * stale + (1 - stale), abs=1e-4)
    # A version no turn was sampled at: nothing to measure (not a zero that would drag the running median).
    st = grpo_step(learner, groups, version=7)
    assert st.logprob_diff_current_tokens == 0 and math.isnan(st.logprob_diff_current_mean)
    assert math.isnan(st.logprob_diff_current_max)
