"""Per-request sampling seeds: a pure function of where a request stands.

A seeded call (``SamplingConfig.seed``) seeds every request it makes from the call's
seed, the problem's id and how many times the call has met that id before (a stream
may hold one problem twice), the sample index and the turn, hashed, so that a rerun
of the same call samples the same tokens where the engine allows it (vLLM's and
SGLang's per-request seeds, the in-process engine's generator), whatever the order in
which requests reach the servers or which rollout worker runs them (a worker sees the
parent's placement key as the problem's id).  Hashing, not adding: with ``seed + i``,
the call seeded ``s + 1`` would repeat the call seeded ``s``, one sample along.

The price on vLLM (read in its ``v1/sample/ops/topk_topp_sampler.py``): a batch with
seeded requests draws each one's noise with its own generator, one small operation per
request per step, and skips FlashInfer's top-k/top-p sampling kernel.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["derive_seed"]

SEED_MASK: Final = (1 << 63) - 1
"""Seeds are non-negative int64s: what vLLM's API (``seed``), SGLang's
(``sampling_seed``) and ``torch.Generator.manual_seed`` all take."""


def derive_seed(base: int, *parts: object) -> int:
    """A seed for ``parts`` (their ``str``, in order) under ``base``: equal inputs give
    equal seeds; any other input, an unrelated one."""
    text = "/".join(map(str, (base, *parts))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") & SEED_MASK
