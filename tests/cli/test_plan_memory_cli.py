"""`rstar2 plan-memory`: the recipe's config on a Qwen3-14B-shaped config.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rstar2_async.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "config"))
from test_memory_plan import QWEN3_14B


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_14B))
    return tmp_path


def test_recipe_fits_on_32_ranks_of_80gb(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan-memory", str(ROOT / "configs/rstar2-qwen3-14b.toml"), "--model", str(model), "--ranks", "32"]
    assert main([*argv, "--device-memory-gb", "80"]) == 0
    out = capsys.readouterr().out
    assert "14.77B parameters" in out and "activations (not checkpointed)" in out
    assert out.strip().splitlines()[-1].endswith(": fits")


def test_too_small_a_device_names_the_field(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan-memory", str(ROOT / "configs/rstar2-qwen3-14b.toml"), "--model", str(model), "--ranks", "32"]
    assert main([*argv, "--device-memory-gb", "30"]) == 1
    assert "lower learner.micro_batch_tokens from 32768 to <=" in capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["plan-memory", str(ROOT / "configs/cpu-demo.toml"), "--device-memory-gb", "1"]) == 2
    assert "needs --model DIR" in capsys.readouterr().err
