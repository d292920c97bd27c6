"""Problem sets: names and paths, the field mapping of ``[data]``, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2_async.config import DataConfig, convert
from rstar2_async.errors import DatasetError
from rstar2_async.recipe import load_problems


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fields_are_mapped_from_the_data_section(tmp_path: Path) -> None:
    data = write(tmp_path / "qa.jsonl", [
        {"uid": 7, "question": "What is 2+2?", "final_answer": 4, "origin": "toy"},
        {"question": "What is 3+3?", "final_answer": "6"},
    ])  # fmt: skip
    fields = convert({"problem_field": "question", "answer_field": "final_answer", "id_field": "uid", "source_field": "origin"}, DataConfig)
    first, second = load_problems(data, fields=fields)
    assert (first.id, first.problem, first.answer, first.source) == ("7", "What is 2+2?", "4", "toy")
    assert (second.id, second.answer, second.source) == ("qa-2", "6", "")


def test_a_missing_mapped_field_names_the_line_and_the_setting(tmp_path: Path) -> None:
    data = write(tmp_path / "qa.jsonl", [{"question": "q", "final_answer": "1"}, {"prompt": "q", "final_answer": "1"}])
    with pytest.raises(DatasetError, match=r"qa.jsonl:2: expected a string in field 'question' \(data.problem_field\)"):
        load_problems(data, fields=DataConfig(problem_field="question", answer_field="final_answer"))


def test_the_default_fields_need_no_mapping(tmp_path: Path) -> None:
    data = write(tmp_path / "p.jsonl", [{"problem": "q", "answer": 1.5}])
    [p] = load_problems(data)
    assert (p.id, p.answer) == ("p-1", "1.5")
    with pytest.raises(DatasetError, match="p.jsonl:1"):
        load_problems(write(tmp_path / "p.jsonl", [{"question": "q", "answer": "1"}]))
