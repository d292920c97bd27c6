"""Which rollout settings `rstar2 eval` runs with: a checkpoint's own (the ones it was
trained with, recorded by the trainer), a training config's, an eval config's, the flags."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from backends import SyncReport

from rstar2_async.cli import eval as eval_cli
from rstar2_async.cli.main import build_parser
from rstar2_async.config import (
    ROLLOUT_RECORD,
    EvalConfig,
    RolloutConfig,
    TrainConfig,
    convert,
    load_toml,
    read_rollout_record,
    to_toml,
)
from rstar2_async.recipe import Publisher, Trainer
from rstar2_async.testing import sync_report

CPU_DEMO = Path(__file__).resolve().parents[2] / "configs" / "cpu-demo.toml"
TRAINED = RolloutConfig(system_prompt="Compute with the tool.", list_tools=False, max_turns=3, max_response_tokens=192)


def resolve(*argv: str) -> EvalConfig:
    base = ["eval", "--data", "aime24", "--temperature", "1.0", "--top-p", "0.9"]
    return eval_cli._resolve(build_parser().parse_args([*base, *argv]))


def checkpoint(tmp_path: Path, rollout: RolloutConfig | None = TRAINED) -> Path:
    from rstar2_async.config import write_rollout_record

    model = tmp_path / "weights" / "v000007"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    if rollout is not None:
        write_rollout_record(model, rollout)
    return model


def test_a_checkpoint_is_evaluated_with_the_settings_it_was_trained_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = checkpoint(tmp_path)
    config = resolve("--model", str(model))
    r = config.rollout
    assert (r.system_prompt, r.list_tools, r.max_turns, r.max_response_tokens) == ("Compute with the tool.", False, 3, 192)
    assert (r.sampling.temperature, r.sampling.top_p) == (1.0, 0.9)  # sampling is always the command line's
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"rollout settings from {model / ROLLOUT_RECORD} (as trained)" in err
    # Told otherwise: the flags, then an eval config's [rollout] fields, win over the record.
    assert resolve("--model", str(model), "--max-response-tokens", "64").rollout.max_response_tokens == 64
    own = tmp_path / "eval.toml"
    own.write_text("[rollout]\nmax_turns = 1\n")
    r = resolve("--model", str(model), "--config", str(own)).rollout
    assert (r.max_turns, r.system_prompt) == (1, "Compute with the tool.")
    assert "under --config's [rollout]" in capsys.readouterr().err


def test_a_model_without_a_record_says_it_runs_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = checkpoint(tmp_path, None)
    assert resolve("--model", str(model)).rollout.max_turns == RolloutConfig().max_turns
    assert f"{model} has no {ROLLOUT_RECORD}: default rollout settings" in capsys.readouterr().err


def test_the_record_round_trips_and_is_itself_an_eval_config(tmp_path: Path) -> None:
    model = checkpoint(tmp_path)
    assert read_rollout_record(model) == TRAINED
    assert load_toml(model / ROLLOUT_RECORD, EvalConfig).rollout == TRAINED


@pytest.mark.parametrize("written", [False, True])  # the config as the user wrote it; the run's resolved config.toml
def test_a_training_config_is_accepted_with_the_sections_eval_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: bool
) -> None:
    path = CPU_DEMO
    if written:
        path = tmp_path / "config.toml"
        path.write_text(to_toml(load_toml(CPU_DEMO, TrainConfig)))
    config = resolve("--endpoint", "http://x/v1", "--served-model", "m", "--config", str(path))
    r = config.rollout
    assert (r.system_prompt, r.list_tools, r.max_turns, r.max_response_tokens) == (
        "Compute with the tool, answer in \\boxed{}.", False, 3, 192,
    )  # fmt: skip
    assert config.server.max_model_len == 512 and config.sandbox.workers == 2
    assert (config.inference.base_urls, config.inference.model) == (["http://x/v1"], "m")  # the flags still win
    assert "is a training config" in capsys.readouterr().err


def test_a_training_config_gives_its_last_stages_limits(tmp_path: Path) -> None:
    stages = [{"name": "a", "kind": "rl", "data": "d", "max_response_tokens": 100},
              {"name": "b", "kind": "rl", "data": "d", "max_response_tokens": 300, "max_turns": 2}]  # fmt: skip
    path = tmp_path / "train.toml"
    path.write_bytes(msgspec.toml.encode({"model": {"tiny": {}}, "rollout": {"max_turns": 7}, "stages": stages}))
    r = resolve("--endpoint", "http://x/v1", "--served-model", "m", "--config", str(path)).rollout
    assert (r.max_turns, r.max_response_tokens) == (2, 300)


def test_a_bad_training_config_names_the_field(tmp_path: Path) -> None:
    from rstar2_async.errors import ConfigError

    path = tmp_path / "train.toml"
    path.write_text('[run]\nname = "x"\n[rollout]\nmax_turns = 0\n[model.tiny]\n[[stages]]\nname = "s"\nkind = "rl"\ndata = "d"\n')
    with pytest.raises(ConfigError, match="rollout.max_turns"):
        resolve("--endpoint", "http://x/v1", "--served-model", "m", "--config", str(path))


@pytest.mark.anyio
async def test_the_trainer_publishes_each_export_with_its_rollout_settings(tmp_path: Path) -> None:
    stage = {"name": "rl", "kind": "rl", "data": "unused.jsonl", "max_response_tokens": 99}
    sections = {"run": {"out_dir": str(tmp_path)}, "model": {"tiny": {}}, "rollout": {"system_prompt": "S", "shards": 1}, "stages": [stage]}
    trainer = Trainer(convert(sections, TrainConfig), resume=False)
    synced: list[tuple[Path, int]] = []

    class FakeDriver:
        def export(self, out: Path) -> Path:
            out.mkdir(parents=True)
            (out / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
            return out

    class FakeSync:
        transport = None  # the disk transport's path

        async def sync(self, weights: Path, version: int, probe: object = None) -> SyncReport:
            synced.append((weights, version))
            return sync_report(version)

    trainer.driver = FakeDriver()  # type: ignore[assignment]
    stack = SimpleNamespace(sync=FakeSync(), fleet=None)
    async with Publisher(stack, trainer._learn, trainer.driver) as trainer.publisher:  # type: ignore[arg-type]
        for _ in range(2):
            await trainer._export_and_sync()
    weights = trainer.run_dir / "weights"
    latest = weights / "latest"
    assert latest.is_symlink() and latest.resolve() == (weights / "v000002").resolve()
    assert sorted(p.name for p in weights.iterdir()) == ["latest", "v000002"]  # the older one is gone
    recorded = read_rollout_record(latest)
    assert recorded is not None and (recorded.system_prompt, recorded.max_response_tokens) == ("S", 99)
    assert recorded.shards == 0  # the run's process layout is not a setting of the weights
    assert [v for _, v in synced] == [1, 2]
