"""Driving a learner that spans several DeepSpeed ranks from the trainer on rank 0.

Under ``torchrun`` or the ``deepspeed`` launcher every rank runs ``rstar2 train``.
Rank 0 is the trainer: it runs the rollouts and calls the learner through
:class:`LearnerDriver`.  Each call is first broadcast (``broadcast_object_list``) to
the other ranks, which sit in :func:`follow` and make the same call, so the
collectives inside DeepSpeed (ZeRO gathers, gradient reductions) line up.  With one
rank, the driver is a plain pass-through.

The calls are few and coarse (one per SFT or GRPO step, export, checkpoint), so the
pickled groups and their broadcast are small next to the step itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import torch.distributed as dist

from .grpo import grpo_step
from .learner import Learner
from .sft import sft_step

_STOP: Final = "stop"


def _operations(learner: Learner) -> dict[str, Callable[..., Any]]:
    return {
        "grpo_step": lambda groups: grpo_step(learner, groups),
        "sft_step": lambda seqs: sft_step(learner, seqs),
        "export": learner.export,
        "save_checkpoint": learner.save_checkpoint,
        "load_checkpoint": learner.load_checkpoint,
        "set_peak_lr": learner.set_peak_lr,
        "reset_optimizer": learner.reset_optimizer,
    }


class LearnerDriver:
    """Rank 0's handle: ``driver.call("grpo_step", groups)`` runs on every rank.

    Not thread-safe: calls must come one at a time (the trainer serialises them).
    """

    def __init__(self, learner: Learner) -> None:
        assert learner.rank == 0, "only rank 0 drives the learner; other ranks call follow()"
        self.learner = learner
        self._ops = _operations(learner)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in self._ops:
            raise ValueError(f"unknown learner operation {name!r}; known: {sorted(self._ops)}")
        if self.learner.world_size > 1:
            dist.broadcast_object_list([(name, args, kwargs)], src=0)
        return self._ops[name](*args, **kwargs)

    def close(self) -> None:
        """Release the followers, then leave the process group."""
        if self.learner.world_size > 1:
            dist.broadcast_object_list([(_STOP, (), {})], src=0)
        self.learner.close()


def follow(learner: Learner) -> None:
    """Run rank 0's learner calls on this rank until it closes the driver."""
    ops = _operations(learner)
    while True:
        message: list[Any] = [None]
        dist.broadcast_object_list(message, src=0)
        name, args, kwargs = message[0]
        if name == _STOP:
            learner.close()
            return
        ops[name](*args, **kwargs)
