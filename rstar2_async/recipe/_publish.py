"""Step 7 of an RL step: the learner's new weights onto every server.

:func:`publish` exports the weights to the run's ``weights/vNNNNNN`` directory
(``--resume``, a restarted server and a server a broadcast failed on load it) and has
the weight sync move every server to them:

- **disk** transport: rank 0 writes the export (gathered bucket by bucket and
  written as it comes), then every server reads it.
- **broadcast** transport: the weights are gathered into rank 0's memory once; the
  broadcast sends them *while* the same tensors are written to the directory, and
  only a server that must load from disk waits for it.  The servers' pause then
  covers the broadcast alone, and the learner waits for the longer of the write
  and the broadcast instead of their sum.  Cost: one CPU copy of the weights on
  rank 0 until both end (28 GB for a 14B model in bf16).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from backends import BroadcastTransport, PendingWeights, SyncReport, WeightSync

from ..errors import TrainError
from ._stack import RolloutStack

if TYPE_CHECKING:
    from ..learn import LearnerDriver, PendingExport

__all__ = ["load_servers", "publish"]

Learn = Callable[..., Awaitable[Any]]
"""``learn(fn, *args)``: the trainer's way to run learner work off the event loop,
one call at a time."""


async def publish(stack: RolloutStack, learn: Learn, driver: LearnerDriver, out: Path, version: int) -> SyncReport:
    """Export the learner's current weights to ``out`` and move every server in
    rotation to them as ``version``; returns the sync's report.

    Raises:
        TrainError: the stack cannot load weights (chat endpoints).
        WeightSyncError: no server took the weights.
        OSError: the export could not be written (nothing is published at ``out``).
    """
    sync = _weight_sync(stack)
    if isinstance(sync.transport, BroadcastTransport):
        pending = await learn(driver.gather_export)
        weights = PendingWeights(pending.tensors, out)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_write, pending, out, weights)
            report = await sync.sync(weights, version)
    else:
        await learn(driver.export, out)
        report = await sync.sync(out, version)
    if stack.fleet is not None:
        stack.fleet.set_model(str(out))  # a restarted server comes back with these
    return report


async def load_servers(stack: RolloutStack, weights: Path, version: int) -> None:
    """Move every server to an export already on disk (a resumed run's)."""
    await _weight_sync(stack).sync(weights, version)
    if stack.fleet is not None:
        stack.fleet.set_model(str(weights))


async def _write(pending: PendingExport, out: Path, weights: PendingWeights) -> None:
    # Plain file I/O on copies the learner no longer touches: no learner lock.
    error: BaseException | None = None
    try:
        await anyio.to_thread.run_sync(pending.write, out)
    except BaseException as exc:
        error = exc
        raise
    finally:
        weights.written(error)  # wakes the servers that wait to load from disk


def _weight_sync(stack: RolloutStack) -> WeightSync:
    if stack.sync is None:
        raise TrainError("training needs token mode (inference.mode = \"tokens\"): chat endpoints cannot load weights")
    return stack.sync
