"""Every trajectory of every RL step, on disk in the shape a person reads it.

``runs/<name>/trajectories/`` holds two append-only files:

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import msgspec

from ..reward import extract_answer
from ..rollout import ChatTokenizer, render_tool_turn
from ..selection import RocDecision, trajectory_penalty
from ..types import Group, Problem, ToolResult, Trajectory, Turn

__all__ = ["IndexRow", "ToolRecord", "TrajectoryRecord", "TurnRecord", "index_row", "record_step", "to_record"]

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
    ``negative_downsampled``, ``positive_penalty``, ``positive_sampled_out``), or ``""``
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
    evaluations keep no tokenizer): each tool turn is found by its rendered results."""
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
        answer=extract_answer(t.response_text) or "", reward=t.reward or 0.0, finish_reason=t.finish_reason,
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


def cut_partial_line(path: Path) -> None:
    """Drop a partial last line (the writer died mid-line) so appends stay line-aligned."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with path.open("r+b") as f:
            f.truncate(end)


def record_step(
    out_dir: Path,
    step: int,
    stage: str,
    groups: Sequence[tuple[Group, RocDecision]],
    tokenizer: ChatTokenizer | None = None,
) -> int:
    """Append every trajectory of one step's groups to ``out_dir`` (records, then their
    index rows); returns how many were written.  Blocking file I/O: call it in a thread."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cut_partial_line(out_dir / INDEX)
    decode = tokenizer.decode if tokenizer is not None else None
    rows, n = [], 0
    with (out_dir / RECORDS).open("ab") as f:
        offset = f.tell()
        for group, decision in groups:
            outcomes = roc_outcomes(decision)
            for t in group.trajectories:
                r = to_record(t, group.problem, step=step, stage=stage, roc=outcomes.get(t.sample_index, ""), decode=decode)
                line = _encoder.encode(r)
                f.write(line + b"\n")
                rows.append(_encoder.encode(index_row(r, offset, len(line))) + b"\n")
                offset += len(line) + 1
                n += 1
        f.flush()
    with (out_dir / INDEX).open("ab") as f:
        f.write(b"".join(rows))
    return n
