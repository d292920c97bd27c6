"""`rstar2 eval`: which grading mode an evaluation resolves to, and its one line saying so.

The default follows whether the model carries our rollout record (``rollout.toml``),
not the transport: a model trained here is graded on rStar2's format (strict), any
other model leniently, through a chat endpoint, token mode or a launched server alike.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rstar2_async.cli.eval import _resolve, add_arguments
from rstar2_async.config import RolloutConfig, write_rollout_record

BASE = ["--data", "aime24", "--temperature", "0", "--top-p", "1"]
ENDPOINT = ["--endpoint", "http://x/v1", "--served-model", "m"]


def resolved(argv: list[str]) -> str | None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return _resolve(parser.parse_args(argv + BASE)).reward.grading


@pytest.fixture
def trained(tmp_path: Path) -> str:
    """A model directory with our rollout record (a checkpoint of `rstar2 train`)."""
    (tmp_path / "trained").mkdir()
    write_rollout_record(tmp_path / "trained", RolloutConfig())
    return str(tmp_path / "trained")


@pytest.fixture
def plain(tmp_path: Path) -> str:
    """A model directory from elsewhere: no rollout record."""
    (tmp_path / "plain").mkdir()
    return str(tmp_path / "plain")


@pytest.mark.parametrize(
    ("argv", "grading"),
    [
        (ENDPOINT, "lenient"),  # a chat endpoint
        ([*ENDPOINT, "--tokenizer", "{plain}"], "lenient"),  # token mode, the same model: the same grading
        (["--model", "{plain}"], "lenient"),
        (["--model", "{trained}"], "strict"),  # our own checkpoint: rStar2's format
        ([*ENDPOINT, "--tokenizer", "{trained}"], "strict"),
        ([*ENDPOINT, "--grading", "strict"], "strict"),
        (["--model", "{trained}", "--grading", "lenient"], "lenient"),
    ],
)
def test_grading_default_follows_the_rollout_record_not_the_transport(
    argv: list[str], grading: str, trained: str, plain: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert resolved([a.format(trained=trained, plain=plain) for a in argv]) == grading
    [line] = capsys.readouterr().err.splitlines()  # one line, and it says the grading
    assert f"; {grading} grading (" in line
    if "{plain}" in argv and "--grading" not in argv:
        assert "has no rollout.toml" in line and "--grading strict" in line


def test_grading_from_the_config_beats_the_default(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('[reward]\ngrading = "strict"\n')
    chat = [*ENDPOINT, "--config", str(config)]
    assert resolved(chat) == "strict"
    assert resolved([*chat, "--grading", "lenient"]) == "lenient"
