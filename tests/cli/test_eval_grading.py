"""`rstar2 eval --grading`: which grading mode an evaluation resolves to."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rstar2_async.cli.eval import _resolve, add_arguments

BASE = ["--data", "aime24", "--temperature", "0", "--top-p", "1"]


def resolved(argv: list[str]) -> str | None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return _resolve(parser.parse_args(argv + BASE)).reward.grading


@pytest.mark.parametrize(
    ("argv", "grading"),
    [
        (["--endpoint", "http://x/v1", "--served-model", "m"], "lenient"),  # a chat endpoint
        (["--endpoint", "http://x/v1", "--served-model", "m", "--tokenizer", "tok"], "strict"),  # token mode
        (["--model", "runs/x/weights/v000001"], "strict"),  # our own checkpoint: rStar2's format
        (["--endpoint", "http://x/v1", "--served-model", "m", "--grading", "strict"], "strict"),
        (["--model", "runs/x/weights/v000001", "--grading", "lenient"], "lenient"),
    ],
)
def test_grading_default_follows_the_endpoint(argv: list[str], grading: str) -> None:
    assert resolved(argv) == grading


def test_grading_from_the_config_beats_the_default(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('[reward]\ngrading = "strict"\n')
    chat = ["--endpoint", "http://x/v1", "--served-model", "m", "--config", str(config)]
    assert resolved(chat) == "strict"
    assert resolved([*chat, "--grading", "lenient"]) == "lenient"
