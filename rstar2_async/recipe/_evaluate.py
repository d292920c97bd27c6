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
import functools
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ..config import SamplingConfig, TrainConfig
from ..reward import GradingMode, Reward, answers_match, final_answer, score
from ..rollout import RolloutEngine, ShardedEngine
from ..types import Group, Problem, Trajectory
from ._data import load_problems

__all__ = ["EvalSummary", "evaluate", "evaluate_run", "load_finished", "majority_correct", "regrade", "summarize"]


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
    maj_at_n_capped: int = 0
    """Problems whose maj@n vote ran out of the grader's comparisons (`EQUAL_BUDGET`):
    some wrong answers were counted apart, which can only favour the right one."""


_trajectory_decoder = msgspec.json.Decoder(Trajectory)
_encoder = msgspec.json.Encoder()


def load_finished(path: Path, problems: Sequence[Problem]) -> dict[tuple[str, int], Trajectory]:
    """Samples already in ``path`` for these problems.  A trailing partial line (the
    process died mid-write) is cut off the file so that appends stay line-aligned.
    An errored sample is not finished: running again redoes it (its new line,
    later in the file, is the one read from then on)."""
    if not path.exists():
        return {}
    wanted = {p.id for p in problems}
    finished: dict[tuple[str, int], Trajectory] = {}
    for line in _complete_lines(path):
        t = _trajectory_decoder.decode(line)
        if t.problem_id in wanted and t.finish_reason != "error":
            finished[t.problem_id, t.sample_index] = t
    return finished


