"""Driving a learner that spans several DeepSpeed ranks from the trainer on rank 0.

Under ``torchrun`` or the ``deepspeed`` launcher every rank runs ``rstar2 train``.
Rank 0 is the trainer: it runs the rollouts and calls the learner through the typed
methods of :class:`LearnerDriver`.  Each call is first broadcast
(``broadcast_object_list``) to the other ranks, which sit in :func:`follow` and make
the same call, so the collectives inside DeepSpeed (ZeRO gathers, gradient
reductions) line up.  With one rank, the driver is a plain pass-through.

The calls are few and coarse (one per SFT or GRPO step, export, checkpoint), so the
pickled groups and their broadcast are small next to the step itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

import torch.distributed as dist

from ..types import Group
from ._checkpoint import load_checkpoint, save_checkpoint
from ._export import PendingExport, gather_export, save_hf_checkpoint
from ._grpo import GrpoStats, grpo_step
from ._learner import Learner
from ._packing import TrainSeq
from ._probe import probe_logprobs
from ._sft import SftStats, sft_step

__all__ = ["LearnerDriver", "follow"]

_STOP: Final = "stop"

_OPERATIONS: Final[dict[str, Callable[..., Any]]] = {
    "grpo_step": grpo_step,
    "sft_step": sft_step,
    "export": lambda learner, out_dir: save_hf_checkpoint(learner, out_dir),
    "gather_export": lambda learner: gather_export(learner),
    "save_checkpoint": lambda learner, root, state, files=None: save_checkpoint(learner, root, state=state, files=files),
    "load_checkpoint": load_checkpoint,
    "set_peak_lr": Learner.set_peak_lr,
    "reset_optimizer": Learner.reset_optimizer,
    "probe_logprobs": probe_logprobs,
}
"""What a follower rank runs for each of the driver's methods: ``f(learner, *args)``."""


@final
class LearnerDriver:
    """Rank 0's handle on the learner of every rank.  Each method runs the same
    operation on every rank and returns rank 0's result.

    Not thread-safe: calls must come one at a time (the trainer serialises them).
    A collective failing on another rank raises here (torch.distributed's error).
    """

    def __init__(self, learner: Learner) -> None:
        assert learner.rank == 0, "only rank 0 drives the learner; other ranks call follow()"
        self.learner = learner

    def grpo_step(self, groups: Sequence[Group], version: int | None = None) -> GrpoStats:
        """One GRPO update on the kept groups from weights ``version`` (see ``_grpo.grpo_step``)."""
        return self._run("grpo_step", list(groups), version)

    def sft_step(self, seqs: Sequence[TrainSeq]) -> SftStats:
        """One optimizer step of assistant-only cross-entropy (see ``_sft.sft_step``)."""
        return self._run("sft_step", list(seqs))

    def export(self, out_dir: Path) -> Path | None:
        """Write the weights as a Hugging Face directory that vLLM and transformers load."""
        return self._run("export", out_dir)

    def gather_export(self) -> PendingExport:
        """The weights gathered into memory, to be written later (``_export.gather_export``)."""
        pending = self._run("gather_export")
        assert pending is not None  # rank 0's
        return pending

    def probe_logprobs(self) -> tuple[list[int], list[float]]:
        """The weight sync's probe and the current weights' log-probs of it
        (``_probe.probe_logprobs``)."""
        return self._run("probe_logprobs")

    def save_checkpoint(self, root: Path, *, state: dict[str, Any], files: Mapping[str, bytes] | None = None) -> Path:
        """A complete, atomic checkpoint with the trainer's ``state`` (and ``files``,
        written by rank 0 only: they are not sent to the other ranks) beside it."""
        if self.learner.world_size > 1:
            dist.broadcast_object_list([("save_checkpoint", (root, state))], src=0)
        return _OPERATIONS["save_checkpoint"](self.learner, root, state, files)

    def load_checkpoint(self, root: Path) -> dict[str, Any] | None:
        """Restore the newest checkpoint under ``root``; the trainer's state, or None."""
        return self._run("load_checkpoint", root)

    def set_peak_lr(self, lr: float) -> None:
        """Make ``lr`` the schedule's peak from the next step on."""
        self._run("set_peak_lr", lr)

    def reset_optimizer(self) -> None:
        """Forget AdamW's moments (rStar2's stage 3)."""
        self._run("reset_optimizer")

    def close(self) -> None:
        """Release the followers, then leave the process group."""
        if self.learner.world_size > 1:
            dist.broadcast_object_list([(_STOP, ())], src=0)
        self.learner.close()

    def _run(self, name: str, *args: Any) -> Any:
        if self.learner.world_size > 1:
            dist.broadcast_object_list([(name, args)], src=0)
        return _OPERATIONS[name](self.learner, *args)


def follow(learner: Learner) -> None:
    """Run rank 0's learner calls on this rank until it closes the driver."""
    while True:
        message: list[Any] = [None]
        dist.broadcast_object_list(message, src=0)
        name, args = message[0]
        if name == _STOP:
            learner.close()
            return
        _OPERATIONS[name](learner, *args)
