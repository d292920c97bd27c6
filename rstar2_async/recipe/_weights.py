"""What the trainer publishes with each exported weights directory.

Every export (``RUN/weights/vNNNNNN``) gets the rollout settings it was trained with
(:data:`rstar2_async.config.ROLLOUT_RECORD`), so ``rstar2 eval --model DIR``
evaluates it as it was trained, and ``RUN/weights/latest`` points at the newest
one: a path that names the run's final weights whatever its step count (older
versions are deleted once the servers hold the new ones).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from ..config import RolloutConfig, write_rollout_record

__all__ = ["LATEST_WEIGHTS", "publish_weights"]

LATEST_WEIGHTS: Final = "latest"
"""The link beside the versions, relative (the run directory can move)."""


def publish_weights(weights_dir: Path, rollout: RolloutConfig) -> None:
    """Record ``rollout`` in ``weights_dir`` and point ``latest`` at it.  Both
    atomic: a reader sees the old link or the new one, never none.

    Raises:
        OSError: the record or the link cannot be written.
    """
    write_rollout_record(weights_dir, rollout)
    link = weights_dir.parent / LATEST_WEIGHTS
    tmp = link.with_name(f".{LATEST_WEIGHTS}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(weights_dir.name)
    os.replace(tmp, link)