def _complete_lines(path: Path) -> list[bytes]:
    """The lines of ``path``, whose trailing partial line (the process died
    mid-write) is cut off the file so that appends stay line-aligned."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) != len(data):
        path.write_bytes(complete)
    return complete.splitlines()


def majority_correct(group: Group, *, mode: GradingMode = "strict", budget: int | None = None) -> bool:
    """Whether the largest group of equal answers in the group is a correct one.

    Answers are grouped by the grader's equivalence, not by their strings: every
    answer the grader rewarded equals the gold answer, so those are one group (math-
    verify's equivalences included); the others join the first group whose answer
    they equal, by `answers_match` (``0.5`` and ``\\frac{1}{2}``, ``1,5`` and ``1.5``)
    or, where that could decide the vote, by the grader itself (math-verify's
    ``\\sqrt{8}`` and ``2\\sqrt{2}``).  A tie goes to the group answered first.  ``mode``
    must be the grading mode the rewards came from: a lenient grade of an unboxed
    answer is a vote only if the answer is read the same lenient way.

    The grader compares at most ``budget`` pairs of wrong answers per problem
    (default `EQUAL_BUDGET`; 0: `answers_match` alone); a wrong answer past it counts
    apart (`vote` says so).  Blocking (the grader's worker, `score`): call it off the
    event loop.
    """
    return vote(group, mode=mode, budget=budget)[0]


def vote(group: Group, *, mode: GradingMode = "strict", budget: int | None = None) -> tuple[bool, bool]:
    """(`majority_correct`, whether the grader's budget of comparisons ran out)."""
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
    # Merging wrong groups can only take the vote from the right one: asked only when
    # the right group wins as they stand and enough wrong answers could outvote it.
    if not (right and _right_wins(right, others)):
        return False, False
    if sum(len(votes) for _, votes in others) < len(right):
        return True, False
    merged, capped = _merge_equal(others, mode, EQUAL_BUDGET if budget is None else budget)
    return _right_wins(right, merged), capped


def _right_wins(right: list[int], others: list[tuple[str, list[int]]]) -> bool:
    """Whether the right group is the largest; on a tie, the one answered first."""
    groups = [(True, right)] + [(False, votes) for _, votes in others]
    is_right, _ = max(groups, key=lambda g: (len(g[1]), -g[1][0]))
    return is_right


def _merge_equal(
    others: list[tuple[str, list[int]]], mode: GradingMode, budget: int
) -> tuple[list[tuple[str, list[int]]], bool]:
    """`others` with the groups the grader finds equal merged (the first one's answer
    stands for each; `answers_match` already kept apart what it could tell), and
    whether a comparison was left unasked for want of ``budget``."""
    merged: list[tuple[str, list[int]]] = []
    asked, skipped = 0, False
    for answer, votes in others:
        home = None
        for first, kept in merged:
            if asked == budget:
                skipped = True
                break
            asked += 1
            if score(f"\\boxed{{{answer}}}", first, timeout=_EQUAL_TIMEOUT_S, mode=mode) == 1.0:
                home = kept
                break
        if home is None:
            merged.append((answer, list(votes)))
        else:
            home.extend(votes)
    return [(first, sorted(votes)) for first, votes in merged], skipped


EQUAL_BUDGET = 48
"""Comparisons of two wrong answers by the grader per problem (math-verify, ~5-50 ms
each): a problem whose samples all differ would need n(n-1)/2.  Deterministic, so a
rerun gives the same maj@n."""
_EQUAL_TIMEOUT_S = 5.0
"""A comparison of two wrong answers that overruns this counts them as different."""


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else math.nan


def summarize(
    dataset: str, groups: Sequence[Group], *, n: int, temperature: float, top_p: float, mode: GradingMode = "strict"
) -> EvalSummary:
    """The metrics of ``groups``, over the samples that did not end as ``error``;
    ``mode``: the grading mode of their rewards (maj@n reads answers the same way).
    Blocking, as `majority_correct` is."""
    everything = [t for g in groups for t in g.trajectories]
    errored = [t for t in everything if t.finish_reason == "error"]
    ran = [Group(g.problem, kept) for g in groups if (kept := [t for t in g.trajectories if t.finish_reason != "error"])]
    samples = [t for g in ran for t in g.trajectories]
    votes = [vote(g, mode=mode) for g in ran]
    return EvalSummary(
        dataset=dataset,
        problems=len(groups),
        n=n,
        temperature=temperature,
        top_p=top_p,
        avg_at_n=_mean((t.reward or 0.0) for t in samples),
        pass_at_n=_mean(float(max(g.rewards) > 0.5) for g in ran),
        maj_at_n=_mean(float(right) for right, _ in votes),
        maj_at_n_capped=sum(capped for _, capped in votes),
        mean_response_tokens=_mean(sum(turn.num_generated for turn in t.turns) for t in samples),
        mean_turns=_mean(t.num_turns for t in samples),
        mean_tool_calls=_mean(t.num_tool_calls for t in samples),
        mean_tool_errors=_mean(t.num_tool_errors for t in samples),
        finish_reasons=dict(collections.Counter(t.finish_reason for t in everything)),
        errors=len(errored),
        first_error=errored[0].error if errored else "",
    )


async def _summarize_off_loop(
    dataset: str, groups: Sequence[Group], n: int, sampling: SamplingConfig, mode: GradingMode
) -> EvalSummary:
    """`summarize` in a worker thread: maj@n may wait on the grader's worker."""
    metrics = functools.partial(
        summarize, dataset, groups, n=n, temperature=sampling.temperature, top_p=sampling.top_p, mode=mode
    )
    return await anyio.to_thread.run_sync(metrics)


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
        await _summarize_off_loop(dataset, groups, n, sampling, mode),
        resumed_samples=len(finished),
        wall_s=time.monotonic() - t0,
    )
    (out_dir / "summary.json").write_bytes(msgspec.json.format(_encoder.encode(summary)) + b"\n")
    return summary


async def regrade(
    dataset: str,
    problems: Sequence[Problem],
    *,
    out_dir: Path,
    reward: Reward,
    sampling: SamplingConfig,
    mode: GradingMode,
) -> tuple[EvalSummary, int]:
    """Grade the samples of ``problems`` in ``out_dir/samples.jsonl`` again with
    ``reward`` (another grading mode or reward function), rewrite the file with their
    new rewards, and write ``out_dir/summary.json``.  Nothing is sampled; errored
    samples stay ungraded.  Returns the summary (``n``: the most samples a problem
    has) and how many samples were stored without turn spans (by a version before
    them): those are graded from their whole transcript, tool output included.
    """
    path = out_dir / "samples.jsonl"
    stored = [_trajectory_decoder.decode(line) for line in _complete_lines(path)]
    wanted = {p.id: p for p in problems}
    todo = [i for i, t in enumerate(stored) if t.problem_id in wanted and not t.infra_failed]
    unspanned = sum(any(turn.text_span is None for turn in stored[i].turns) for i in todo)
    limiter = anyio.CapacityLimiter(_REGRADING)
    t0 = time.monotonic()

    async def grade(i: int) -> None:
        async with limiter:
            t = stored[i]
            stored[i] = msgspec.structs.replace(t, reward=await reward.reward(t.model_text, wanted[t.problem_id]))

    async with anyio.create_task_group() as tg:
        for i in todo:
            tg.start_soon(grade, i)
    fresh = path.with_name(path.name + ".regraded")
    with fresh.open("wb") as f:
        for t in stored:
            f.write(_encoder.encode(t) + b"\n")
    fresh.replace(path)  # whole or not at all
    latest = {(t.problem_id, t.sample_index): t for t in stored if t.problem_id in wanted}  # a redone line wins
    by_problem: dict[str, list[Trajectory]] = collections.defaultdict(list)
    for (problem_id, _), t in sorted(latest.items()):
        by_problem[problem_id].append(t)
    groups = [Group(p, by_problem[p.id]) for p in problems if p.id in by_problem]
    n = max((len(g.trajectories) for g in groups), default=0)
    summary = await _summarize_off_loop(dataset, groups, n, sampling, mode)
    summary = msgspec.structs.replace(summary, wall_s=time.monotonic() - t0)
    (out_dir / "summary.json").write_bytes(msgspec.json.format(_encoder.encode(summary)) + b"\n")
    return summary, unspanned


_REGRADING = 256
"""Samples graded at once by `regrade` (the reward bounds its own workers)."""


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
