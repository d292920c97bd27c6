"""What the trainer keeps between steps and hands back: its resumable state, the run's
summary, one rollout's result, and the base model it starts from."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import msgspec

from ..config import ModelConfig, StageConfig
from ..errors import TrainError
from ..selection import RocDecision, roc_downsample
from ..types import Group

__all__ = ["RolloutResult", "StreamState", "TrainState", "TrainSummary", "downsample", "oldest_version", "prepare_model"]


class StreamState(msgspec.Struct, kw_only=True):
    """Where a streaming stage's stream of groups stands (``run.mode = "streaming"``).

    Every problem started gets the next stream position (its batch and place are a
    pure function of the position, as on-policy batches are of the step).  A position
    is in exactly one of: ``in_flight`` (started, unfinished: regenerated on resume),
    ``queued`` (finished, kept by RoC, not yet trained: the groups themselves are in
    the checkpoint's ``stream-queue.msgpack``), ``trained``, ``dropped`` (finished,
    all rewards equal or a sample the infrastructure failed: RoC dropped it), or the
    positions from ``next_seq`` on (not started yet).
    Groups are trained in stream order, ``head`` being the first not yet trained or dropped.
    """

    next_seq: int = 0
    head: int = 0
    in_flight: list[int] = []
    queued: list[int] = []
    trained: list[int] = []
    dropped: list[int] = []


class TrainState(msgspec.Struct, kw_only=True):
    """What a checkpoint stores besides the learner (JSON).  With the learner's model,
    optimizer, scheduler and RNG states it makes resume exact: batches are a pure
    function of (seed, stage, step), or of the stream position in streaming mode."""

    stage: int = 0
    step_in_stage: int = 0
    rl_step: int = 0
    weight_version: int = 0
    weights_dir: str | None = None
    hard_problems: dict[str, list[str]] = {}
    evals: list[dict[str, Any]] = []
    stream: StreamState | None = None
    """The current stage's stream, in streaming mode."""


class TrainSummary(msgspec.Struct, frozen=True):
    """What ``rstar2 train`` prints (and writes to ``summary.json``) at the end."""

    run_dir: str
    rl_steps: int
    wall_s: float
    evals: list[dict[str, Any]]
    """Each evaluation: ``{"rl_step", "stage", "<set>": accuracy, "accuracy": mean}``."""
    phase_seconds: dict[str, float]
    """Wall seconds spent per phase over the run (rollout, reward, update, sync, eval)."""
    plots: list[str]
    stopped: bool = False
    """Stopped early (SIGTERM, ``Trainer.stop``) after writing a checkpoint: ``--resume`` continues."""


class RolloutResult:
    """One batch's groups, what GRPO-RoC kept and dropped, and how long it took (in
    streaming mode: how long the learner waited for them)."""

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.kept: list[Group] = []
        self.dropped: dict[str, int] = {}
        self.seconds = 0.0
        self.reward_seconds = 0.0
        self.trained: list[Group] = []
        """Of ``kept``, those the update trained (the others were staler than the bound)."""
        self.decisions: list[tuple[Group, RocDecision]] = []
        """Each finished group beside GRPO-RoC's decision on it (the trajectory recorder's input)."""

    def add(self, group: Group, decision: RocDecision) -> None:
        """A finished group and what GRPO-RoC made of it."""
        self.groups.append(group)
        self.decisions.append((group, decision))
        if decision.group is not None:
            self.kept.append(decision.group)
        for d in decision.dropped:
            self.dropped[d.reason] = self.dropped.get(d.reason, 0) + 1


def downsample(group: Group, stage: StageConfig, rng: random.Random) -> RocDecision:
    """GRPO-RoC on a finished group with the stage's settings (step 5)."""
    return roc_downsample(
        group, stage.n_keep, rng, selection=stage.roc_selection, min_per_class=stage.roc_min_per_class,
        rounding=stage.roc_rounding,
    )  # fmt: skip


def prepare_model(model: ModelConfig, run_dir: Path) -> Path:
    """The base model directory: ``model.path``, or a tiny model built once into the run.

    Raises:
        TrainError: ``model.path`` is not a model directory.
    """
    if model.path is not None:
        path = Path(model.path)
        if not (path / "config.json").is_file():
            raise TrainError(f"model.path: {path} is not a model directory (no config.json)")
        return path
    from ..demo import build_tiny_model

    assert model.tiny is not None
    out = run_dir / "base-model"
    if not (out / "config.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        t = model.tiny
        build_tiny_model(out, hidden_size=t.hidden_size, num_layers=t.num_layers, vocab_size=t.vocab_size, seed=t.seed)
    return out


def oldest_version(group: Group, default: int) -> int:
    """The oldest weight version among a group's generated tokens (a trajectory
    that never generated, e.g. its server failed for good, has none)."""
    return min((t.weight_version for t in group.trajectories if t.turns), default=default)
