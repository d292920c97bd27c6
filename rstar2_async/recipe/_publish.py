"""Step 7 of an RL step: the learner's new weights onto every server.

:meth:`Publisher.publish` exports the weights to the run's ``weights/vNNNNNN``
directory (``--resume``, a restarted server and a server a broadcast failed on load
it) and has the weight sync move every server to them:

- **disk** transport: rank 0 writes the export (gathered bucket by bucket and
  written as it comes), then every server reads it.
- **broadcast** transport: the weights are gathered into rank 0's memory once and
  broadcast from there, while a background task writes the same tensors to the
  directory; ``publish`` returns once the servers hold the weights, so the next
  rollout and update do not wait for the disk.  Only what needs the directory waits
  for it: a server that must load from disk, the next export (one at a time: the
  in-memory copy is rank 0's memory, 28 GB for a 14B model in bf16), a checkpoint
  (:meth:`Publisher.written`: the checkpoint names the directory) and the end of
  the run.

A failed write is fatal (the run stops, like a failed export): it surfaces from
the publisher's task group.

With a :class:`~._sync_check.SyncCheck`, each sync is verified against the learner's
log-probs of a probe before the servers sample from it; :func:`check_servers` does
the same at start-up.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, final

import anyio
import anyio.abc
import anyio.to_thread

from backends import BroadcastTransport, PendingWeights, Probe, SyncReport, WeightSync, WeightSyncError

from ..config import RolloutConfig
from ..errors import TrainError
from ._stack import RolloutStack
from ._sync_check import SyncCheck, report_sync
from ._weights import publish_weights

if TYPE_CHECKING:
    from ..learn import LearnerDriver, PendingExport

__all__ = ["Publisher", "check_servers"]

Learn = Callable[..., Awaitable[Any]]
"""``learn(fn, *args)``: the trainer's way to run learner work off the event loop,
one call at a time."""


@final
class Publisher:
    """Step 7 for one run.  Use as ``async with Publisher(...)``: the context owns the
    background writes and waits for the last one on exit.

    Args:
        stack: the rollout stack whose weight sync (and fleet) get the weights.
        learn: the trainer's serialised learner call.
        driver: the learner (every rank's, through the driver).
        current: the directory the servers hold now; an export that replaces one
            under the same parent deletes it once the new one is on disk.
        check: verifies each sync against the learner's probe (None: unverified).
    """

    def __init__(
        self, stack: RolloutStack, learn: Learn, driver: LearnerDriver, current: Path | None = None,
        check: SyncCheck | None = None,
    ) -> None:  # fmt: skip
        self.sync = _weight_sync(stack)
        self.stack = stack
        self.learn = learn
        self.driver = driver
        self.current = current
        self.check = check
        self.probe_diff_max = math.nan
        """The last sync's largest probe difference over the servers that took it
        (the step's ``sync/probe_diff_max``; NaN when unverified)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._written = anyio.Event()
        self._written.set()  # nothing being written

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        return await self._tg.__aexit__(exc_type, exc, tb)

    async def publish(self, out: Path, version: int, rollout: RolloutConfig | None = None) -> SyncReport:
        """Export the learner's current weights to ``out`` and move every server in
        rotation to them as ``version``; returns once the servers hold them (with the
        broadcast transport, possibly before ``out`` is written: see the module doc).
        Once ``out`` is on disk it holds ``rollout`` (the settings the weights were
        trained with: ``rstar2 eval --model`` runs them) and a ``latest`` link beside
        it names it (not for ``rollout=None``: an export outside a run).

        Raises:
            WeightSyncError: no server took the weights (or passed the probe).
            OSError: the export could not be written (disk transport; with broadcast
                the error surfaces from the context instead).
        """
        assert self._tg is not None, "use Publisher as an async context manager"
        await self.written()
        if not isinstance(self.sync.transport, BroadcastTransport):
            await self.learn(self.driver.export, out)
            report = await self.sync.sync(out, version, await self._probe())
            await self._published(out, rollout)
        else:
            pending = await self.learn(self.driver.gather_export)
            probe = await self._probe()
            weights = PendingWeights(pending.tensors, out)
            self._written = anyio.Event()
            self._tg.start_soon(self._write, pending, out, rollout, weights, self._written)
            report = await self.sync.sync(weights, version, probe)
        self.probe_diff_max = report.probe_diff_max
        report_sync(report)
        return report

    async def _probe(self) -> Probe | None:
        """The learner's probe of the weights it just exported (None: unverified)."""
        return await self.check.probe() if self.check is not None else None

    async def written(self) -> None:
        """Wait until the last export is on disk (a checkpoint names it)."""
        await self._written.wait()

    async def _write(
        self, pending: PendingExport, out: Path, rollout: RolloutConfig | None, weights: PendingWeights, done: anyio.Event
    ) -> None:
        error: BaseException | None = None
        try:
            # Plain file I/O on copies the learner no longer touches: no learner lock.
            await anyio.to_thread.run_sync(pending.write, out)
            await self._published(out, rollout)
        except BaseException as exc:
            error = exc
            raise
        finally:
            weights.written(error)  # wakes the servers that wait to load from disk
            done.set()

    async def _published(self, out: Path, rollout: RolloutConfig | None) -> None:
        """``out`` is on disk and the servers hold it: its settings and ``latest`` link,
        and the export it replaces deleted (gigabytes: in a worker thread, so the
        rollout running meanwhile keeps its event loop)."""
        if self.stack.fleet is not None:
            self.stack.fleet.set_model(str(out))  # a restarted server comes back with these
        previous, self.current = self.current, out
        stale = previous is not None and previous != out and previous.parent == out.parent
        await anyio.to_thread.run_sync(_finish_export, out, rollout, previous if stale else None)


def _finish_export(out: Path, rollout: RolloutConfig | None, previous: Path | None) -> None:
    if rollout is not None:
        publish_weights(out, rollout)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)  # the servers hold the new ones now


async def check_servers(stack: RolloutStack, weights: Path, version: int, check: SyncCheck) -> None:
    """Before the first rollout: load ``weights`` (what the learner holds now) into
    every server in place as ``version``, and verify them.  Unverified
    (``weight_sync.verify = false``), only a resumed run (``version > 0``) loads: its
    servers may hold older weights; a fresh run's were launched on these or hold them.

    Raises:
        TrainError: no server passed (each one's reason in the message); nothing has
            been trained.
    """
    sync = _weight_sync(stack)
    probe = await check.probe()
    if probe is None and not version:
        return
    try:
        report = await sync.sync(weights, version, probe)
    except WeightSyncError as exc:
        raise TrainError(
            f"refusing to train: the servers do not serve {weights} as the learner computes it: {exc}. "
            "Nothing was trained (weight_sync.verify = false trains regardless)"
        ) from exc
    report_sync(report)
    if stack.fleet is not None:
        stack.fleet.set_model(str(weights))


def _weight_sync(stack: RolloutStack) -> WeightSync:
    if stack.sync is None:
        raise TrainError("training needs token mode (inference.mode = \"tokens\"): chat endpoints cannot load weights")
    return stack.sync
