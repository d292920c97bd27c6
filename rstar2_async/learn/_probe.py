"""The learner's half of a weight sync's check: the log-probs its weights give a fixed
probe sequence, which every server must reproduce before it samples a token from the
export (``backends.Probe``, ``backends.verify_servers``).

The probe is :data:`PROBE_TOKENS` token ids drawn uniformly, with a fixed seed, from
the ids both the model and its tokenizer know (a server refuses ids beyond its
tokenizer's).  Random ids rather than text: every row of the output layer has the
same chance to be read, so a stale (tied) head shows on every token, not only on the
few a sentence would use.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Final

import torch

from ._packing import TrainSeq, collate

if TYPE_CHECKING:
    from ._learner import Learner

__all__ = ["PROBE_TOKENS", "probe_logprobs", "probe_tokens"]

PROBE_TOKENS: Final = 256
"""Length of the probe: one prefill of a few hundred tokens is milliseconds on a
GPU server and about a second on a 2-core CPU one, and 255 log-probs are enough
for a stale head or another model's weights to show on many of them."""


@functools.cache
def _usable_vocab(model_path: Path, vocab_size: int) -> int:
    from transformers import AutoTokenizer

    return min(vocab_size, len(AutoTokenizer.from_pretrained(model_path)))


def probe_tokens(learner: Learner) -> list[int]:
    """The probe's token ids: the same for every rank, every export and every run of
    the same model."""
    vocab = _usable_vocab(learner.model_path, int(learner.module.config.vocab_size))
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (PROBE_TOKENS,), generator=generator).tolist()


def probe_logprobs(learner: Learner) -> tuple[list[int], list[float]]:
    """``(token_ids, logprobs)``: ``logprobs[i] = log p(token_ids[i + 1] |
    token_ids[: i + 1])`` under the learner's current weights, computed as the GRPO
    update computes them (same forward, same precision).  Collective under ZeRO-3:
    every rank calls it (the driver sees to that)."""
    ids = probe_tokens(learner)
    n = len(ids)
    mb = collate([TrainSeq(ids=ids, mask=[0] + [1] * (n - 1), logprobs=[0.0] * n)])
    logp, _ = learner.logprobs(mb, grad=False)  # [n]: position j scores token j + 1; the last, nothing
    return ids, logp[: n - 1].tolist()
