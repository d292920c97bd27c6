"""Training metrics: one JSON line per step, TensorBoard scalars, and PNG curves.

``metrics.jsonl`` is the source of truth (append-only, one flat object per step);
TensorBoard and the plots are views of it.  On resume the file is kept and the
plots are redrawn from all of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, final

import msgspec

from ..types import Group, Trajectory

__all__ = ["PLOTS", "MetricsWriter", "plot_metrics", "read_metrics", "rollout_metrics", "write_samples"]

PLOTS: dict[str, tuple[str, ...]] = {
    "reward": ("rollout/reward_mean", "eval/accuracy"),
    "response_length": ("rollout/response_tokens_mean", "rollout/response_tokens_max"),
    "tools": ("rollout/tool_calls_mean", "rollout/tool_errors_mean"),
    "loss": ("learner/loss", "learner/clip_frac"),
    "timing": ("time/rollout_s", "time/update_s", "time/sync_s", "time/reward_s"),
    # training health (_health): the mismatch, the policy's entropy, where clipping acts, what RoC and the budget cut
    "mismatch": ("learner/logprob_diff_mean", "learner/logprob_diff_current_mean", "learner/logprob_diff_max"),
    "entropy": ("learner/entropy",),
    "importance": ("learner/tis_weight_mean", "learner/tis_capped_frac"),
    "clipping": ("learner/clip_frac_low", "learner/clip_frac_high", "learner/clip_frac_dual"),
    "shares": ("roc/all_equal_share", "rollout/finish_token_budget", "rollout/tool_error_rate", "rollout/infra_failed_rate"),
}
"""Which metrics share a figure (``plots/<name>.png``)."""


@final
class MetricsWriter:
    """Append per-step metrics to ``run_dir/metrics.jsonl`` and TensorBoard.

    Resource handling: a context manager; the JSONL line is flushed per step, so a
    killed run loses at most the step in progress.  TensorBoard is optional: when
    ``tensorboard`` is not importable only the JSONL is written.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "metrics.jsonl"
        self._file: Any = None
        self._tb: Any = None

    def __enter__(self) -> Self:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        except ImportError:  # the rollout-only install has no tensorboard
            self._tb = None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()

    def write(self, step: int, values: Mapping[str, float | int | str]) -> None:
        record = {"step": step, **values, "wall_time": time.time()}  # `rstar2 view` plots against it
        self._file.write(msgspec.json.encode(record) + b"\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [msgspec.json.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def plot_metrics(metrics_path: Path, out_dir: Path) -> list[Path]:
    """Draw ``PLOTS`` from the JSONL into PNG files; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training nodes
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, keys in PLOTS.items():
        series = {k: [(r["step"], r[k]) for r in records if isinstance(r.get(k), (int, float))] for k in keys}
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for key, points in series.items():
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(points) < 30 else None, label=key)
        ax.set_xlabel("step")
        ax.set_title(name.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def rollout_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """One step's rollout figures (``rollout/...``) over every trajectory it sampled,
    but those that stopped at an infrastructure failure (they say nothing of the
    model); ``rollout/infra_failed_rate`` is the share of attempts (rolled-again ones
    included) that met one, ``rollout/infra_failed`` their count."""
    every = [t for g in groups for t in g.trajectories]
    ts = [t for t in every if not t.infra_failed]
    failed = attempts = 0
    for t in every:
        f, a = t.infra_attempts
        failed, attempts = failed + f, attempts + a
    n = max(len(ts), 1)
    return {
        "rollout/infra_failed_rate": failed / max(attempts, 1),
        "rollout/infra_failed": failed,
        "rollout/reward_mean": sum(t.reward or 0.0 for t in ts) / n,
        "rollout/solve_rate": sum(max(g.rewards) > 0.5 for g in groups) / max(len(groups), 1),
        "rollout/response_tokens_mean": sum(len(t.response_ids) for t in ts) / n,
        "rollout/response_tokens_max": max((len(t.response_ids) for t in ts), default=0),
        "rollout/generated_tokens": sum(t.num_generated_tokens for t in ts),
        "rollout/turns_mean": sum(t.num_turns for t in ts) / n,
        "rollout/tool_calls_mean": sum(t.num_tool_calls for t in ts) / n,
        "rollout/tool_errors_mean": sum(t.num_tool_errors for t in ts) / n,
        "rollout/tool_error_rate": sum(t.num_tool_errors for t in ts) / max(sum(t.num_tool_calls for t in ts), 1),
        "rollout/trajectories": len(ts),
        "rollout/finish_answer": sum(t.finish_reason == "answer" for t in ts) / n,
        "rollout/finish_token_budget": sum(t.finish_reason == "token_budget" for t in ts) / n,  # hit the budget
    }


def write_samples(path: Path, groups: Sequence[Group], k: int, *, rl_step: int, stage: str) -> None:
    """Append the first trajectory of each of the first ``k`` groups to ``path``, for
    reading what the model does (``run.samples_per_step``)."""
    picked: list[Trajectory] = [g.trajectories[0] for g in groups[:k]]
    with path.open("ab") as f:
        for t in picked:
            record = {
                "rl_step": rl_step, "stage": stage, "problem_id": t.problem_id,
                "reward": t.reward, "finish_reason": t.finish_reason, "turns": t.num_turns,
                "tool_calls": t.num_tool_calls, "weight_version": t.weight_version, "response": t.response_text,
            }  # fmt: skip
            f.write(msgspec.json.encode(record) + b"\n")
