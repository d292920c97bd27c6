from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rstar2_async.config import ConfigError, InferenceConfig, RolloutConfig, convert, load_toml, to_toml


class Root(msgspec.Struct, forbid_unknown_fields=True):
    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rollout": {"max_turns": "five"}}, 'rollout.max_turns: expected int >= 1, got "five"'),
        ({"rollout": {"max_turns": 0}}, "rollout.max_turns: expected int >= 1, got 0"),
        ({"rollout": {"tool_timeout_s": -1.0}}, "rollout.tool_timeout_s: expected float > 0, got -1.0"),
        ({"rollout": {"sampling": {"top_p": 2}}}, "rollout.sampling.top_p: expected float > 0 and <= 1, got 2"),
        ({"inference": {"mode": "text"}}, 'inference.mode: expected one of "chat", "tokens", got "text"'),
        ({"inference": {"base_urls": []}}, "inference.base_urls: expected array length >= 1, got an array"),
        ({"inference": {"base_urls": ["a", 3]}}, "inference.base_urls[1]: expected string, got 3"),
        ({"rollout": 3}, "rollout: expected table, got 3"),
    ],
)
def test_errors_name_field_bound_and_value(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        convert(data, Root)
    assert str(info.value) == message


class Bounds(msgspec.Struct, forbid_unknown_fields=True):
    low: int = 0
    high: int = 1

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"inner.low ({self.low}) > inner.high ({self.high}): swap them")


class Outer(msgspec.Struct, forbid_unknown_fields=True):
    inner: Bounds | None = None


def test_a_nested_structs_own_check_keeps_its_message() -> None:
    """A table where a table belongs fails only in the struct's ``__post_init__``:
    its message (which names the fields) is kept, not "expected table, got a table"."""
    with pytest.raises(ConfigError) as info:
        convert({"inner": {"low": 3}}, Outer)
    assert str(info.value) == "inner.low (3) > inner.high (1): swap them"


def test_unknown_field_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^rollout: object contains unknown field `max_turn`"):
        convert({"rollout": {"max_turn": 3}}, Root)


def test_toml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[rollout]\nmax_turns = 3\n[rollout.sampling]\ntemperature = 0.6\n')
    config = load_toml(path, Root)
    assert config.rollout.max_turns == 3 and config.rollout.sampling.temperature == 0.6
    path.write_text(to_toml(config))
    assert load_toml(path, Root) == config


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "nope.toml", Root)
    (tmp_path / "bad.toml").write_text("[rollout\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(tmp_path / "bad.toml", Root)
