"""How much device memory one learner rank needs: a pure estimate from the model's
``config.json``, the ``[learner]`` section and the number of ranks (no torch).

``rstar2 plan-memory CONFIG`` prints it; the learner logs it at start-up and refuses
to start, naming the field to change, when it exceeds the device's memory.

What is counted, per rank (N parameters, R ranks, ZeRO stage S, p = 2 bytes in bf16
and 4 in fp32, T = ``learner.micro_batch_tokens``):

- parameters: ``p N``, divided by R under ZeRO-3;
- gradients: ``p N`` (divided by R from ZeRO-2 on), plus the float32 gradient of
  the rank's optimizer partition DeepSpeed builds at the step (ZeRO >= 1);
- optimizer states: AdamW's two float32 moments and, under ZeRO >= 1 or in bf16, a
  float32 master copy (DeepSpeed clones its partition even in fp32), divided by R
  from ZeRO-1 on; the step itself needs one more float32 temporary of the partition
  (torch's multi-tensor AdamW computes ``sqrt(v) + eps`` for all of it at once), but
  only after the backward has freed the activations, so the peak is the larger of
  the two;
- activations: what autograd keeps per layer and token (the norms' inputs and
  outputs, q/k/v and the attention output, the MLP's gate, up, activation and
  product), for all layers without gradient checkpointing, or each layer's input plus
  one layer recomputed with it;
- the log-prob chunk: ``chunk`` tokens of logits in the compute dtype, their float32
  copy and float32 gradient (a chunked output layer), plus the last hidden states.

Not counted: attention scores (flash and memory-efficient kernels keep none; a kernel
that materialises [heads, T, T] scores does not fit this model, which is one reason the
CPU check stays at T = 1024), the CUDA context and the allocator's fragmentation (hence
:data:`USABLE_FRACTION`), communication buckets, and the weight export's gather
buffer (``learner.export_bucket_mb``).  Checked against measured peaks on CPU by
``tests/learn/test_memory_plan.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import msgspec

from ._learner import LearnerConfig

__all__ = ["USABLE_FRACTION", "MemoryPlan", "ModelShape", "plan_memory"]

USABLE_FRACTION: Final = 0.9
"""Share of a device's memory a plan may fill: the rest goes to the CUDA context,
kernels' workspaces and the caching allocator's fragmentation."""

GIB: Final = 1024**3


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """The sizes of a decoder-only transformer that memory depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, cfg: dict) -> ModelShape:
        """From a Hugging Face ``config.json`` (Llama/Qwen field names)."""
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        return cls(
            hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads), intermediate=int(cfg["intermediate_size"]),
            vocab=int(cfg["vocab_size"]), tied=bool(cfg.get("tie_word_embeddings", False)),
        )  # fmt: skip

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelShape:
        """From ``model_dir/config.json``."""
        return cls.from_config(json.loads((Path(model_dir) / "config.json").read_text()))

    @property
    def params(self) -> int:
        """Parameter count (biases left out: < 0.1% of a Qwen/Llama model)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate + 2 * h
        return self.layers * layer + self.vocab * h * (1 if self.tied else 2) + h

    def activation_elements_per_token(self) -> int:
        """Elements autograd keeps per token for one decoder layer's backward."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        # 2 norms x (input, output), q and k before and after rotary, v, attention
        # output; gate, up, silu(gate), silu(gate) * up.
        return 4 * h + 3 * q + 2 * kv + q + 4 * self.intermediate


class MemoryPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Estimated bytes per learner rank, by what holds them, against the device."""

    params: int
    gradients: int
    optimizer: int
    optimizer_step: int
    """The step's temporary, live only once the activations are freed."""
    activations: int
    """With ``learner.gradient_checkpointing`` as configured."""
    activations_without_checkpointing: int
    activations_with_checkpointing: int
    logprob_chunk: int
    device_bytes: int | None
    """The device's memory; None: unknown (no check)."""
    fix: str | None
    """None when the plan fits; otherwise what to change, naming the field."""

    @property
    def total(self) -> int:
        return (
            self.params
            + self.gradients
            + self.optimizer
            + max(self.activations + self.logprob_chunk, self.optimizer_step)
        )

    @property
    def fits(self) -> bool:
        return self.fix is None

    def line(self) -> str:
        """One log line: each part in GiB and the verdict."""
        parts = " ".join(
            f"{k}={getattr(self, k) / GIB:.2f}"
            for k in ("params", "gradients", "optimizer", "activations", "logprob_chunk")
        )
        dev = "device unknown" if self.device_bytes is None else f"of {self.device_bytes / GIB:.1f} GiB"
        verdict = "fits" if self.fits else f"does not fit: {self.fix}"
        return f"learner memory per rank (GiB): {parts} total={self.total / GIB:.2f} {dev}: {verdict}"


def plan_memory(
    shape: ModelShape,
    learner: LearnerConfig,
    *,
    ranks: int,
    device_bytes: int | None,
) -> MemoryPlan:
    """The estimate described in the module docstring.

    Args:
        shape: the model's sizes (:meth:`ModelShape.from_dir`).
        learner: the ``[learner]`` section (stage, precision, checkpointing, tokens,
            the log-prob chunk).
        ranks: data-parallel learner ranks (ZeRO partitions over them).
        device_bytes: memory of one device; None skips the verdict.
    """
    assert ranks >= 1, f"plan_memory: ranks must be >= 1, got {ranks}"
    n, stage, t = shape.params, learner.zero_stage, learner.micro_batch_tokens
    p = 2 if learner.precision == "bf16" else 4
    opt_ranks = ranks if stage >= 1 else 1
    params = p * n // (ranks if stage == 3 else 1)
    gradients = p * n // (ranks if stage >= 2 else 1) + (4 * n // ranks if stage >= 1 else 0)
    master = 4 * n // opt_ranks if stage >= 1 or p == 2 else 0
    optimizer = master + 8 * n // opt_ranks  # + AdamW's m and v
    step = 4 * n // opt_ranks
    per_layer = p * shape.activation_elements_per_token()  # bytes per token
    # Checkpointed: each layer's input, plus one layer recomputed.
    ckpt_per_token = shape.layers * p * shape.hidden + per_layer + 2 * p * shape.hidden
    full_per_token = shape.layers * per_layer + 2 * p * shape.hidden
    act_per_token = ckpt_per_token if learner.gradient_checkpointing else full_per_token
    logits = min(learner.logprob_chunk_tokens, t) * shape.vocab * (p + 4 + 4)  # [chunk, V]: compute dtype, fp32, fp32 grad
    chunk = logits + t * shape.hidden * 4  # + the float32 last hidden states
    activations = t * act_per_token
    static = params + gradients + optimizer
    fix = None
    if device_bytes is not None:
        usable = int(device_bytes * USABLE_FRACTION)
        # The largest micro-batch that fits: activations and hidden states grow per token.
        most = max(0, int((usable - static - logits) / (act_per_token + 4 * shape.hidden)))
        if static + max(logits, step) >= usable:
            fix = (
                f"parameters, gradients and optimizer states alone take {static / GIB:.1f} GiB of {usable / GIB:.1f}:"
                f" raise learner.zero_stage (now {stage}) or add learner ranks (now {ranks})"
                if stage < 3 else
                f"parameters, gradients and optimizer states take {static / GIB:.1f} GiB of {usable / GIB:.1f}"
                f" even under ZeRO-3: add learner ranks (now {ranks})"
            )  # fmt: skip
        elif static + activations + chunk > usable:  # the step's temporary fits (above)
            fix = f"lower learner.micro_batch_tokens from {t} to <= {most}"
            if not learner.gradient_checkpointing and static + t * ckpt_per_token + chunk <= usable:
                fix = f"set learner.gradient_checkpointing = true (or {fix})"
    return MemoryPlan(
        params=params, gradients=gradients, optimizer=optimizer, optimizer_step=step, activations=activations,
        activations_without_checkpointing=t * full_per_token,
        activations_with_checkpointing=t * ckpt_per_token,
        logprob_chunk=chunk, device_bytes=device_bytes, fix=fix,
    )  # fmt: skip
