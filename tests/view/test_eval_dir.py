"""`rstar2 view` over what `rstar2 eval` writes (real sandbox, real grader, scripted endpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2_async.cli.main import main
from rstar2_async.testing import FakeModelServer
from rstar2_async.view import Query, RunReader
from tests.cli.test_eval_cli import endpoint  # noqa: F401 - the scripted endpoint fixture


def test_an_eval_directory_lists_its_samples_with_their_tool_calls(
    tmp_path: Path, endpoint: tuple[str, FakeModelServer], capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    url, _ = endpoint
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"What is {i}*7?", "answer": str(i * 7)}) + "\n" for i in range(3)))
    out = tmp_path / "out"
    argv = ["eval", "--endpoint", url, "--served-model", "toy-model", "--data", str(data), "--n", "2",
            "--temperature", "0.7", "--top-p", "0.9", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    reader = RunReader(out)
    assert reader.sources() == ["toy"]
    table = reader.table("toy")
    page = table.page(Query(source="toy", sort="problem_id"))
    assert page["total"] == 6 and {r["problem_id"] for r in page["rows"]} == {"t0", "t1", "t2"}
    assert all(r["reward"] == 1.0 and r["tool_calls"] == 1 and r["roc"] == "" for r in page["rows"])
    record = table.record(page["rows"][0]["i"])
    [call] = [c for t in record.turns for c in t.tools]
    assert call.status == "ok" and call.code and call.output.strip()
    assert record.answer == str(int(record.problem_id[1:]) * 7)
    assert record.turns[0].text and call.output in record.turns[0].tool_text
