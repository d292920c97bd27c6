"""The README's `rstar2 eval` commands, run as written against what `make demo` writes.

`demo_run_dir` runs the real `rstar2 demo` (its data, its config) with training
replaced by a double that exports the way the trainer does: the real
``Trainer._export_and_sync`` with the tiny model standing in for the learner's
weights.  So the paths the README names are checked to be the ones the demo
writes, and its commands run on them (the vLLM one in tests/integration).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from rstar2_async.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def readme_eval_commands() -> list[list[str]]:
    """Each `rstar2 eval` line of the README's eval section, as argv (without `rstar2`)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Evaluate a model or an endpoint", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("rstar2 eval")]


def demo_commands(engine: str) -> list[list[str]]:
    """The README's commands on the demo's run directory, served by ``engine``."""
    found = [
        argv for argv in readme_eval_commands()
        if "--model" in argv and argv[argv.index("--model") + 1].startswith("runs/cpu-demo/")
        and (argv[argv.index("--engine") + 1] if "--engine" in argv else "vllm") == engine
    ]  # fmt: skip
    assert found, f"the README has no eval command on the demo's weights with the {engine} engine"
    return found


def named_paths(argv: list[str]) -> list[Path]:
    return [Path(argv[i + 1]) for i, arg in enumerate(argv) if arg in ("--model", "--data")]


class FakeTrain:
    """Stands in for `rstar2 train` in the demo: three exports (after SFT and two RL
    steps) through the trainer's own export path, the tiny model as the weights."""

    def __init__(self, weights: Path) -> None:
        self.weights = weights

    def __call__(self, config, *, resume: bool):  # type: ignore[no-untyped-def]
        from rstar2_async.recipe import Publisher, Trainer, TrainSummary

        trainer = Trainer(config, resume=resume)
        weights = self.weights

        class FakeDriver:
            def export(self, out: Path) -> Path:
                return Path(shutil.copytree(weights, out))

        class FakeSync:
            transport = None  # the disk transport's path

            async def sync(self, directory: Path, version: int, probe: object = None) -> object:
                from rstar2_async.testing import sync_report

                return sync_report(version)

        trainer.driver = FakeDriver()  # type: ignore[assignment]
        stack = SimpleNamespace(sync=FakeSync(), fleet=None)

        async def exports() -> None:
            async with Publisher(stack, trainer._learn, trainer.driver) as trainer.publisher:  # type: ignore[arg-type]
                for stage in (0, 1, 1):
                    trainer.state.stage = stage
                    await trainer._export_and_sync()

        anyio.run(exports)
        return TrainSummary(run_dir=str(trainer.run_dir), rl_steps=2, wall_s=0.0, evals=[], phase_seconds={}, plots=[])


def make_demo_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``tmp_path`` the working directory, holding what `make demo` leaves in
    `runs/cpu-demo` (small)."""
    from rstar2_async.demo import cached_tiny_model

    weights = cached_tiny_model((ROOT / "runs" / "cache").resolve())
    monkeypatch.setattr("rstar2_async.cli.train.train", FakeTrain(weights))
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--train-problems", "8", "--sft-transcripts", "8", "--heldout", "3"]) == 0
    return tmp_path


@pytest.fixture
def demo_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_demo_run_dir(tmp_path, monkeypatch)


def test_the_readme_names_paths_the_demo_writes(demo_run_dir: Path) -> None:
    for engine in ("vllm", "transformers"):
        for argv in demo_commands(engine):
            for path in named_paths(argv):
                assert (demo_run_dir / path).exists(), f"{shlex.join(argv)}: {path} is not written by the demo"
    latest = demo_run_dir / "runs/cpu-demo/weights/latest"
    assert latest.resolve().name == "v000003" and (latest / "rollout.toml").is_file()


def run_readme_command(run_dir: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the README's command for ``engine`` on two problems of the demo's run:
    it succeeds, with no errored sample, under the settings the demo trained with."""
    [argv] = demo_commands(engine)
    capsys.readouterr()
    assert main([*argv, "--limit", "2"]) == 0
    out, err = capsys.readouterr()
    assert "rollout settings from runs/cpu-demo/weights/latest/rollout.toml (as trained)" in err
    [summary] = json.loads(out.strip().splitlines()[-1])
    assert summary["problems"] == 2 and summary["errors"] == 0
    config = (run_dir / "runs/eval/v000003/config.toml").read_text()  # the demo's system prompt and budget
    assert "Compute with the tool, answer in" in config and "max_response_tokens = 192" in config


@pytest.mark.slow
def test_the_readme_transformers_command_runs_on_the_demo(demo_run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_readme_command(demo_run_dir, "transformers", capsys)
