"""The trajectories of every RL step, on disk in the shape a person reads it.

``runs/<name>/trajectories/`` holds two append-only files (which trajectories, and
how many bytes a step at most: ``run.record_trajectories``, ``run.record_max_mb_per_step``):

    records.jsonl  one :class:`TrajectoryRecord` per line: the problem, the turns split
                   into the model's text and its tool calls with their results, the
                   reward, and what GRPO-RoC made of it (kept, or why dropped, and the
                   penalty)
    index.jsonl    one :class:`IndexRow` per record (written after it): the table's
                   columns and the record's byte range, so ``rstar2 view`` lists,
                   filters and sorts a run without reading the records themselves

A run killed mid-write leaves at most a partial last line; the recorder cuts a partial
index line when it opens (so appends stay line-aligned) and a reader stops at the last
whole line.  An index row is written only once its record is on disk.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

import msgspec

from ..config import RunConfig
from ..reward import extract_answer
from ..rollout import ChatTokenizer, render_tool_turn
from ..selection import RocDecision, trajectory_penalty
from ..types import Group, Problem, ToolResult, Trajectory, Turn

__all__ = ["IndexRow", "Recorded", "ToolRecord", "TrajectoryRecord", "TurnRecord", "index_row", "record_step", "to_record"]

RECORDS: Final = "records.jsonl"
INDEX: Final = "index.jsonl"


class ToolRecord(msgspec.Struct, frozen=True):
    """One tool call as the page shows it: the code (or the arguments as JSON) and its result."""

    name: str
    code: str
    status: str
    output: str
    duration_s: float


class TurnRecord(msgspec.Struct, frozen=True):
    """One assistant turn: what the model wrote (trained: its loss-mask ones are
    ``trained_tokens``) and the tool turn appended after it (masked out of the loss)."""

    text: str
    tools: list[ToolRecord]
    tool_text: str
    weight_version: int
    generated_tokens: int
    appended_tokens: int
    trained_tokens: int
    """Tokens of this turn (generated and appended) whose loss mask is 1."""


class TrajectoryRecord(msgspec.Struct, frozen=True):
    """A trajectory for reading (written to disk, read by ``rstar2 view`` and ``report``).

    ``roc`` is ``kept``, the reason GRPO-RoC dropped it (``all_equal_rewards``,
    ``negative_downsampled``, ``positive_penalty``, ``positive_sampled_out``,
    ``infra_failed``, ``infra_group``), or ``""``
    where no RoC ran (evaluations).  ``penalty`` is RoC's quality penalty
    (``selection.trajectory_penalty``), computed for every trajectory."""

    step: int
    stage: str
    problem_id: str
    sample_index: int
    problem: str
    gold: str
    answer: str
    reward: float
    finish_reason: str
    weight_version: int
    response_tokens: int
    turns: list[TurnRecord]
    roc: str
    penalty: float
    error: str = ""


class IndexRow(msgspec.Struct, frozen=True, array_like=True):
    """The table's columns of one record, and where the record lies in ``records.jsonl``."""

    offset: int
    length: int
    step: int
    problem_id: str
    sample_index: int
    reward: float
    turns: int
    tool_calls: int
    tool_errors: int
    response_tokens: int
    finish_reason: str
    weight_version: int
    roc: str
    penalty: float


Decode = Callable[[Sequence[int]], str]


def _tool_record(result: ToolResult) -> ToolRecord:
    call = result.call
    if call is None:
        name, code = "(undecodable)", ""
    else:
        code = call.arguments.get("code")
        name = call.name
        code = code if isinstance(code, str) else json.dumps(call.arguments, indent=1)
    return ToolRecord(name, code, result.status, result.output, result.duration_s)


def _split_text(text: str, turns: Sequence[Turn]) -> list[tuple[str, str]]:
    """(model text, tool turn text) per turn from the transcript alone (chat mode and
    evaluations keep no tokenizer): by the turns' text spans, or in a record without
    them, each tool turn found by its rendered results."""
    if turns and all(t.text_span for t in turns):
        spans = [t.text_span for t in turns if t.text_span]
        nexts = [a for a, _ in spans[1:]] + [len(text)]
        return [
            (text[a:b], text[b:e] if t.num_appended else "") for t, (a, b), e in zip(turns, spans, nexts, strict=True)
        ]
    out, pos = [], 0
    for i, turn in enumerate(turns):
        if not turn.tool_results or not turn.num_appended or i == len(turns) - 1:
            out.append((text[pos:] if i == len(turns) - 1 else "", ""))
            continue
        content = render_tool_turn([r.output for r in turn.tool_results])
        at = text.find(content, pos)
        if at < 0:
            out.append(("", ""))
            continue
        out.append((text[pos:at], content))
        pos = at + len(content)
    return out


def to_record(
    t: Trajectory,
    problem: Problem | None,
    *,
    step: int,
    stage: str,
    roc: str = "",
    decode: Decode | None = None,
) -> TrajectoryRecord:
    """A trajectory as a :class:`TrajectoryRecord`.  With ``decode`` (the tokenizer's)
    each turn's text is its own tokens decoded; without, the transcript is split."""
    mask = t.loss_mask
    texts: list[tuple[str, str]]
    if decode is not None and t.response_ids:
        ids = t.response_ids
        texts = []
        for turn in t.turns:
            end = turn.start + turn.num_generated
            texts.append((decode(ids[turn.start:end]), decode(ids[end:end + turn.num_appended])))
    else:
        texts = _split_text(t.response_text, t.turns)
    turns = [
        TurnRecord(
            text=text, tools=[_tool_record(r) for r in turn.tool_results], tool_text=tool_text,
            weight_version=turn.weight_version, generated_tokens=turn.num_generated,
            appended_tokens=turn.num_appended,
            trained_tokens=sum(mask[turn.start:turn.start + turn.num_generated + turn.num_appended]),
        )
        for turn, (text, tool_text) in zip(t.turns, texts)
    ]  # fmt: skip
    return TrajectoryRecord(
        step=step, stage=stage, problem_id=t.problem_id, sample_index=t.sample_index,
        problem=problem.problem if problem else "", gold=problem.answer if problem else "",
        answer=extract_answer(t.model_text) or "", reward=t.reward or 0.0, finish_reason=t.finish_reason,
        weight_version=t.weight_version, response_tokens=len(t.response_ids) or sum(x.num_generated for x in t.turns),
        turns=turns, roc=roc, penalty=trajectory_penalty(t), error=t.error,
    )  # fmt: skip


