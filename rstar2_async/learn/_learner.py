"""The DeepSpeed engine wrapper: one policy, its optimizer, and the primitives of an
update step (forward to token logprobs, backward, optimizer step, all-reduce).

The GRPO update that uses these primitives is in ``_grpo``; cold-start SFT in
``_sft``; weight export in ``_export``; checkpoints in ``_checkpoint``; the driver
that runs them on every rank in ``_driver``.  Those import this module, never the
reverse.

Runs as one process (no launcher: the rendezvous variables get single-process
defaults) or as many under ``torchrun`` / the ``deepspeed`` launcher (multi-node by
its hostfile). On a machine without CUDA it runs on CPU with gloo
(``DS_ACCELERATOR=cpu``), which is how the tests run ZeRO 0-3 with 1 and 2 processes.

Engine facts this module relies on (DeepSpeed 0.19):

- ``gradient_accumulation_steps`` is 1 and the accumulation boundary is set by hand
  before each micro-batch, because the number of packed micro-batches varies per
  step; every rank runs the same number of them (ZeRO-3 gathers parameters with
  collectives in every forward).
- The optimizer is a plain ``torch.optim.AdamW`` passed in (DeepSpeed's fused/CPU
  Adam ops need a compiler toolchain); the schedule is a ``LambdaLR`` stepped by the
  engine, so both land in DeepSpeed checkpoints.
- The ``deepspeed_shm_comm`` JIT op is disabled: building it takes ~77 s on CPU and
  gloo does not need it.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from pathlib import Path
from typing import Any, final

import numpy as np

from ..config import LearnerConfig, ModelShape, plan_memory
from ..errors import ConfigError

# deepspeed picks its accelerator at import time: decide before importing it.
if "DS_ACCELERATOR" not in os.environ:
    import torch as _torch

    if not _torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"

import deepspeed  # noqa: E402
import deepspeed.ops  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ._attention import check_packed_attention, checked_attn_implementation  # noqa: E402
from ._loading import build_reference, load_policy  # noqa: E402
from ._logprobs import chunked_output_layer  # noqa: E402
from ._packing import MicroBatch  # noqa: E402

__all__ = ["Learner", "barrier", "init_distributed", "seed_everything"]

_log = logging.getLogger(__name__)


def init_distributed() -> tuple[int, int]:
    """Join (or create) the process group once; returns ``(rank, world_size)``.

    Without a launcher the rendezvous variables default to a single process on a
    free loopback port. gloo on CPU, nccl on CUDA.
    """
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # 77 s JIT build
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@final
class Learner:
    """A causal LM under a DeepSpeed engine, plus a frozen reference when KL is on.

    Args:
        config: the ``[learner]`` section.
        model_path: a Hugging Face model directory (config, safetensors, tokenizer);
            it is also where the export copies the tokenizer from.
        deepspeed_overrides: merged (recursively) into the DeepSpeed config derived
            from ``config``; an escape hatch for engine knobs the config does not name
            (bucket sizes, offload, ...).

    Resource handling: the learner owns the engine and the process group it joined;
    :meth:`close` tears down the process group (call it once, at exit).  Export and
    checkpoints are functions of a learner (``save_hf_checkpoint``,
    ``save_checkpoint``, ``load_checkpoint``).
    """

    def __init__(
        self, config: LearnerConfig, model_path: str | Path, *, deepspeed_overrides: dict[str, Any] | None = None
    ) -> None:
        self.config = config
        self.model_path = Path(model_path)
        self.rank, self.world_size = init_distributed()
        self.device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu")
        seed_everything(config.seed + self.rank)
        self.dtype = torch.bfloat16 if config.precision == "bf16" else torch.float32
        ds_config = _merge(self.deepspeed_config(), deepspeed_overrides or {})
        self.memory_plan = _check_memory(config, self.model_path, self.world_size, self.device)
        attn = checked_attn_implementation(config.attn_implementation)
        model = load_policy(self.model_path, ds_config, attn)  # partitioned as it loads under ZeRO-3
        if config.gradient_checkpointing:
            kwargs = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.x
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:  # older releases, which our transformers>=4.50 floor admits; removed in v6
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.lr,
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
        warmup = config.warmup_steps
        # Factor for the (k+1)-th optimizer step: linear warm-up to 1, then constant.
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda k: min(1.0, (k + 1) / warmup) if warmup else 1.0
        )
        self.engine, *_ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
        )
        self.engine.train()
        self.ref_model = None
        if config.kl_coef > 0:
            # The initial weights, frozen: a ZeRO-3 engine of its own under ZeRO-3.
            self.ref_model = build_reference(self.model_path, ds_config, self.dtype, self.device, attn)
        # Packing is only right if the kernel keeps sequences apart: refuse to train otherwise.
        vocab = self.module.config.vocab_size
        check_packed_attention(
            lambda mb: self.logprobs(mb, grad=False)[0], vocab_size=vocab, name=attn, dtype=self.dtype
        )

    # --- configuration --------------------------------------------------------------

    def deepspeed_config(self) -> dict[str, Any]:
        """The DeepSpeed config derived from :class:`LearnerConfig`."""
        c = self.config
        zero: dict[str, Any] = {"stage": c.zero_stage}
        if c.zero_stage == 3:
            zero |= {"stage3_gather_16bit_weights_on_model_save": False}
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,  # boundaries are set by hand (module doc)
            "train_batch_size": self.world_size,
            "gradient_clipping": c.grad_clip,
            "zero_optimization": zero,
            "bf16": {"enabled": c.precision == "bf16"},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped Hugging Face model (parameters are partitioned under ZeRO-3)."""
        return self.engine.module

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (restored by :meth:`load_checkpoint`)."""
        return int(self.engine.global_steps)

    @property
    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    # --- update-step primitives ------------------------------------------------------

    def logprobs(
        self, mb: MicroBatch, *, grad: bool = True, entropy: bool = False, reference: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probability of each target token under the policy (or the reference).

        Returns ``(logp [T], entropy [T] or None)`` in float32. With ``grad=False`` no
        graph is kept (old/reference logprobs); ZeRO-3 still gathers parameters, so
        every rank must make the same calls.  The logits are never held whole: the
        output layer runs ``learner.logprob_chunk_tokens`` tokens at a time
        (``_logprobs``), inside the model's forward so DeepSpeed sees it as that layer.
        """
        model = self.ref_model if reference else self.engine
        assert model is not None, "Learner.logprobs(reference=True) needs learner.kl_coef > 0"
        mb = mb.to(self.device)
        hf = self.ref_model if reference else self.module
        chunk = self.config.logprob_chunk_tokens
        with torch.set_grad_enabled(grad), chunked_output_layer(hf, mb.targets, chunk=chunk, entropy=entropy):
            out = model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False)
        cols = out.logits[0]  # [T, 2] (logp, entropy) or [T, 1] (logp): the chunked layer's output
        return cols[:, 0], (cols[:, 1] if entropy else None)

    def backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Accumulate gradients of ``loss``; ``last`` marks the final micro-batch of an
        optimizer step (where ZeRO reduces gradients across ranks)."""
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> dict[str, float]:
        """Clip, step the optimizer and the schedule; returns ``grad_norm`` and the
        ``lr`` that was used."""
        lr = self.lr
        norm = None
        if self.config.zero_stage == 0 and self.config.precision == "fp32":
            # DeepSpeed clips fp32 ZeRO-0 gradients without keeping the norm; the
            # gradients are already averaged over ranks here.
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        self.engine.set_gradient_accumulation_boundary(True)
        self.engine.step()
        if norm is None:
            norm = self.engine.get_global_grad_norm()
        # .item(): a device sync, once per optimizer step.
        grad_norm = float(norm.item() if isinstance(norm, torch.Tensor) else (norm or 0.0))
        return {"grad_norm": grad_norm, "lr": lr}

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """Sum (or max) a few numbers over ranks. A CPU-GPU sync point: call it once
        per mini-batch, not per micro-batch."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world_size > 1:
            t = t.to(self.device) if dist.get_backend() == "nccl" else t
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.cpu().tolist()

    # --- state ----------------------------------------------------------------------

    def set_peak_lr(self, lr: float) -> None:
        """Make ``lr`` the peak of the schedule from the next step on (a stage's own
        learning rate); the warm-up position is kept."""
        scheduler = self.engine.lr_scheduler
        scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
        for group, factor in zip(scheduler.optimizer.param_groups, scheduler.lr_lambdas):
            group["initial_lr"] = lr
            group["lr"] = lr * factor(scheduler.last_epoch)

    def reset_optimizer(self) -> None:
        """Forget AdamW's moments (rStar2 resets the optimizer before stage 3)."""
        optimizer = self.engine.optimizer
        base = getattr(optimizer, "optimizer", optimizer)  # ZeRO wraps the torch optimizer
        base.state.clear()

    def close(self) -> None:
        """Leave the process group (after a final barrier)."""
        if dist.is_initialized():
            dist.barrier()
            # DeepSpeed's own call also drops its cached groups, so that a later
            # learner in the same process (a resumed run, a test) starts clean.
            deepspeed.comm.destroy_process_group()


def _check_memory(config: LearnerConfig, model_path: Path, ranks: int, device: torch.device):  # noqa: ANN202
    """Log the memory plan (rank 0) and refuse a plan that cannot fit the device."""
    gb = config.device_memory_gb
    device_bytes = int(gb * 1e9) if gb else None
    if device_bytes is None and device.type == "cuda":
        device_bytes = torch.cuda.get_device_properties(device).total_memory
    plan = plan_memory(ModelShape.from_dir(model_path), config, ranks=ranks, device_bytes=device_bytes)
    if dist.get_rank() == 0:
        _log.info("%s", plan.line())
    if not plan.fits:
        raise ConfigError(plan.line())  # one line, ending with the field to change
    return plan


def barrier() -> None:
    """Wait for every rank (nothing to wait for in a one-process world)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
