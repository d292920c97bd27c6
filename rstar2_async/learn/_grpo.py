"""GRPO loss and update step, as rStar2-Agent trains with it (arXiv 2508.20722, Sec. 3).

Variant implemented:

- **Baseline / advantage**: group-normalised outcome reward,
  ``A_i = (r_i - mean(r)) / (std(r) + eps)`` over the (RoC-downsampled) group,
  the same for every token of trajectory ``i``. ``std`` is the unbiased sample std
  (torch/verl's ``std``; the paper does not say). ``std_normalize=False`` gives
  Dr. GRPO's mean-centred advantage.
- **Ratio clipping**: PPO's pessimistic clipped objective with separate bounds,
  ``clip(ratio, 1 - clip_low, 1 + clip_high)`` (0.2 / 0.28, "clip-higher"), and
  verl's dual-clip (``compute_policy_loss``, ``clip_ratio_c``), which rStar2 trains
  with: a token with a negative advantage loses at most ``-A * clip_c`` (3.0), so a
  ratio far above 1 cannot grow the pessimistic bound without limit.
- **Old policy**: the *sampling* logprob the inference server returned, so the
  ratio also absorbs the server/learner numerical gap. With ``tis_cap`` set the
  learner recomputes the old logprobs itself before any update and weights each
  token by ``min(pi_learner_old / pi_sampler, tis_cap)`` (truncated importance
  sampling) instead.
- **Normalisation**: token-mean over *all* loss tokens of the mini-batch, across
  ranks (not per-sequence mean, which would favour short responses).
- **KL / entropy**: none by default, like rStar2 (departing from the original GRPO,
  which has a KL penalty). ``kl_coef > 0`` adds the k3 estimator against the frozen
  initial policy; ``entropy_coef > 0`` subtracts an entropy bonus.
- **Loss mask**: prompt, tool-response and template tokens get no loss.

The update step: the batch is split into ``mini_batches`` parts (one optimizer step
each), each part is dealt to ranks by tokens, packed into micro-batches under the
token budget, and every rank runs the same number of micro-batches.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import final

import msgspec
import torch

from ..types import Group, Trajectory
from ._learner import Learner
from ._packing import MicroBatch, TrainSeq, collate, plan_micro_batches, shard_by_tokens

__all__ = ["GrpoStats", "group_advantages", "grpo_step", "logprob_diff", "policy_loss", "sequences_from_groups"]


def group_advantages(rewards: Sequence[float], *, eps: float = 1e-6, std_normalize: bool = True) -> list[float]:
    """GRPO's baseline: ``(r - mean) / (std + eps)`` within one group (unbiased std;
    a group of one has std 0)."""
    n = len(rewards)
    assert n >= 1, "group_advantages: empty group"
    mean = sum(rewards) / n
    if not std_normalize:
        return [r - mean for r in rewards]
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    return [(r - mean) / (std + eps) for r in rewards]


def sequences_from_groups(
    groups: Sequence[Group], *, eps: float = 1e-6, std_normalize: bool = True, version: int | None = None
) -> list[TrainSeq]:
    """One :class:`TrainSeq` per trajectory: prompt + response ids, the response's
    loss mask and sampling logprobs, and the trajectory's group advantage.
    ``version``: the weights the learner holds; a sequence's ``current`` marks the
    tokens of its turns sampled by them (None: every trained token counts)."""
    seqs: list[TrainSeq] = []
    for g, group in enumerate(groups):
        advs = group_advantages(group.rewards, eps=eps, std_normalize=std_normalize)
        for t, a in zip(group.trajectories, advs):
            p = len(t.prompt_ids)
            seqs.append(
                TrainSeq(
                    ids=t.prompt_ids + t.response_ids,
                    mask=[0] * p + t.loss_mask,
                    logprobs=[0.0] * p + t.logprobs,
                    advantage=a,
                    group=g,
                    current=None if version is None else [0] * p + _current_mask(t, version),
                )
            )
    return seqs


def _current_mask(t: Trajectory, version: int) -> list[int]:
    """1 on the generated tokens of ``t``'s turns sampled at ``version`` (a turn resumed
    across a sync carries its oldest part's version, so it counts as stale)."""
    mask = [0] * len(t.response_ids)
    for turn in t.turns:
        if turn.weight_version == version:
            end = turn.start + turn.num_generated
            mask[turn.start : end] = t.loss_mask[turn.start : end]
    return mask


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: float | None = None,
    is_weight: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped surrogate, *summed* over masked tokens (all inputs ``[T]``).

    The caller divides by the number of loss tokens of the whole mini-batch (over all
    ranks) to get the token-mean. ``clip_c`` (> 1; None or 0: off) caps the loss of a
    negative-advantage token at ``-A * clip_c``, as verl's dual-clip. Returns
    ``(loss_sum, stats)``; stats are detached 0-dim tensors on the loss's device, so
    logging adds no device sync per micro-batch: sums over masked tokens
    (``clipped`` by either bound, ``clipped_low`` (A < 0, ratio < 1 - clip_low),
    ``clipped_high`` (A > 0, ratio > 1 + clip_high), ``clipped_dual`` (capped by
    ``clip_c``), ``ratio``, ``kl``, ``entropy``) and ``ratio_max``, the largest ratio
    of a masked token (0 with none).
    """
    ratio = torch.exp(logp - old_logp)  # [T]
    surr = advantages * ratio  # [T]
    surr_clipped = advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)  # [T]
    per_token = -torch.minimum(surr, surr_clipped)  # [T] pessimistic bound
    clipped = (surr_clipped < surr).float() * mask  # [T]
    stats = {
        "clipped": clipped.sum().detach(),
        "clipped_low": (clipped * (advantages < 0)).sum().detach(),
        "clipped_high": (clipped * (advantages > 0)).sum().detach(),
        "ratio": (ratio.detach() * mask).sum(),
        "ratio_max": (ratio.detach() * mask).max(),
    }
    if clip_c:
        assert clip_c > 1.0, f"policy_loss: clip_c must be > 1 (or None/0 for off), got {clip_c}"
        cap = -advantages * clip_c  # [T], > 0 where A < 0
        dual = (advantages < 0) & (per_token > cap)  # [T]
        per_token = torch.where(dual, cap, per_token)  # the cap is constant: no gradient there
        stats["clipped_dual"] = (dual.float() * mask).sum().detach()
    if is_weight is not None:
        per_token = per_token * is_weight
    if kl_coef > 0:
        assert ref_logp is not None, "policy_loss: kl_coef > 0 needs ref_logp"
        d = ref_logp - logp  # [T]
        kl = torch.exp(d) - d - 1.0  # k3 estimator, >= 0
        per_token = per_token + kl_coef * kl
        stats["kl"] = (kl.detach() * mask).sum()
    if entropy_coef > 0:
        assert entropy is not None, "policy_loss: entropy_coef > 0 needs entropy"
        per_token = per_token - entropy_coef * entropy
    if entropy is not None:
        stats["entropy"] = (entropy.detach() * mask).sum()
    return (per_token * mask).sum(), stats


def logprob_diff(logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum, max)`` of ``|logp - sampling_logp|`` over masked tokens (all ``[T]``;
    detached 0-dim tensors): the train/inference mismatch when ``logp`` is the
    learner's before any update and ``sampling_logp`` the server's."""
    d = (logp.detach() - sampling_logp).abs() * mask  # [T]
    return d.sum(), d.max()


