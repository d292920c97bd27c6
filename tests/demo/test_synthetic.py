"""The demo's synthetic task and the shipped configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2_async.config import ConfigError, TrainConfig, convert, load_toml
from rstar2_async.demo import estimate, make_problems, write_sft_transcripts

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(("answer", "guess"), [("1776", "1800"), ("8930", "8900"), ("945", "940"), ("42", "42"), ("7", "7")])
def test_estimate_keeps_two_significant_digits(answer: str, guess: str) -> None:
    assert estimate(answer) == guess


def test_sft_transcripts_mix_tool_use_and_guesses(tmp_path: Path) -> None:
    problems = make_problems(400, seed=2, digits=(2, 2))
    path = write_sft_transcripts(problems, tmp_path / "sft.jsonl", system="S", guess_fraction=0.3, seed=2)
    rows = [json.loads(line)["messages"] for line in path.read_text().splitlines()]
    guesses = [(p, m) for p, m in zip(problems, rows) if "<tool_call>" not in m[2]["content"]]
    assert 0.2 < len(guesses) / len(rows) < 0.4
    for p, m in guesses:
        assert len(m) == 3 and m[2]["content"] == f"<answer>\\boxed{{{estimate(p.answer)}}}</answer>"
    tool_use = [m for m in rows if "<tool_call>" in m[2]["content"]]
    assert all(len(m) == 5 and "<tool_response>" in m[3]["content"] for m in tool_use)
    # The same seed writes the same file; no guesses by default.
    again = write_sft_transcripts(problems, tmp_path / "again.jsonl", system="S", guess_fraction=0.3, seed=2)
    assert again.read_text() == path.read_text()
    clean = write_sft_transcripts(problems, tmp_path / "clean.jsonl", system="S")
    assert "<tool_call>" in clean.read_text() and all("<tool_call>" in line for line in clean.read_text().splitlines())
    with pytest.raises(ValueError, match="guess_fraction"):
        write_sft_transcripts(problems, tmp_path / "bad.jsonl", system="S", guess_fraction=1.5)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.toml")))
def test_shipped_configs_load(name: str) -> None:
    assert load_toml(CONFIGS / name, TrainConfig).stages


def test_a_bad_lr_decay_is_named() -> None:
    stage = {"name": "sft", "kind": "sft", "data": "x.jsonl", "lr_decay": "cosine"}
    with pytest.raises(ConfigError, match=r"stages\[0\]\.lr_decay"):
        convert({"model": {"tiny": {}}, "stages": [stage]}, TrainConfig)
