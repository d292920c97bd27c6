"""Typed configuration of the learner: the ``[learner]`` section of the run config.

Every field has a docstring (why this value) and its bounds in ``msgspec.Meta``;
:func:`rstar2_async.config.convert` turns a violation into a message that names
the dotted field and the value given, e.g. ``learner.lr: expected float > 0, got -1``.
Cross-field rules live in ``__post_init__`` and name both fields and the fix.

Defaults are rStar2-Agent's (arXiv 2508.20722, Sec. 4): lr 1e-6 with 20 warm-up
steps then constant, clip 0.2 / 0.28 with verl's dual-clip at 3, no KL, no entropy
bonus, one optimizer step per batch. This module imports neither torch nor deepspeed.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = ["LearnerConfig"]

_Pos = Annotated[float, msgspec.Meta(gt=0)]
_NonNeg = Annotated[float, msgspec.Meta(ge=0)]
_PosInt = Annotated[int, msgspec.Meta(ge=1)]
_NonNegInt = Annotated[int, msgspec.Meta(ge=0)]


class LearnerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How the policy is updated from finished groups (GRPO-RoC on DeepSpeed)."""

    # --- engine -----------------------------------------------------------------
    zero_stage: Annotated[int, msgspec.Meta(ge=0, le=3)] = 2
    """DeepSpeed ZeRO stage: 0 (plain data parallel), 1 (optimizer states sharded),
    2 (+ gradients), 3 (+ parameters; needed once a model's fp32 states no longer fit
    one device). Losses are identical across stages for the same data."""
    precision: Literal["bf16", "fp32"] = "bf16"
    """Parameter/activation precision. bf16 keeps fp32 master weights in the
    optimizer; fp32 is exact and used by the CPU tests."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass: trades ~30% more compute for
    memory that grows with the response length (rStar2 trains at 8K-12K tokens)."""
    micro_batch_tokens: _PosInt = 16384
    """Token budget of one packed micro-batch per device. Trajectories are packed up
    to this many tokens (no padding to the longest); one longer than this gets a
    micro-batch of its own."""
    mini_batches: _PosInt = 1
    """Optimizer steps per batch. rStar2 takes one (fully on-policy); more splits
    the batch into this many equal parts, each one step."""

    # --- optimizer and schedule --------------------------------------------------
    lr: _Pos = 1e-6
    """Peak learning rate of AdamW (rStar2: 1e-6)."""
    warmup_steps: _NonNegInt = 20
    """Optimizer steps of linear warm-up from 0 to ``lr``, then constant (rStar2: 20)."""
    weight_decay: _NonNeg = 0.01
    """AdamW decoupled weight decay (verl's default, which rStar2 builds on)."""
    adam_beta1: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.9
    """AdamW first-moment decay."""
    adam_beta2: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.999
    """AdamW second-moment decay."""
    adam_eps: _Pos = 1e-8
    """AdamW denominator epsilon."""
    grad_clip: _NonNeg = 1.0
    """Clip the global gradient norm to this; 0 disables clipping."""

    # --- GRPO loss -----------------------------------------------------------------
    clip_low: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.2
    """Lower PPO ratio clip: the ratio is kept >= 1 - clip_low for negative advantages."""
    clip_high: _Pos = 0.28
    """Upper PPO ratio clip ("clip-higher", DAPO): ratio <= 1 + clip_high for positive
    advantages; larger than ``clip_low`` so rare good tokens can grow faster."""
    advantage_eps: _Pos = 1e-6
    """Added to the group reward std before dividing (groups are never constant
    after RoC, but a user may turn RoC off)."""
    std_normalize: bool = True
    """Divide advantages by the group std (GRPO). False gives Dr. GRPO's
    mean-centred advantages."""
    kl_coef: _NonNeg = 0.0
    """Weight of the k3 KL estimate against a frozen reference policy (the initial
    weights). rStar2 uses none; > 0 loads a second copy of the model."""
    entropy_coef: _NonNeg = 0.0
    """Weight of an entropy bonus (subtracted from the loss). rStar2 uses none."""
    tis_cap: _Pos | None = None
    """Truncated importance sampling: when set, the learner recomputes the old
    logprobs itself, uses them in the ratio, and weights each token by
    ``min(pi_learner / pi_sampler, tis_cap)`` to correct for the inference engine's
    numerical drift (e.g. 2.0). None trusts the server's sampling logprobs as the old
    policy (rStar2's setting)."""

    # --- state ---------------------------------------------------------------------
    seed: _NonNegInt = 0
    """Seeds torch, numpy and Python's RNG on every rank (rank is added)."""
    keep_checkpoints: _PosInt = 2
    """Checkpoints retained; older ones are deleted after a new one is complete."""
    export_bucket_mb: _PosInt = 512
    """Size of one (name, tensor) bucket of the broadcast weight stream and the
    unit of ZeRO-3 gathering: bounds the extra memory of an export."""
    export_shard_mb: _PosInt = 4096
    """Largest safetensors shard written for the disk weight transport."""

    # --- GRPO loss, continued (new fields go at the end) --------------------------------
    clip_c: _NonNeg | None = 3.0
    """Dual-clip (verl's ``clip_ratio_c``, which rStar2 trains with): a token with a
    negative advantage loses at most ``-A * clip_c``, so a ratio far above 1 (stale
    or off-policy data) cannot grow its loss without bound.  Must be > 1; 0 or None
    turns it off.  Default 3.0 as verl's, so the default loss is rStar2's."""

    # --- memory and kernels (new fields go at the end) ----------------------------------
    logprob_chunk_tokens: _PosInt = 1024
    """Tokens per chunk of the output layer when computing log-probs and entropies:
    the learner never holds more than a few [chunk, vocabulary] float32 tensors
    (at 1024 x 151,936: 0.6 GB each) instead of [micro-batch, vocabulary] (19.9 GB at
    32K tokens). 1024 is about Liger-Kernel's rule, tokens x hidden / vocabulary, at
    32K tokens and Qwen3-14B's 5,120 hidden; smaller saves memory, larger gives the
    matmul bigger tiles."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    """Attention kernel of the policy (transformers' ``attn_implementation``).
    ``flash_attention_2`` needs the ``flash_attn`` package (checked when the learner
    starts); ``eager`` is the slow reference. At start-up the learner checks that a
    packed micro-batch equals its sequences run one by one with this kernel, and
    refuses to start otherwise."""

    def __post_init__(self) -> None:
        if self.clip_high < self.clip_low:
            raise ValueError(
                f"learner.clip_high ({self.clip_high}) < learner.clip_low ({self.clip_low}):"
                " clip-higher expects clip_high >= clip_low; raise clip_high"
            )
        if self.clip_c and self.clip_c <= 1.0:
            raise ValueError(
                f"learner.clip_c ({self.clip_c}) must be > 1: the dual-clip bound -A * clip_c would cap"
                " negative-advantage tokens below their unclipped loss at ratio 1; use 3.0 (verl's), or 0 to turn it off"
            )