@final
class GrpoStats(msgspec.Struct, frozen=True):
    """One GRPO update, reduced over ranks. Token means are over loss tokens."""

    loss: float
    clip_frac: float
    ratio_mean: float
    kl: float
    entropy: float
    """Mean entropy of the policy on loss tokens (always measured, in the training forward)."""
    grad_norm: float
    lr: float
    loss_tokens: int
    tokens: int
    sequences: int
    micro_batches: int
    optimizer_steps: int
    seconds: float
    clip_frac_low: float = 0.0
    """Share of loss tokens clipped at ``1 - clip_low`` (negative advantage, ratio below)."""
    clip_frac_high: float = 0.0
    """Share clipped at ``1 + clip_high`` (positive advantage, ratio above)."""
    clip_frac_dual: float = 0.0
    """Share capped by the dual-clip ``-A * clip_c`` (verl's ``pg_clipfrac_lower``)."""
    ratio_max: float = 0.0
    """Largest importance ratio ``pi_theta / pi_old`` of a loss token, over the update."""
    logprob_diff_mean: float = 0.0
    """Mean ``|learner logprob - sampling logprob|`` over the loss tokens measured: the
    train/inference mismatch. The learner's logprob is taken before any optimizer step:
    with ``tis_cap`` from its recomputed old policy (every token), otherwise from the
    first mini-batch's training forward (every token when ``mini_batches = 1``)."""
    logprob_diff_max: float = 0.0
    """The largest such difference."""
    logprob_diff_current_mean: float = math.nan
    """The same mean over the loss tokens sampled by the weights the learner holds
    (``grpo_step``'s ``version``; every loss token without it): the sync's own
    mismatch, without the policy's drift that stale tokens add in streaming mode.
    NaN when the batch has no such token (every group one version stale)."""
    logprob_diff_current_tokens: int = 0
    """The loss tokens that mean is over."""
    tis_weight_mean: float = math.nan
    """Mean truncated importance weight ``min(pi_learner / pi_sampler, tis_cap)`` over
    loss tokens (NaN without ``tis_cap``): near 1 when the samples are fresh; on stale
    tokens it moves with the policy's drift since they were sampled."""
    tis_capped_frac: float = math.nan
    """Share of loss tokens whose weight was cut at ``tis_cap`` (NaN without it)."""
    logprob_diff_current_max: float = math.nan
    """The largest difference over the tokens ``logprob_diff_current_mean`` is over
    (NaN when there is none)."""


