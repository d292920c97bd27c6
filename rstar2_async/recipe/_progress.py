"""Progress: a live bar for long rollouts (fed by the engine's statistics snapshots)
and for SFT steps on a terminal; one line a step when stderr is not a terminal (a run
sent to a file or a scheduler's log says how it goes before its summary)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

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

__all__ = ["REFRESH_S", "StepBar", "print_step", "show_progress"]

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


def print_step(rl_step: int, stage: str, step: int, steps: int, values: Mapping[str, Any]) -> None:
    """One line for an RL step's record, on stderr when it is not a terminal (on a
    terminal the rollout's bar shows the step)."""
    if sys.stderr.isatty():
        return
    v = values.get
    line = (
        f"rstar2 train: step {rl_step} ({stage} {step}/{steps}): reward {v('rollout/reward_mean', float('nan')):.3f} "
        f"over {v('rollout/trajectories', 0)} trajectories, {v('roc/groups_kept', 0)} groups trained, "
        f"{v('rollout/response_tokens_mean', 0.0):.0f} tokens a response | rollout {v('time/rollout_s', 0.0):.1f} s, "
        f"update {v('time/update_s', 0.0):.1f} s, sync {v('time/sync_s', 0.0):.1f} s"
    )
    if "learner/logprob_diff_mean" in values:
        line += f" | logprob diff {values['learner/logprob_diff_mean']:.2e}"
    print(line, file=sys.stderr, flush=True)


class StepBar:
    """A bar over numbered steps (SFT), advanced by the caller; when stderr is not a
    terminal, a line a step instead.  Use as a context manager."""

    def __init__(self, description: str, total: int, done: int = 0) -> None:
        self._progress = (
            Progress(*_STEP_COLUMNS, transient=False) if sys.stderr.isatty() else None
        )
        self._args = (description, total, done)
        self._done = done

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
        self._done += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, info=info)
        else:
            description, total, _ = self._args
            print(f"rstar2 train: {description} {self._done}/{total}: {info}", file=sys.stderr, flush=True)


_STEP_COLUMNS = (
    TextColumn("[bold]{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TextColumn("{task.fields[info]}"),
    TimeElapsedColumn(),
    TimeRemainingColumn(),
)
