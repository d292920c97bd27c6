"""Reading a run directory: tables, filters, search, the live tail, bad input, the report."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from rstar2_async.cli.main import main
from rstar2_async.view import Query, RunDirError, RunReader, build_report, write_sample_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("run") / "demo"
    write_sample_run(d, steps=3, problems=3, samples=6, keep=4)
    return d


def _records(reader: RunReader) -> list:
    table = reader.table("train")
    return [table.record(i) for i in range(len(table.rows))]


def test_the_table_lists_every_recorded_trajectory_and_filters_match_the_records(run_dir: Path) -> None:
    reader = RunReader(run_dir)
    records = _records(reader)
    assert len(records) == 3 * 3 * 6
    table = reader.table("train")
    everything = table.page(Query(size=1000))
    assert everything["total"] == 54 and [r["i"] for r in everything["rows"]] == list(range(54))
    finished = table.page(Query(finish="answer", size=1000))
    assert {r["i"] for r in finished["rows"]} == {i for i, r in enumerate(records) if r.finish_reason == "answer"}
    dropped = table.page(Query(roc="dropped", step=2, size=1000))
    assert {r["i"] for r in dropped["rows"]} == {i for i, r in enumerate(records) if r.step == 2 and r.roc not in ("kept", "")}
    errors = table.page(Query(q="nameerror", size=1000))  # case-insensitive, in the tool output
    assert {r["i"] for r in errors["rows"]} == {i for i, r in enumerate(records) if any("NameError" in x.output for t in r.turns for x in t.tools)}
    assert 0 < errors["total"] < 54
    by_reward = table.page(Query(sort="reward", desc=True, size=5, page=1))
    assert [r["i"] for r in by_reward["rows"]] == sorted(range(54), key=lambda i: (records[i].reward, i), reverse=True)[5:10]
    with pytest.raises(ValueError, match="sort: expected one of"):
        table.page(Query(sort="nope"))


def test_a_group_shows_every_sample_of_one_problem(run_dir: Path) -> None:
    reader = RunReader(run_dir)
    group = reader.group("train", 2, "p002-001")
    assert [g["sample_index"] for g in group] == list(range(6))
    assert {g["roc"] for g in group} <= {"kept", "all_equal_rewards", "negative_downsampled", "positive_penalty"}


def test_eval_samples_are_a_source_and_a_truncated_last_line_is_read_up_to_the_last_whole_line(tmp_path: Path) -> None:
    write_sample_run(tmp_path, steps=2, problems=3, samples=2, keep=2)
    samples = tmp_path / "eval" / "step-000002-rl-8k" / "gsm8k" / "samples.jsonl"
    whole = samples.read_bytes()
    lines = whole.splitlines(keepends=True)
    samples.write_bytes(b"".join(lines[:2]) + lines[2][:40])  # a run still writing
    reader = RunReader(tmp_path)
    assert reader.sources() == ["train", "eval/step-000002-rl-8k/gsm8k"]
    table = reader.table("eval/step-000002-rl-8k/gsm8k")
    assert len(table.rows) == 2 and table.record(1).problem_id == "p002-001"
    samples.write_bytes(whole)  # the line is finished: the next read picks it up
    assert len(reader.table("eval/step-000002-rl-8k/gsm8k").rows) == 3
    metrics = tmp_path / "metrics.jsonl"
    n = len(reader.metrics())
    with metrics.open("ab") as f:
        f.write(b'{"step": 9, "rollout/reward_mean"')
    assert len(reader.metrics()) == n
    with metrics.open("ab") as f:
        f.write(b": 0.5}\n")
    assert reader.metrics()[-1] == {"step": 9, "rollout/reward_mean": 0.5}
    with metrics.open("ab") as f:  # killed mid-line, then resumed: the half line is glued to the next
        f.write(b'{"step": 10, "rollo{"step": 10, "rollout/reward_mean": 0.7}\n{"step": 11, "rollout/reward_mean": 0.8}\n')
    assert [r["step"] for r in reader.metrics()[-2:]] == [9, 11]


def test_the_training_table_grows_as_the_recorder_appends(tmp_path: Path) -> None:
    write_sample_run(tmp_path, steps=1, problems=2, samples=2, keep=2, eval_every=0)
    reader = RunReader(tmp_path)
    assert len(reader.table("train").rows) == 4
    write_sample_run(tmp_path, steps=2, problems=2, samples=2, keep=2, eval_every=0, first_step=2)
    table = reader.table("train")
    assert len(table.rows) == 12 and table.steps() == {1: 4, 2: 4, 3: 4}
    # Resumed from step 1's checkpoint: steps 2 and 3 are rolled out and recorded again.
    write_sample_run(tmp_path, steps=2, problems=2, samples=2, keep=2, eval_every=0, first_step=2, seed=7)
    table = reader.table("train")
    assert table.steps() == {1: 4, 2: 4, 3: 4}
    rows = table.page(Query(size=100))["rows"]
    assert [r["i"] for r in rows] == [0, 1, 2, 3, *range(12, 20)]  # the later records of steps 2-3
    assert [g["i"] for g in reader.group("train", 3, "p003-000")] == [16, 17]


def test_a_missing_or_empty_run_directory_gets_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunDirError, match="is not a directory"):
        RunReader(tmp_path / "nope")
    with pytest.raises(RunDirError, match="holds no metrics.jsonl"):
        RunReader(tmp_path)
    assert main(["view", str(tmp_path / "nope"), "--port", "0"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert "holds no metrics.jsonl" in capsys.readouterr().err


def test_the_report_is_one_self_contained_file_with_the_curves_and_best_worst_random_per_step(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "-o", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched from elsewhere
    payload = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.DOTALL)
    assert payload is not None
    data = msgspec.json.decode(payload.group(1))
    assert [s["step"] for s in data["samples"]] == [1, 2, 3]
    records = _records(RunReader(run_dir))
    for s in data["samples"]:
        rewards = [r.reward for r in records if r.step == s["step"]]
        labels = {label: rec["reward"] for label, rec in s["picks"]}
        assert labels["best"] == max(rewards) and labels["worst"] == min(rewards)
    assert len(data["metrics"]) == len(RunReader(run_dir).metrics())
    assert build_report(run_dir) == build_report(run_dir)  # seeded


@pytest.mark.parametrize("chunk", [5, 97, 4096])
def test_a_search_finds_matches_that_straddle_the_chunks_it_reads(run_dir: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    table = RunReader(run_dir).table("train")
    expected = {q: table.page(Query(q=q, size=1000))["rows"] for q in ("NameError", "print(x * 3)", "reasoning reasoning")}
    monkeypatch.setattr("rstar2_async.view._source.SEARCH_CHUNK", chunk)
    for q, rows in expected.items():
        assert table.page(Query(q=q, size=1000))["rows"] == rows and rows