def index_row(r: TrajectoryRecord, offset: int, length: int) -> IndexRow:
    """The table row of record ``r``, written at ``offset`` in ``length`` bytes."""
    tools = [x for turn in r.turns for x in turn.tools]
    return IndexRow(
        offset, length, r.step, r.problem_id, r.sample_index, r.reward, len(r.turns), len(tools),
        sum(x.status != "ok" for x in tools), r.response_tokens, r.finish_reason, r.weight_version, r.roc, r.penalty,
    )  # fmt: skip


def roc_outcomes(decision: RocDecision) -> dict[int, str]:
    """sample index -> ``kept`` or the reason it was dropped."""
    out = dict.fromkeys(decision.kept, "kept")
    out.update({d.sample_index: d.reason for d in decision.dropped})
    return out


_encoder = msgspec.json.Encoder()

_TAIL_CHUNK: Final = 1 << 16
"""Bytes read at a time from the end of a file while looking for its last newline."""


def cut_partial_line(path: Path) -> None:
    """Drop a partial last line (the writer died mid-line) so appends stay line-aligned.
    Reads the file's tail only: the index grows with the run."""
    if not path.exists():
        return
    with path.open("r+b") as f:
        end = f.seek(0, 2)
        pos = end
        while pos > 0:
            start = max(pos - _TAIL_CHUNK, 0)
            f.seek(start)
            newline = f.read(pos - start).rfind(b"\n")
            if newline >= 0:
                pos = start + newline + 1
                break
            pos = start
        if pos != end:
            f.truncate(pos)


Which = Literal["all", "kept", "sample", "none"]
"""Which of a step's trajectories are recorded (``run.record_trajectories``)."""


class Recorded(NamedTuple):
    """What :func:`record_step` did with a step's trajectories."""

    written: int
    skipped: int
    """Chosen (by ``which``) but left out by the size cap."""


def record_step(
    out_dir: Path,
    step: int,
    stage: str,
    groups: Sequence[tuple[Group, RocDecision]],
    tokenizer: ChatTokenizer | None = None,
    *,
    which: Which = "all",
    samples: int = 0,
    max_bytes: int | None = None,
    seed: int = 0,
) -> Recorded:
    """Append one step's trajectories to ``out_dir`` (records, then their index rows),
    in the order of ``groups``.  Blocking file I/O: call it in a thread.

    Args:
        which: ``all``; ``kept`` (by RoC); ``sample``: ``samples`` drawn at random;
            ``none`` (nothing is written, not even the directory).
        max_bytes: cap on the records' bytes; past it, the chosen trajectories are
            taken in a random order until the next would not fit (so the cut favours
            no group), the rest skipped.  Memory: at most this much is held.
        seed: with ``step``, seeds the draws (a rerun of the step draws the same).
    """
    if which == "none":
        return Recorded(0, 0)
    rng = random.Random(f"{seed}/record/{step}")
    chosen: list[tuple[Trajectory, Problem, str]] = []
    for group, decision in groups:
        outcomes = roc_outcomes(decision)
        for t in group.trajectories:
            roc = outcomes.get(t.sample_index, "")
            if which != "kept" or roc == "kept":
                chosen.append((t, group.problem, roc))
    if which == "sample":
        chosen = [chosen[k] for k in sorted(rng.sample(range(len(chosen)), min(samples, len(chosen))))]
    order = list(range(len(chosen)))
    if max_bytes is not None:
        rng.shuffle(order)
    decode = tokenizer.decode if tokenizer is not None else None
    lines: dict[int, tuple[TrajectoryRecord, bytes]] = {}
    size = 0
    for k in order:
        t, problem, roc = chosen[k]
        r = to_record(t, problem, step=step, stage=stage, roc=roc, decode=decode)
        line = _encoder.encode(r)
        if max_bytes is not None and size + len(line) + 1 > max_bytes:
            break
        lines[k] = r, line
        size += len(line) + 1
    out_dir.mkdir(parents=True, exist_ok=True)
    cut_partial_line(out_dir / INDEX)
    rows = []
    with (out_dir / RECORDS).open("ab") as f:
        offset = f.tell()
        for k in sorted(lines):
            r, line = lines[k]
            f.write(line + b"\n")
            rows.append(_encoder.encode(index_row(r, offset, len(line))) + b"\n")
            offset += len(line) + 1
        f.flush()
    with (out_dir / INDEX).open("ab") as f:
        f.write(b"".join(rows))
    return Recorded(len(lines), len(chosen) - len(lines))


def record_options(run: RunConfig) -> dict[str, Any]:
    """:func:`record_step`'s keyword arguments from ``[run]``."""
    return {
        "which": run.record_trajectories, "samples": run.samples_per_step,
        "max_bytes": int(run.record_max_mb_per_step * 2**20), "seed": run.seed,
    }  # fmt: skip
