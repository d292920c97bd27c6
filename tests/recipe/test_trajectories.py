"""The trajectory recorder: every trajectory of a step, with RoC's decision, its turns
split into text and tool calls, and an index whose byte ranges point at the records."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from rstar2_async.recipe import IndexRow, TrajectoryRecord, record_step, to_record
from rstar2_async.recipe._trajectories import cut_partial_line
from rstar2_async.selection import RocDecision, roc_downsample, trajectory_penalty
from rstar2_async.types import Group, Problem, ToolCall, ToolResult, Trajectory, Turn


def _trajectory(index: int, reward: float) -> Trajectory:
    # turn 1: 3 generated tokens (ids 10..12) + 2 appended (20, 21); turn 2: 2 generated (30, 31)
    result = ToolResult("ok", "4", 0.1, ToolCall("python", {"code": "print(2 + 2)"}))
    turns = [Turn(0, 3, 2, 5, "stop", [result]), Turn(5, 2, 0, 6, "stop", [], num_answer_blocks=1)]
    text = 'A<tool_call>{"name": "python"}</tool_call>' + "<tool_response>\n4\n</tool_response>" + "B<answer>\\boxed{4}</answer>"
    return Trajectory(
        problem_id="p1", sample_index=index, prompt_ids=[1], response_ids=[10, 11, 12, 20, 21, 30, 31],
        loss_mask=[1, 1, 1, 0, 0, 1, 1], logprobs=[0.0] * 7, turns=turns, finish_reason="answer", weight_version=5,
        response_text=text, reward=reward,
    )  # fmt: skip


def test_record_with_a_decoder_splits_each_turn_by_its_tokens() -> None:
    r = to_record(_trajectory(0, 1.0), Problem("p1", "2+2?", "4"), step=3, stage="rl", roc="kept", decode=lambda ids: ",".join(map(str, ids)))
    assert [t.text for t in r.turns] == ["10,11,12", "30,31"]
    assert [t.tool_text for t in r.turns] == ["20,21", ""]
    assert [t.trained_tokens for t in r.turns] == [3, 2]
    assert r.turns[0].tools[0].code == "print(2 + 2)" and r.turns[0].tools[0].output == "4"
    assert (r.answer, r.gold, r.problem, r.roc) == ("4", "4", "2+2?", "kept")
    assert r.penalty == trajectory_penalty(_trajectory(0, 1.0))


def test_record_without_a_decoder_splits_the_transcript_at_the_tool_turns() -> None:
    r = to_record(_trajectory(0, 1.0), None, step=1, stage="eval")
    assert r.turns[0].text == 'A<tool_call>{"name": "python"}</tool_call>'
    assert r.turns[0].tool_text == "<tool_response>\n4\n</tool_response>"
    assert r.turns[1].text == "B<answer>\\boxed{4}</answer>"


def test_record_without_a_decoder_splits_the_transcript_by_its_text_spans() -> None:
    # Cut off after its tool turn (a timeout): the tool's output is no model text.
    said, tool = "A<tool_call>{}</tool_call>", "<|im_end|>\n<tool_response>\n4\n</tool_response>"
    turn = Turn(0, 3, 2, 5, "stop", [ToolResult("ok", "4")], text_span=(0, len(said)))
    t = msgspec.structs.replace(_trajectory(0, 0.0), turns=[turn], response_text=said + tool, finish_reason="timeout")
    r = to_record(t, None, step=1, stage="eval")
    assert [(u.text, u.tool_text) for u in r.turns] == [(said, tool)]
    assert r.answer == "" and t.model_text == said


def test_record_step_writes_every_trajectory_with_its_roc_decision_and_an_index_of_byte_ranges(tmp_path: Path) -> None:
    group = Group(Problem("p1", "2+2?", "4"), [_trajectory(i, float(i % 2)) for i in range(6)])
    decision = roc_downsample(group, 4, random.Random(0))
    assert record_step(tmp_path, 7, "rl", [(group, decision)]) == (6, 0)
    rows = [msgspec.json.decode(line, type=IndexRow) for line in (tmp_path / "index.jsonl").read_bytes().splitlines()]
    data = (tmp_path / "records.jsonl").read_bytes()
    records = [msgspec.json.decode(data[r.offset:r.offset + r.length], type=TrajectoryRecord) for r in rows]
    assert [r.sample_index for r in records] == list(range(6))
    kept = {r.sample_index for r in records if r.roc == "kept"}
    assert kept == set(decision.kept)
    assert {r.sample_index: r.roc for r in records if r.roc != "kept"} == {d.sample_index: d.reason for d in decision.dropped}
    assert all(r.step == 7 and r.tool_calls == 1 for r in rows)


def test_a_partial_index_line_left_by_a_killed_run_is_cut_before_appending(tmp_path: Path) -> None:
    group = Group(Problem("p1", "2+2?", "4"), [_trajectory(i, float(i % 2)) for i in range(2)])
    decision = roc_downsample(group, 4, random.Random(0))
    record_step(tmp_path, 1, "rl", [(group, decision)])
    with (tmp_path / "index.jsonl").open("ab") as f:
        f.write(b'[123, 4')  # killed mid-line
    record_step(tmp_path, 2, "rl", [(group, decision)])
    rows = [msgspec.json.decode(line, type=IndexRow) for line in (tmp_path / "index.jsonl").read_bytes().splitlines()]
    assert [r.step for r in rows] == [1, 1, 2, 2]


def test_a_partial_line_longer_than_the_tail_read_is_cut_too(tmp_path: Path) -> None:
    index = tmp_path / "index.jsonl"
    index.write_bytes(b"[1]\n" + b"x" * 200_000)  # the tail is read 64 KiB at a time
    cut_partial_line(index)
    assert index.read_bytes() == b"[1]\n"
    index.write_bytes(b"y" * 70_000)  # no whole line at all
    cut_partial_line(index)
    assert index.read_bytes() == b""


def _groups(k: int = 3, n: int = 6) -> list[tuple[Group, RocDecision]]:
    groups = [
        Group(Problem(f"p{g}", "2+2?", "4"), [msgspec.structs.replace(_trajectory(i, float((i + g) % 2)), problem_id=f"p{g}") for i in range(n)])
        for g in range(k)
    ]  # fmt: skip
    return [(g, roc_downsample(g, 4, random.Random(0))) for g in groups]


def _recorded(out: Path) -> list[TrajectoryRecord]:
    if not (out / "index.jsonl").exists():
        return []
    rows = [msgspec.json.decode(line, type=IndexRow) for line in (out / "index.jsonl").read_bytes().splitlines()]
    data = (out / "records.jsonl").read_bytes()
    return [msgspec.json.decode(data[r.offset:r.offset + r.length], type=TrajectoryRecord) for r in rows]


def test_which_trajectories_are_recorded(tmp_path: Path) -> None:
    groups = _groups()
    assert record_step(tmp_path / "none", 1, "rl", groups, which="none") == (0, 0)
    assert not (tmp_path / "none").exists()
    assert record_step(tmp_path / "kept", 1, "rl", groups, which="kept") == (12, 0)
    kept = _recorded(tmp_path / "kept")
    assert {(r.problem_id, r.sample_index) for r in kept} == {(g.problem.id, i) for g, d in groups for i in d.kept}
    picks = []
    for step in (1, 1, 2):
        out = tmp_path / f"sample-{len(picks)}"
        assert record_step(out, step, "rl", groups, which="sample", samples=5, seed=7) == (5, 0)
        picks.append([(r.problem_id, r.sample_index) for r in _recorded(out)])
    assert picks[0] == picks[1] != picks[2]  # seeded by the run's seed and the step
    assert picks[0] == sorted(picks[0])  # in the groups' order


def test_the_size_cap_cuts_a_random_share_of_the_step(tmp_path: Path) -> None:
    groups = _groups()
    whole = record_step(tmp_path / "all", 1, "rl", groups)
    size = (tmp_path / "all" / "records.jsonl").stat().st_size
    capped = record_step(tmp_path / "cap", 1, "rl", groups, max_bytes=size // 2, seed=3)
    assert whole == (18, 0) and capped.written + capped.skipped == 18 and 0 < capped.written < 18
    assert (tmp_path / "cap" / "records.jsonl").stat().st_size <= size // 2
    got = [(r.problem_id, r.sample_index) for r in _recorded(tmp_path / "cap")]
    order = [(g.problem.id, t.sample_index) for g, _ in groups for t in g.trajectories]
    assert got == sorted(got, key=order.index)  # written in the groups' order...
    assert got != order[: len(got)]  # ...but not the first that finished: a draw


class FakeMetrics:
    def __init__(self) -> None:
        self.lines: list[tuple[int, dict]] = []

    def write(self, step: int, values: dict) -> None:
        self.lines.append((step, values))


@pytest.mark.anyio
async def test_the_trainer_records_every_trajectory_of_a_step_with_its_decision(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rstar2_async.config import TrainConfig, convert
    from rstar2_async.recipe import Trainer
    from rstar2_async.recipe._state import RolloutResult

    stage = {"name": "rl", "kind": "rl", "data": "unused.jsonl"}
    trainer = Trainer(convert({"run": {"out_dir": str(tmp_path), "name": "r"}, "model": {"tiny": {}}, "stages": [stage]}, TrainConfig), resume=False)

    async def no_lr(stage, step):  # the learner is not under test
        return None

    async def update(stack, stage, done):
        return {"rollout/trajectories": len(done.groups)}

    trainer._set_lr, trainer._update = no_lr, update  # type: ignore[method-assign]
    groups = [Group(Problem(f"p{k}", "2+2?", "4"), [msgspec.structs.replace(_trajectory(i, float((i + k) % 2)), problem_id=f"p{k}") for i in range(6)]) for k in range(2)]
    done = RolloutResult()
    for g in groups:
        done.add(g, roc_downsample(g, 4, random.Random(0)))
    stack = SimpleNamespace(engine=SimpleNamespace(tokenizer=None))
    trainer_metrics = FakeMetrics()
    await trainer.learn_step(stack, trainer.config.stages[0], 0, done, trainer_metrics)  # type: ignore[arg-type]
    rows = [msgspec.json.decode(line, type=IndexRow) for line in (tmp_path / "r" / "trajectories" / "index.jsonl").read_bytes().splitlines()]
    assert [(r.step, r.problem_id, r.sample_index) for r in rows] == [(1, f"p{k}", i) for k in range(2) for i in range(6)]
    assert sum(r.roc == "kept" for r in rows) == 8
    [(_, values)] = trainer_metrics.lines
    assert (values["record/written"], values["record/skipped"]) == (12, 0)
