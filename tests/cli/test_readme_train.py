"""The README's "Train your own model": its config is a valid training config, and the
template errors it quotes are the messages the code raises."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from rstar2_async.config import TrainConfig, convert
from rstar2_async.errors import ConfigError
from rstar2_async.rollout import HFChatTokenizer
from tests.rollout.chat_templates import (
    ALTERNATING_ONLY,
    CHATML_DROPPING_TOOLS,
    QWEN25_STYLE,
    qwen_tokenizer,
    swallowing_tokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
# Each numbers its tool results: the framing depends on where a result stands.
NUMBERING = QWEN25_STYLE.replace("'\\n<tool_response>\\n'", "'\\n<tool_response>' + loop.index|string + '\\n'")


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("## Train your own model"):text.index("## Run on a cluster")]


def test_the_config_is_a_training_config() -> None:
    block = section().split("```toml\n", 1)[1].split("```", 1)[0]
    config = convert(tomllib.loads(block), TrainConfig)
    assert config.model.path and config.reward.grading == "lenient" and config.stages[0].kind == "rl"


def test_the_quoted_errors_are_the_ones_raised(tmp_path: Path) -> None:
    templates = [ALTERNATING_ONLY, CHATML_DROPPING_TOOLS, NUMBERING, QWEN25_STYLE.replace("<|im_end|>", "<|endoftext|>"), ""]
    directories = [qwen_tokenizer(tmp_path / str(i), template) for i, template in enumerate(templates)]
    messages = []
    for directory in [*directories, swallowing_tokenizer(tmp_path / "rstrip")]:
        with pytest.raises(ConfigError) as caught:
            HFChatTokenizer.from_pretrained(directory)
        messages.append(str(caught.value))
        assert "rollout.chat_template" in messages[-1]
    quoted = re.findall(r"^   - `([^`]+)`(?:, or `([^`]+)`)?", section().replace("\n     ", " "), flags=re.MULTILINE)
    phrases = [p for pair in quoted for p in pair if p]
    assert len(phrases) == 6
    for phrase in phrases:
        pieces = [p.strip() for p in re.split(r"\(\.\.\.\)|'\.\.\.'|\.\.\.", phrase) if p.strip()]
        assert any(all(piece in m for piece in pieces) for m in messages), phrase
