"""Wire types between the rollout core and an inference backend.

Token-in/token-out: a completion carries the exact token ids the server sampled,
their logprobs, and the weight version that produced them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

FinishReason = Literal["stop", "length", "abort"]


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request sampling; sent as-is to every engine."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None


class Completion(msgspec.Struct, frozen=True):
    """One generation, as returned to the core.  Travels backend -> core.

    Invariants: ``len(token_ids) == len(logprobs)``; ``finish_reason`` is ``stop``
    (EOS or stop string), ``length`` (``max_tokens`` reached) or ``abort`` (the
    server gave up; the tokens so far are valid and generation may be resumed).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    weight_version: int = 0
    text: str = ""


class ChatCompletion(msgspec.Struct, frozen=True):
    """One generation in chat (text) mode: no token ids, no logprobs."""

    text: str
    finish_reason: FinishReason
    completion_tokens: int
    raw: dict[str, Any] = {}
