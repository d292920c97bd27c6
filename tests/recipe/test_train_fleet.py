"""The trainer's RL loop, on-policy and streaming, in this process and in rollout
shards (``rollout.shards``), against fake vLLM servers over HTTP: the real stack
(pool, weight sync, jailed sandbox, grader, shard workers) and the real trainer;
only the servers' model and the learner are test doubles.

Checked: every trained group is trained once, no group is staler than
``run.max_staleness``, each turn carries the version that generated it, and in
streaming mode the syncs cut turns short that then resume on the new weights.
(tests/integration runs the same loop against a real vLLM and a real learner.)"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec
import pytest

from rstar2_async.config import ConfigError, TrainConfig, convert
from rstar2_async.recipe import Trainer
from rstar2_async.types import Group
from tests.fakes.fleet import FakeVLLM
from tests.fakes.http import serve_http
from tests.fakes.model import FakeModelServer, arithmetic_policy, write_byte_tokenizer

pytestmark = pytest.mark.anyio

STEPS, B, N = 3, 2, 4


class _Stats(msgspec.Struct, frozen=True):
    loss: float


class FakeLearnerDriver:
    """Test double of :class:`rstar2_async.learn.LearnerDriver`: records what each
    update trains (with the version it starts from) and exports a stub directory."""

    def __init__(self) -> None:
        self.version = 0
        self.updates: list[tuple[int, list[Group]]] = []

    def set_peak_lr(self, lr: float) -> None:
        pass

    def grpo_step(self, groups: Sequence[Group]) -> _Stats:
        self.updates.append((self.version, list(groups)))
        self.version += 1  # what the export and sync after it publish
        return _Stats(loss=0.0)

    def export(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        return out

    def save_checkpoint(self, root: Path, *, state: dict, files: dict[str, bytes] | None = None) -> Path:
        return root


def some_wrong(counter: itertools.count) -> object:
    """The arithmetic solver, wrong on every third answer: groups of right and wrong."""

    def policy(conversation: str) -> str:
        text = arithmetic_policy(conversation)
        return "<answer>\\boxed{-1}</answer>" if "<answer>" in text and next(counter) % 3 == 0 else text

    return policy


def config(tmp_path: Path, ports: list[int], *, mode: str, shards: int) -> TrainConfig:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i + 2}*{i + 3}?", "answer": str((i + 2) * (i + 3))}) + "\n"
                            for i in range(20)))  # fmt: skip
    return convert(
        {
            "run": {"out_dir": str(tmp_path / "runs"), "mode": mode, "max_staleness": 1, "samples_per_step": 0},
            "model": {"path": str(tmp_path)},
            "inference": {"base_urls": [f"http://127.0.0.1:{p}/v1" for p in ports], "model": "m"},
            "pool": {"poll_interval_s": 0.05},
            "rollout": {"shards": shards, "max_turns": 3, "max_response_tokens": 300},
            "sandbox": {"workers": 2, "spares": 0, "warmup": ""},
            "reward": {"workers": 2},
            "learner": {"tis_cap": 2.0},
            "stages": [{"name": "rl", "kind": "rl", "data": str(data), "steps": STEPS, "batch_problems": B, "n_oversample": N,
                        "n_keep": 2, "roc_min_per_class": 1}],
        },
        TrainConfig,
    )  # fmt: skip


@pytest.mark.parametrize("shards", [0, 2])
@pytest.mark.parametrize("mode", ["on_policy", "streaming"])
async def test_rl_steps_train_each_group_once_within_the_staleness_bound(tmp_path: Path, mode: str, shards: int) -> None:
    counter = itertools.count()
    fakes = [FakeVLLM(FakeModelServer(policy=some_wrong(counter), delay_s=0.02)) for _ in range(2)]
    base = write_byte_tokenizer(tmp_path / "model")
    driver = FakeLearnerDriver()
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, fake) for fake in fakes]
        trainer = Trainer(config(tmp_path, ports, mode=mode, shards=shards), resume=False)
        trainer.driver = driver  # type: ignore[assignment]
        trainer._check_run_dir()
        with anyio.fail_after(300):  # a bound against a hang, not a timing
            await trainer._lead(base)
        tg.cancel_scope.cancel()

    assert [v for v, _ in driver.updates] == list(range(STEPS)) and trainer.state.weight_version == STEPS
    trained = [(v, g) for v, groups in driver.updates for g in groups]
    assert len(trained) == STEPS * B  # in streaming, B kept groups every step; on-policy, those RoC kept
    ids = [g.problem.id for _, g in trained]
    assert len(set(ids)) == len(ids)  # none trained twice
    for version, group in trained:
        for t in group.trajectories:
            assert all(version - 1 <= turn.weight_version <= version for turn in t.turns)  # staleness 1 at most
    for fake in fakes:
        assert fake.version == str(STEPS)
    records = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("stage") == "rl"]
    assert [r["weight_version"] for r in steps] == list(range(1, STEPS + 1))
    assert all(r["time/reward_s"] > 0 for r in steps)  # the graders' time, from the workers with shards
    if mode == "streaming":
        assert sum(f.aborted for f in fakes) > 0  # the syncs cut turns short (abort mode)...
        assert sum(r["async/turns_interrupted"] for r in steps) > 0  # ...and they were resumed


def test_more_shards_than_servers_is_an_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout\.shards: 3 workers for 2 servers \(inference\.base_urls\)"):
        config(tmp_path, [1, 2], mode="on_policy", shards=3)
    with pytest.raises(ConfigError, match=r"rollout\.shards: expected int >= 0, got -1"):
        config(tmp_path, [1, 2], mode="on_policy", shards=-1)
