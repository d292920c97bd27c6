"""Retry policy for requests to inference servers: pure, no I/O."""

from __future__ import annotations

import random

import msgspec


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Exponential backoff with full jitter.

    Full jitter spreads thousands of retries from a restarted server over the whole
    window instead of sending them back in one burst.
    """

    max_retries: int = 5
    initial_s: float = 0.5
    max_s: float = 30.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        ceiling = min(self.max_s, self.initial_s * 2 ** (attempt - 1))
        return (rng or random).uniform(0, ceiling)
