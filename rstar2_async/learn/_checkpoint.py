"""Atomic training checkpoints with retention, and resume.

Layout of a checkpoint root::

    root/
      step-000000012/          complete: only ever created by a rename
        ds/...                 DeepSpeed: module, optimizer (ZeRO shards), scheduler, step
        rng-rank0.pt ...       Python, numpy and torch RNG states of each rank
        state.json             {"step": ..., "world_size": ..., "state": <caller's state>}
      .step-000000013.tmp/     being written (or left by a crash): never loaded

Guarantees:

- **Atomic**: a checkpoint is written into a temporary directory, every file is
  fsynced, and the directory is renamed into place. A crash at any point leaves the
  previous complete checkpoints untouched; a stale temporary directory is removed by
  the next save.
- **Retention**: after a new checkpoint is complete, all but the newest
  ``learner.keep_checkpoints`` are deleted (renamed aside first, so a crash while
  deleting never leaves a half-deleted directory that looks complete).
- **Exact resume**: with the caller's data position in ``state`` (e.g. the dataset
  cursor and stage), the model, optimizer, schedule, step and RNG states restored,
  the next batch and the next loss equal those of an uninterrupted run (same world
  size; with a different one the RNG states are reseeded and resume is approximate).

All ranks must call :func:`save_checkpoint` and :func:`load_checkpoint` (collective);
the checkpoint root must be on a filesystem every rank sees.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import CheckpointWriteError
from ._export_writer import fsync_path
from ._learner import barrier

if TYPE_CHECKING:
    from ._learner import Learner

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_STEP_RE = re.compile(r"^step-(\d+)$")


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root``, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    steps = [(int(m[1]), p) for p in root.iterdir() if (m := _STEP_RE.match(p.name)) and p.is_dir()]
    return max(steps)[1] if steps else None


def save_checkpoint(
    learner: Learner, root: str | Path, *, state: dict[str, Any], files: Mapping[str, bytes] | None = None
) -> Path:
    """Write a complete checkpoint of ``learner`` at its current step; returns its path.

    Args:
        root: the checkpoint root (created if needed).
        state: the caller's JSON-serialisable state to restore with it (data-loader
            position, curriculum stage, ...).
        files: more of the caller's state, ``name -> bytes`` (rank 0 writes them into
            the checkpoint directory, atomically with the rest; read them back from
            ``latest_checkpoint(root) / name``).

    Raises:
        CheckpointWriteError: a file could not be written (a full disk, ...); the
            previous checkpoints are intact and the partial one keeps its temporary name.
    """
    root = Path(root)
    step = learner.global_step
    final = root / f"step-{step:09d}"
    tmp = root / f".step-{step:09d}.tmp"
    if learner.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".step-*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()
    try:
        learner.engine.save_checkpoint(str(tmp), tag="ds", save_latest=False)
        torch.save(_rng_state(), tmp / f"rng-rank{learner.rank}.pt")
        _fsync_tree(tmp)  # every rank flushes what it wrote
    # torch.save reports a short write (a full disk) as a RuntimeError of its zip
    # writer ("unexpected pos"), not as ENOSPC: name the place and the free space.
    except (OSError, RuntimeError) as exc:
        free_mib = shutil.disk_usage(tmp).free / 2**20
        raise CheckpointWriteError(f"cannot write checkpoint {tmp} ({free_mib:.1f} MiB free there): {exc}") from exc
    barrier()
    if learner.rank == 0:
        body = {"step": step, "world_size": learner.world_size, "state": state}
        for name, data in (files or {}).items():
            _write_synced(tmp / name, data)
        _write_synced(tmp / "state.json", json.dumps(body, indent=2, sort_keys=True).encode())
        if final.exists():  # re-saving the same step replaces it
            _remove(final)
        _publish(tmp, final)
        _retain(root, learner.config.keep_checkpoints)
    barrier()
    return final


def load_checkpoint(learner: Learner, root: str | Path) -> dict[str, Any] | None:
    """Restore the newest complete checkpoint under ``root`` into ``learner``.

    Returns the caller's ``state`` saved with it, or None when there is none (a fresh
    run). Restores model, optimizer, scheduler, step and - with the same world size -
    each rank's RNG states.
    """
    path = latest_checkpoint(root)
    if path is None:
        return None
    learner.engine.load_checkpoint(str(path), tag="ds", load_optimizer_states=True, load_lr_scheduler_states=True)
    body = json.loads((path / "state.json").read_text())
    rng = path / f"rng-rank{learner.rank}.pt"
    if body["world_size"] == learner.world_size and rng.is_file():
        _set_rng_state(torch.load(rng, weights_only=False))
    barrier()
    return body["state"]


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _publish(tmp: Path, final: Path) -> None:
    """The commit point: one rename, then the parent directory is fsynced."""
    tmp.rename(final)
    fsync_path(final.parent)


def _retain(root: Path, keep: int) -> None:
    steps = sorted((int(m[1]), p) for p in root.iterdir() if (m := _STEP_RE.match(p.name)))
    for _, path in steps[:-keep]:
        _remove(path)


def _remove(path: Path) -> None:
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
    path.rename(trash)  # atomic: the name no longer looks like a checkpoint
    shutil.rmtree(trash, ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_tree(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            fsync_path(Path(dirpath, name))
        fsync_path(Path(dirpath))
