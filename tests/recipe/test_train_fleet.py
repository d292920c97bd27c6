"""The trainer's RL loop, on-policy and streaming, in this process and in rollout
shards (``rollout.shards``), against fake vLLM servers over HTTP: the real stack
(pool, weight sync, jailed sandbox, grader, shard workers) and the real trainer;
only the servers' model and the learner are test doubles.

Checked: every trained group is trained once, the final evaluation runs, no group is staler than
``run.max_staleness``, each turn carries the version that generated it, and in
streaming mode the syncs cut turns short that then resume on the new weights.
(tests/integration runs the same loop against a real vLLM and a real learner.)"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import msgspec
import pytest

from rstar2_async.config import ConfigError, TrainConfig, convert
from rstar2_async.recipe import Trainer, batch_for_step, load_problems
from rstar2_async.testing import (
    FakeModelServer, FakeVLLM, arithmetic_policy, fake_logprobs, serve_http, write_byte_tokenizer,
)  # fmt: skip
from rstar2_async.types import Group

pytestmark = pytest.mark.anyio

STEPS, B, N = 3, 2, 4


class _Stats(msgspec.Struct, frozen=True):
    loss: float


class FakeLearnerDriver:
    """Test double of :class:`rstar2_async.learn.LearnerDriver`: records what each
    update trains (with the version it starts from) and exports a stub directory; its
    probe log-probs are what a ``FakeVLLM`` holding its last export (at first
    ``base``) answers, so every sync is verified as the trainer runs it."""

    def __init__(self, base: Path) -> None:
        self.version = 0
        self.updates: list[tuple[int, list[Group]]] = []
        self.weights = str(base.resolve())

    def probe_logprobs(self) -> tuple[list[int], list[float]]:
        ids = list(range(3, 40))
        return ids, fake_logprobs(self.weights, ids)

    def set_peak_lr(self, lr: float) -> None:
        pass

    def grpo_step(self, groups: Sequence[Group], version: int | None = None) -> _Stats:
        assert version == self.version, (version, self.version)  # the trainer names the weights it trains
        self.updates.append((self.version, list(groups)))
        self.version += 1  # what the export and sync after it publish
        return _Stats(loss=0.0)

    def export(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        self.weights = str(out.resolve())
        return out

    def save_checkpoint(self, root: Path, *, state: dict, files: dict[str, bytes] | None = None) -> Path:
        return root


def first_answer_wrong() -> object:
    """The arithmetic solver, wrong on the first answer to each problem: every group
    has right and wrong answers, so RoC keeps each one (and the count is exact)."""
    answered: set[str] = set()

    def policy(conversation: str) -> str:
        text = arithmetic_policy(conversation)
        if "<answer>" in text:
            problem = conversation.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
            if problem not in answered:
                answered.add(problem)
                return "<answer>\\boxed{-1}</answer>"
        return text

    return policy


class HoldOneTurn:
    """Holds the first turn of one problem until a sync pauses its server (``abort``
    or ``keep``): a turn in flight that the sync must interrupt, whenever it comes."""

    def __init__(self, problem: str) -> None:
        self.problem, self.taken = problem, False

    def wrap(self, fake: FakeVLLM) -> Callable[[str, str, bytes], Awaitable[tuple[int, bytes]]]:
        """``fake``'s handler, its model holding that turn."""
        paused = anyio.Event()
        fake.scripted = _Held(fake.scripted, self, paused)  # type: ignore[assignment]
        pauses = 0

        async def handle(method: str, target: str, body: bytes) -> tuple[int, bytes]:
            nonlocal pauses
            if target.startswith("/pause") and ("mode=abort" in target or "mode=keep" in target):
                pauses += 1
                if pauses > 1:  # the first is the start-up check's, before any turn
                    paused.set()
            return await fake(method, target, body)

        return handle


class _Held:
    def __init__(self, model: FakeModelServer, hold: HoldOneTurn, paused: anyio.Event) -> None:
        self.model, self.tokenizer, self.hold, self.paused = model, model.tokenizer, hold, paused

    async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        prompt = json.loads(body)["prompt"] if path == "/v1/completions" else []
        if not self.hold.taken and self.hold.problem in self.tokenizer.decode(prompt):
            self.hold.taken = True
            await self.paused.wait()
        return await self.model(method, path, body)


def config(tmp_path: Path, ports: list[int], *, mode: str, shards: int, pause: str | None = None) -> TrainConfig:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i + 2}*{i + 3}?", "answer": str((i + 2) * (i + 3))}) + "\n"
                            for i in range(20)))  # fmt: skip
    return convert(
        {
            "run": {"out_dir": str(tmp_path / "runs"), "mode": mode, "max_staleness": 1, "samples_per_step": 0},
            "model": {"path": str(tmp_path)},
            "inference": {"base_urls": [f"http://127.0.0.1:{p}/v1" for p in ports], "model": "m"},
            "pool": {"poll_interval_s": 0.05},
            "weight_sync": {} if pause is None else {"pause_mode": pause},
            "rollout": {"shards": shards, "max_turns": 3, "max_response_tokens": 300},
            "sandbox": {"workers": 2, "spares": 0, "warmup": ""},
            "reward": {"workers": 2},
            "learner": {"tis_cap": 2.0},
            "eval": {"data": [str(data)], "limit": 3, "n": 2},
            "stages": [{"name": "rl", "kind": "rl", "data": str(data), "steps": STEPS, "batch_problems": B, "n_oversample": N,
                        "n_keep": 2, "roc_min_per_class": 1}],
        },
        TrainConfig,
    )  # fmt: skip


