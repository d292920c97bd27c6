"""The policy's attention kernel, and the start-up check that packing is safe with it.

Packed micro-batches (``_packing``) put several sequences in one row with
``position_ids`` restarting at 0 and no attention mask.  transformers (checked with
5.24) turns the restarts into a block-diagonal causal mask for ``sdpa`` and ``eager``
(``masking_utils.find_packed_sequence_indices``) and into varlen calls for
``flash_attention_2``; an older release, another kernel or a remote-code model may
not, and then every token would attend to the sequences packed before it: a silent
error in every log-prob.  :func:`check_packed_attention` runs a packed forward beside
the sequences' own forwards once at start-up and refuses to go on if they differ.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from ._packing import MicroBatch, TrainSeq, collate

__all__ = ["check_packed_attention", "checked_attn_implementation"]

CHECK_LENGTHS = (7, 12, 5)
"""Sequences of the start-up check: short (a few forwards of 24 tokens on the real
model), unequal, and more than two so a leak into the middle one shows too."""

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}
"""Largest |packed - separate| log-prob accepted, by compute dtype: float32 noise
between the two is ~1e-6 and bf16's ~1e-3 (the tests' tiny model: 2e-7 and 9e-4), while
attention across sequences moves even that randomly initialised model's by 0.43."""


def checked_attn_implementation(name: str) -> str:
    """``name`` if its kernel can be loaded here.

    Raises:
        ValueError: naming ``learner.attn_implementation`` when ``flash_attention_2``
            is asked for without the ``flash_attn`` package.
    """
    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ValueError(
            "learner.attn_implementation: 'flash_attention_2' needs the flash_attn package, which is not"
            " installed here; install it or use 'sdpa'"
        )
    return name


def check_packed_attention(
    logprobs: Callable[[MicroBatch], torch.Tensor], *, vocab_size: int, name: str, dtype: torch.dtype
) -> float:
    """Check that a packed forward equals the sequences' separate forwards.

    Args:
        logprobs: the policy's target log-probs of a micro-batch, ``[T]`` (called 4
            times, without gradients; under ZeRO-3 every rank must call this).
        vocab_size: token ids are drawn below it (fixed seed: the same on every rank).
        name: the attention implementation, for the error.
        dtype: the compute dtype, which sets the tolerance.

    Returns:
        The largest absolute difference seen.

    Raises:
        RuntimeError: naming ``learner.attn_implementation`` when packed sequences see
            each other.
    """
    g = torch.Generator().manual_seed(0)
    seqs = [
        TrainSeq(ids=torch.randint(0, vocab_size, (n,), generator=g).tolist(), mask=[1] * n, logprobs=[0.0] * n)
        for n in CHECK_LENGTHS
    ]
    packed = logprobs(collate(seqs)).float().cpu()  # [T]
    alone = torch.cat([logprobs(collate([s])).float().cpu() for s in seqs])  # [T]
    err = float((packed - alone).abs().max())
    if not err <= TOLERANCE[dtype]:  # also catches NaN
        raise RuntimeError(
            f"learner.attn_implementation={name!r}: packed sequences attend to each other (log-probs of a packed"
            f" micro-batch differ from the sequences' own by {err:.3g} > {TOLERANCE[dtype]:g}); this transformers"
            " release or model does not separate sequences by position_ids with this kernel: use another"
            " implementation ('sdpa', 'flash_attention_2')"
        )
    return err
