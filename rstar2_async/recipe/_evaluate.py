"""Evaluation through the rollout engine: avg@n, pass@n, maj@n, lengths, tool use.

Errors are not answers: a sample that ended as ``error`` (a request the server
refused, a server that stayed down) is counted apart, and every metric is computed
over the samples that ran.

Every sample is appended to ``samples.jsonl`` the moment it finishes, so an
interrupted evaluation resumes without redoing a finished sample; a line cut short
by a crash is dropped on resume.
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Any
from pathlib import Path

import msgspec

from ..config import SamplingConfig, TrainConfig
from ..reward import GradingMode, answers_match, final_answer
from ..rollout import RolloutEngine, ShardedEngine
from ..types import Group, Problem, Trajectory
from ._data import load_problems

__all__ = ["EvalSummary", "evaluate", "evaluate_run", "load_finished", "majority_correct", "summarize"]


class EvalSummary(msgspec.Struct, frozen=True):
    """What ``rstar2 eval`` prints and writes to ``summary.json``."""

    dataset: str
    problems: int
    n: int
    temperature: float
    top_p: float
    avg_at_n: float
    """Mean reward over the samples that ran (avg@n, "pass@1 averaged over n
    samples"); errored samples are left out (``errors``); NaN when none ran."""
    pass_at_n: float
    """Share of problems with at least one correct sample, over the problems with
    a sample that ran."""
    maj_at_n: float
    """Share of problems whose most frequent answer (answers grouped by the grader's
    equivalence) is correct, over the same problems."""
    mean_response_tokens: float
    mean_turns: float
    mean_tool_calls: float
    mean_tool_errors: float
    finish_reasons: dict[str, int]
    resumed_samples: int = 0
    wall_s: float = 0.0
    errors: int = 0
    """Samples that ended as ``error``: not answers, so in no metric above."""
    first_error: str = ""
    """The first errored sample's error (what went wrong, for the message)."""


_trajectory_decoder = msgspec.json.Decoder(Trajectory)
_encoder = msgspec.json.Encoder()


def load_finished(path: Path, problems: Sequence[Problem]) -> dict[tuple[str, int], Trajectory]:
    """Samples already in ``path`` for these problems.  A trailing partial line (the
    process died mid-write) is cut off the file so that appends stay line-aligned.
    An errored sample is not finished: running again redoes it (its new line,
    later in the file, is the one read from then on)."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) != len(data):
        path.write_bytes(complete)
    wanted = {p.id for p in problems}
    finished: dict[tuple[str, int], Trajectory] = {}
    for line in complete.splitlines():
        t = _trajectory_decoder.decode(line)
        if t.problem_id in wanted and t.finish_reason != "error":
            finished[t.problem_id, t.sample_index] = t
    return finished


def majority_correct(group: Group, *, mode: GradingMode = "strict") -> bool:
    """Whether the largest group of equal answers in the group is a correct one.

    Answers are grouped by the grader's equivalence, not by their strings: every
    answer the grader rewarded equals the gold answer, so those are one group (math-
    verify's equivalences included); the others join the first group whose answer
    `answers_match` says they equal (``0.5`` and ``\\frac{1}{2}``, ``1,5`` and ``1.5``).
    A tie goes to the group answered first.  ``mode`` must be the grading mode the rewards
    came from: a lenient grade of an unboxed answer is a vote only if the answer is
    read the same lenient way.
    """
    right: list[int] = []  # indices of the rewarded answers: one group
    others: list[tuple[str, list[int]]] = []  # (first answer, indices)
    for i, t in enumerate(group.trajectories):
        answer = final_answer(t.model_text, group.problem.answer, mode=mode)
        if answer is None:
            continue
        if (t.reward or 0.0) > 0.5:
            right.append(i)
            continue
        for first, votes in others:
            if answers_match(answer, first, mode=mode):
                votes.append(i)
                break
        else:
            others.append((answer, [i]))
    groups = [(True, right)] if right else []
    groups += [(False, votes) for _, votes in others]
    if not groups:
        return False
    # the largest group; on a tie, the one answered first
    is_right, _ = max(groups, key=lambda g: (len(g[1]), -g[1][0]))
    return is_right


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else math.nan


def summarize(
    dataset: str, groups: Sequence[Group], *, n: int, temperature: float, top_p: float, mode: GradingMode = "strict"
) -> EvalSummary:
    """The metrics of ``groups``, over the samples that did not end as ``error``;
    ``mode``: the grading mode of their rewards (maj@n reads answers the same way)."""
    everything = [t for g in groups for t in g.trajectories]
    errored = [t for t in everything if t.finish_reason == "error"]
    ran = [Group(g.problem, kept) for g in groups if (kept := [t for t in g.trajectories if t.finish_reason != "error"])]
    samples = [t for g in ran for t in g.trajectories]
    return EvalSummary(
        dataset=dataset,
        problems=len(groups),
        n=n,
        temperature=temperature,
        top_p=top_p,
        avg_at_n=_mean((t.reward or 0.0) for t in samples),
        pass_at_n=_mean(float(max(g.rewards) > 0.5) for g in ran),
        maj_at_n=_mean(float(majority_correct(g, mode=mode)) for g in ran),
        mean_response_tokens=_mean(sum(turn.num_generated for turn in t.turns) for t in samples),
        mean_turns=_mean(t.num_turns for t in samples),
        mean_tool_calls=_mean(t.num_tool_calls for t in samples),
        mean_tool_errors=_mean(t.num_tool_errors for t in samples),
        finish_reasons=dict(collections.Counter(t.finish_reason for t in everything)),
        errors=len(errored),
        first_error=errored[0].error if errored else "",
    )


async def evaluate(
    engine: RolloutEngine | ShardedEngine,
    dataset: str,
    problems: Sequence[Problem],
    *,
    n: int,
    out_dir: Path,
    sampling: SamplingConfig,
    mode: GradingMode,
) -> EvalSummary:
    """Run ``n`` samples per problem, resuming from ``out_dir/samples.jsonl``, and
    write ``out_dir/summary.json``.  The engine must grade (a reward).

    Args:
        sampling: this evaluation's sampling (passed to the engine, and written into
            the summary).
        mode: how the engine's grader reads answers (maj@n reads them the same way).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    samples_path = out_dir / "samples.jsonl"
    finished = load_finished(samples_path, problems)
    t0 = time.monotonic()
    with samples_path.open("ab") as f:

        def append(t: Trajectory) -> None:
            f.write(_encoder.encode(t) + b"\n")
            f.flush()

        groups = await engine.run(problems, n, sampling=sampling, finished=finished, on_trajectory=append)
    summary = msgspec.structs.replace(
        summarize(dataset, groups, n=n, temperature=sampling.temperature, top_p=sampling.top_p, mode=mode),
        resumed_samples=len(finished),
        wall_s=time.monotonic() - t0,
    )
    (out_dir / "summary.json").write_bytes(msgspec.json.format(_encoder.encode(summary)) + b"\n")
    return summary


async def evaluate_run(
    engine: RolloutEngine | ShardedEngine, config: TrainConfig, rl_step: int, label: str, out: Path
) -> dict[str, Any]:
    """A training run's evaluation (``[eval]``): each set into
    ``out/step-NNNNNN-<label>/<set>``; returns its record, ``{"rl_step", "stage",
    "<set>": avg@n, ..., "accuracy": their mean}``."""
    section = config.eval
    record: dict[str, Any] = {"rl_step": rl_step, "stage": label}
    for name in section.data:
        problems = load_problems(name, limit=section.limit, fields=config.data)
        stem = Path(name).stem
        summary = await evaluate(
            engine, stem, problems, n=section.n, out_dir=out / f"step-{rl_step:06d}-{label}" / stem,
            sampling=section.sampling, mode=config.reward.grading or "strict",  # the grader's own default
        )  # fmt: skip
        record[stem] = summary.avg_at_n
    scores = [v for k, v in record.items() if k not in ("rl_step", "stage")]
    record["accuracy"] = sum(scores) / len(scores)
    return record