# Each mode in this process and in shards, each on both event loops, once: every
# mode on asyncio and on trio, without the 12 runs of the full product.
@pytest.mark.parametrize(
    ("mode", "pause", "shards", "anyio_backend"),
    [("on_policy", None, 0, "asyncio"), ("on_policy", None, 2, "trio"), ("streaming", None, 0, "trio"),
     ("streaming", None, 2, "asyncio"), ("streaming", "keep", 0, "asyncio"), ("streaming", "keep", 2, "trio")],
)  # fmt: skip
async def test_rl_steps_train_each_group_once_within_the_staleness_bound(
    tmp_path: Path, mode: str, pause: str | None, shards: int, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = first_answer_wrong()
    fakes = [FakeVLLM(FakeModelServer(policy=policy, delay_s=0.01)) for _ in range(2)]
    handlers: list[Callable[[str, str, bytes], Awaitable[tuple[int, bytes]]]] = list(fakes)
    train = config(tmp_path, [0, 0], mode=mode, shards=shards)
    if mode == "streaming":  # the first turn of the first group step 2 trains: in flight at the first sync
        stage = train.stages[0]
        second = batch_for_step(load_problems(stage.data), B, seed=train.run.seed, stage=0, step=1)[0]
        hold = HoldOneTurn(second.problem)
        handlers = [hold.wrap(fake) for fake in fakes]
    base = write_byte_tokenizer(tmp_path / "model")
    driver = FakeLearnerDriver(base)
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, handler) for handler in handlers]
        trainer = Trainer(config(tmp_path, ports, mode=mode, shards=shards, pause=pause), resume=False)
        trainer.driver = driver  # type: ignore[assignment]
        trainer._check_run_dir()
        with anyio.fail_after(300):  # a bound against a hang, not a timing
            await trainer._lead(base)
        tg.cancel_scope.cancel()

    records = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("stage") == "rl"]
    # A step trains what RoC kept of its B groups: every one with first_answer_wrong,
    # unless a sync's abort cut a wrong first answer short and its group ended all right
    # (a step left with none updates nothing and keeps the version).
    updated = [r["weight_version"] for r in steps if r["roc/groups_kept"]]
    assert [v for v, _ in driver.updates] == [v - 1 for v in updated] == list(range(len(updated)))
    assert len(updated) >= 1 and trainer.state.weight_version == len(updated)
    trained = [(v, g) for v, groups in driver.updates for g in groups]
    assert len(trained) == sum(r["roc/groups_kept"] for r in steps) <= STEPS * B
    ids = [g.problem.id for _, g in trained]
    assert len(set(ids)) == len(ids)  # none trained twice
    for version, group in trained:
        for t in group.trajectories:
            assert all(version - 1 <= turn.weight_version <= version for turn in t.turns)  # staleness 1 at most
    for fake in fakes:
        assert fake.version == str(len(updated))
        assert fake.weights == driver.weights  # every sync verified (a probe of other weights would have failed it)
    assert all(r["sync/probe_diff_max"] == 0.0 for r in steps if r["roc/groups_kept"])
    assert len(steps) == STEPS and [r["weight_version"] for r in steps] == sorted(r["weight_version"] for r in steps)
    [evaluation] = trainer.state.evals
    assert evaluation["stage"] == "final" and evaluation["accuracy"] > 0  # the solver's samples were graded
    summary = json.loads(next((trainer.run_dir / "eval").glob("*/train/summary.json")).read_text())
    assert summary["problems"] == 3 and summary["n"] == 2 and summary["errors"] == 0
    # The graders' time (from the workers with shards).  A streaming step counts only the
    # grading it waited through, which is none when its groups were graded before it began.
    if mode == "on_policy":
        assert sum(r["time/reward_s"] for r in steps) > 0
    if mode == "streaming":  # a sync interrupted the held turn: cut short (abort), or frozen (keep)...
        assert hold.taken and (sum(f.aborted for f in fakes) > 0) == (pause is None)
        assert sum(r["async/turns_interrupted"] for r in steps) > 0  # ...and it was counted
    # stderr is no terminal here: the run said what it uses at start, then a line a step.
    err = capsys.readouterr().err.splitlines()
    said = [line.removeprefix("rstar2 train: ").split(":")[0] for line in err if line.startswith("rstar2 train: ")]
    steps_said = [f"step {k} (rl {k}/{STEPS})" for k in range(1, STEPS + 1)]
    assert said == ["model", "chat template", "grading", "weight sync", *steps_said]


def test_more_shards_than_servers_is_an_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout\.shards: 3 workers for 2 servers \(inference\.base_urls\)"):
        config(tmp_path, [1, 2], mode="on_policy", shards=3)
    with pytest.raises(ConfigError, match=r"rollout\.shards: expected int >= 0, got -1"):
        config(tmp_path, [1, 2], mode="on_policy", shards=-1)


def test_keep_pause_on_an_engine_without_it_is_an_error_naming_the_field(tmp_path: Path) -> None:
    train = msgspec.to_builtins(config(tmp_path, [1, 2], mode="streaming", shards=0, pause="keep"))
    del train["inference"]
    train["server"] = {"engine": "sglang"}
    message = r'weight_sync\.pause_mode = "keep" needs vLLM servers; server\.engine = "sglang"'
    with pytest.raises(ConfigError, match=message):
        convert(train, TrainConfig)
    train["server"] = {"engine": "vllm"}
    assert convert(train, TrainConfig).weight_sync.pause_mode == "keep"
