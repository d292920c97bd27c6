"""A live progress bar for long rollouts, fed by the engine's statistics snapshots."""

from __future__ import annotations

import sys

import anyio
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..rollout import RolloutEngine, ShardedEngine

__all__ = ["REFRESH_S", "StepBar", "show_progress"]

REFRESH_S = 0.5
"""Poll interval: frequent enough to look live, rare enough to cost nothing."""


async def show_progress(engine: RolloutEngine | ShardedEngine, total: int, description: str, *, done_before: int = 0) -> None:
    """Render a progress bar until cancelled.  Run it in the task group that runs the
    rollout and cancel it when the rollout ends.  Silent when stderr is not a
    terminal (CI logs stay readable)."""
    if not sys.stderr.isatty():
        await anyio.sleep_forever()
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rates]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total, completed=done_before, rates="")
        while True:
            s = engine.statistics()
            elapsed = max(s.elapsed_s, 1e-9)
            rates = (
                f"in flight {s.in_flight} | {s.generated_tokens / elapsed:,.0f} tok/s | "
                f"{s.tool_calls / elapsed:,.1f} calls/s | tool errors {s.tool_errors}"
            )
            bar.update(task, completed=done_before + s.trajectories_finished, rates=rates)
            await anyio.sleep(REFRESH_S)


class StepBar:
    """A bar over numbered steps (SFT), advanced by the caller; silent when stderr is
    not a terminal.  Use as a context manager."""

    def __init__(self, description: str, total: int, done: int = 0) -> None:
        self._progress = (
            Progress(*_STEP_COLUMNS, transient=False) if sys.stderr.isatty() else None
        )
        self._args = (description, total, done)

    def __enter__(self) -> StepBar:
        if self._progress is not None:
            description, total, done = self._args
            self._progress.__enter__()
            self._task = self._progress.add_task(description, total=total, completed=done, info="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def advance(self, info: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, info=info)


_STEP_COLUMNS = (
    TextColumn("[bold]{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TextColumn("{task.fields[info]}"),
    TimeElapsedColumn(),
    TimeRemainingColumn(),
)