def grpo_step(learner: Learner, groups: Sequence[Group], version: int | None = None) -> GrpoStats:
    """One GRPO update on ``groups`` (every rank passes the same groups); ``version``
    is the weight version the learner holds (for ``logprob_diff_current_mean``).

    Takes ``learner.config.mini_batches`` optimizer steps. Returns stats reduced over
    ranks; ``loss`` is the token-mean loss of the batch, each mini-batch evaluated
    before its own optimizer step.
    """
    c = learner.config
    t0 = time.perf_counter()
    seqs = sequences_from_groups(groups, eps=c.advantage_eps, std_normalize=c.std_normalize, version=version)
    assert len(seqs) >= c.mini_batches, f"grpo_step: {len(seqs)} sequences < learner.mini_batches={c.mini_batches}"

    # Plan every micro-batch of every mini-batch first (TIS needs the pre-update policy).
    plan: list[list[MicroBatch]] = []
    for part in _split(seqs, c.mini_batches):
        mine = [part[i] for i in shard_by_tokens([len(s) for s in part], learner.world_size)[learner.rank]]
        bins = plan_micro_batches([len(s) for s in mine], c.micro_batch_tokens)
        # Same micro-batch count on every rank: ZeRO's collectives must match.
        n_micro = int(learner.all_reduce([len(bins)], op="max")[0])
        bins += [[]] * (n_micro - len(bins))
        plan.append([collate([mine[i] for i in b]) for b in bins])

    keys = ["loss", "clipped", "clipped_low", "clipped_high", "clipped_dual", "ratio", "kl", "entropy", "diff", "diff_current",
            "tis_weight", "tis_capped"]
    sums: dict[str, torch.Tensor | float] = dict.fromkeys(keys, 0.0)  # device tensors once added to
    maxes: dict[str, list[torch.Tensor]] = {"ratio_max": [], "diff_max": [], "diff_current_max": []}  # one 0-dim tensor per micro-batch
    diff_tokens = current_tokens = 0  # loss tokens whose mismatch was measured, of them sampled by these weights

    def measure_diff(logp: torch.Tensor, mb: MicroBatch) -> None:
        nonlocal diff_tokens, current_tokens
        sampled = mb.old_logprobs.to(logp.device)
        total, top = logprob_diff(logp, sampled, mb.mask.to(logp.device))
        sums["diff"] = sums["diff"] + total
        current, current_top = logprob_diff(logp, sampled, mb.current.to(logp.device))
        sums["diff_current"] = sums["diff_current"] + current
        maxes["diff_max"].append(top)
        maxes["diff_current_max"].append(current_top)
        diff_tokens += mb.num_loss_tokens
        current_tokens += int(mb.current.sum().item())

    is_weights: dict[tuple[int, int], torch.Tensor] = {}
    if c.tis_cap is not None:
        for m, mbs in enumerate(plan):
            for k, mb in enumerate(mbs):
                old, _ = learner.logprobs(mb, grad=False)  # [T], the learner's own old policy
                measure_diff(old, mb)
                ratio = torch.exp(old - mb.old_logprobs.to(old.device))  # [T] pi_learner / pi_sampler
                mask = mb.mask.to(old.device)
                is_weights[m, k] = torch.clamp(ratio, max=c.tis_cap) * mask
                sums["tis_weight"] = sums["tis_weight"] + is_weights[m, k].sum()
                sums["tis_capped"] = sums["tis_capped"] + ((ratio > c.tis_cap).float() * mask).sum()
                plan[m][k] = dataclasses.replace(mb, old_logprobs=old.detach().cpu() * mb.mask)

    grad_norm = lr = 0.0
    loss_tokens = tokens = 0
    for m, mbs in enumerate(plan):
        # Token-mean over the mini-batch on all ranks; one sync point per mini-batch.
        n_tok = learner.all_reduce([sum(mb.num_loss_tokens for mb in mbs)])[0]
        for k, mb in enumerate(mbs):
            logp, ent = learner.logprobs(mb, entropy=True)  # entropy: a health signal even when not in the loss
            assert ent is not None
            if c.entropy_coef == 0:
                ent = ent.detach()  # not in the loss: frees its [T, V] graph before the backward
            if c.tis_cap is None and m == 0:  # no optimizer step yet: the learner's old policy
                measure_diff(logp, mb)
            ref = learner.logprobs(mb, grad=False, reference=True)[0] if c.kl_coef > 0 else None
            loss_sum, st = policy_loss(
                logp, mb.old_logprobs.to(logp.device), mb.advantages.to(logp.device), mb.mask.to(logp.device),
                clip_low=c.clip_low, clip_high=c.clip_high, clip_c=c.clip_c, is_weight=is_weights.get((m, k)),
                ref_logp=ref, kl_coef=c.kl_coef, entropy=ent, entropy_coef=c.entropy_coef,
            )  # fmt: skip
            # DeepSpeed averages gradients over ranks: scale by world_size so the
            # result is the sum over all ranks' tokens divided by n_tok.
            learner.backward(loss_sum * (learner.world_size / max(n_tok, 1.0)), last=k == len(mbs) - 1)
            sums["loss"] = sums["loss"] + loss_sum.detach() / max(n_tok, 1.0)
            maxes["ratio_max"].append(st.pop("ratio_max"))
            for key, v in st.items():
                sums[key] = sums[key] + v
            loss_tokens += mb.num_loss_tokens
            tokens += mb.num_tokens if mb.num_loss_tokens else 0
        step = learner.step()
        grad_norm += step["grad_norm"] / len(plan)
        lr += step["lr"] / len(plan)

    # One device sync for all the statistics, then one all-reduce of sums and one of maxima.
    red = learner.all_reduce([float(sums[k]) for k in keys] + [loss_tokens, tokens, diff_tokens, current_tokens])
    local_max = [float(torch.stack(v).max()) if v else 0.0 for v in maxes.values()]
    top = dict(zip(maxes, learner.all_reduce(local_max, op="max")))
    tot = dict(zip(keys, red[: len(keys)]))
    n_loss = max(red[len(keys)], 1.0)
    return GrpoStats(
        loss=tot["loss"] / len(plan),
        clip_frac=tot["clipped"] / n_loss,
        ratio_mean=tot["ratio"] / n_loss,
        kl=tot["kl"] / n_loss,
        entropy=tot["entropy"] / n_loss,
        grad_norm=grad_norm,
        lr=lr,
        loss_tokens=int(red[len(keys)]),
        tokens=int(red[len(keys) + 1]),
        sequences=len(seqs),
        micro_batches=sum(len(mbs) for mbs in plan),
        optimizer_steps=len(plan),
        seconds=time.perf_counter() - t0,
        clip_frac_low=tot["clipped_low"] / n_loss,
        clip_frac_high=tot["clipped_high"] / n_loss,
        clip_frac_dual=tot["clipped_dual"] / n_loss,
        ratio_max=top["ratio_max"],
        logprob_diff_mean=tot["diff"] / max(red[len(keys) + 2], 1.0),
        logprob_diff_max=top["diff_max"],
        logprob_diff_current_mean=tot["diff_current"] / red[len(keys) + 3] if red[len(keys) + 3] else math.nan,
        logprob_diff_current_tokens=int(red[len(keys) + 3]),
        logprob_diff_current_max=top["diff_current_max"] if red[len(keys) + 3] else math.nan,
        tis_weight_mean=tot["tis_weight"] / n_loss if c.tis_cap is not None else math.nan,
        tis_capped_frac=tot["tis_capped"] / n_loss if c.tis_cap is not None else math.nan,
    )


def _split(seqs: list[TrainSeq], parts: int) -> list[list[TrainSeq]]:
    """``parts`` contiguous chunks of near-equal size (sizes differ by at most 1)."""
    q, r = divmod(len(seqs), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + q + (i < r)
        out.append(seqs[start:end])
        start = end
    return out
