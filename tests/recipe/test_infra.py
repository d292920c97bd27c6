"""Infrastructure failures kept out of learning, at the trainer's level.

The breaker by itself on literal groups; then the real trainer (real pool, weight sync,
grader, GRPO-RoC, recorder) whose ``[sandbox] urls`` are two real sandbox services on
loopback: one is killed in the middle of step 1 (the client fails over: nothing is
lost), the other after step 1's update, so step 2's every tool call fails: none of it
is trained on, the model never reads it, and the breaker stops the run naming the tool
and the sandbox's reason.  The model and the learner are the doubles of
``test_train_fleet``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.from_thread
import msgspec
import pytest

from rstar2_async.config import TrainConfig, convert
from rstar2_async.errors import TrainError
from rstar2_async.recipe import Trainer
from rstar2_async.recipe._infra import InfraBreaker
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeVLLM, serve_http, write_byte_tokenizer
from rstar2_async.types import Group, Problem, Trajectory
from tests.recipe.test_train_fleet import FakeLearnerDriver, first_answer_wrong
from tests.sandbox._helpers import live_service, wait_until

pytestmark = pytest.mark.anyio
PROBLEM = Problem("p", "q", "1")


def group(clean: int, failed: int = 0, retried: int = 0, part: str = "tool python") -> Group:
    """``clean`` trajectories (``retried`` of them after one failed try) and ``failed`` ones."""
    t = Trajectory("p", 0, [], [], [], [], [], "answer", 0, reward=1.0)
    again = [msgspec.structs.replace(t, infra_retries=[f"{part}: [sandbox] queue full"]) for _ in range(retried)]
    bad = [msgspec.structs.replace(t, finish_reason="error", infra_failure=f"{part}: [sandbox] gone", reward=None)] * failed
    return Group(PROBLEM, again + [t] * (clean - retried) + bad)


def test_the_breaker_pools_the_window_and_names_the_failing_parts() -> None:
    breaker = InfraBreaker(0.2, window=5)
    for step in range(1, 5):
        breaker.observe(step, [group(10)])
    breaker.observe(5, [group(0, failed=10)])  # one step failing entirely: 10 of 50, not above 0.2
    with pytest.raises(TrainError) as info:
        breaker.observe(6, [group(0, failed=6), group(0, failed=4, part="inference")])  # 20 of 50 over steps 2-6
    message = str(info.value)
    assert message.startswith("step 6: 20 of 50 rollout attempts over the last 5 steps (40%)")
    assert "tool python: 16 failed, the last with '[sandbox] gone'; inference: 4 failed" in message
    assert "run.max_infra_failed_rate = 0.2" in message and "--resume" in message


def test_tries_rolled_again_count_and_a_broken_first_step_stops_at_once() -> None:
    with pytest.raises(TrainError, match=r"step 1: 10 of 20 rollout attempts over the last 1 step \(50%\)"):
        InfraBreaker(0.2).observe(1, [group(10, retried=10)])  # every sample needed a second try
    never = InfraBreaker(1.0)
    for step in range(1, 4):
        never.observe(step, [group(0, failed=5)])


def find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first ``kind`` in ``exc`` or its (nested) groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((f for e in exc.exceptions if (f := find(e, kind)) is not None), None)
    return None


def config(tmp_path: Path, model_port: int, urls: Sequence[str], key_file: Path) -> TrainConfig:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i + 2}*{i + 3}?", "answer": str((i + 2) * (i + 3))}) + "\n"
                            for i in range(8)))  # fmt: skip
    return convert(
        {
            "run": {"out_dir": str(tmp_path / "runs"), "samples_per_step": 2},
            "model": {"path": str(tmp_path)},
            "inference": {"base_urls": [f"http://127.0.0.1:{model_port}/v1"], "model": "m"},
            "pool": {"poll_interval_s": 0.05},
            # One trajectory at a time: step 1's tool calls alternate between the services.
            "rollout": {"max_turns": 3, "max_response_tokens": 300, "infra_rerolls": 1, "max_in_flight": 1},
            "sandbox": {"urls": list(urls), "api_key_file": str(key_file)},
            "reward": {"workers": 1},
            "stages": [{"name": "rl", "kind": "rl", "data": str(data), "steps": 3, "batch_problems": 2, "n_oversample": 4,
                        "n_keep": 2, "roc_min_per_class": 1}],
        },
        TrainConfig,
    )  # fmt: skip


class WatchedDriver(FakeLearnerDriver):
    """Tells the test when an update begins (it runs in a worker thread)."""

    def __init__(self, base: Path, updated: anyio.Event) -> None:
        super().__init__(base)
        self.updated = updated

    def grpo_step(self, groups: Sequence[Group], version: int | None = None) -> object:
        stats = super().grpo_step(groups, version)
        anyio.from_thread.run_sync(self.updated.set)
        return stats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a whole run with two sandbox services; the parts' own tests cover trio


async def test_a_run_survives_a_killed_sandbox_service_and_stops_when_none_is_left(tmp_path: Path) -> None:
    key = tmp_path / "sandbox.key"
    key.write_text("sandbox-secret")
    model = FakeVLLM(FakeModelServer(policy=first_answer_wrong()))
    updated = anyio.Event()
    base = write_byte_tokenizer(tmp_path / "model")
    driver = WatchedDriver(base, updated)
    async with (
        live_service("sandbox-secret", workers=1) as first,
        live_service("sandbox-secret", workers=1) as second,
        anyio.create_task_group() as tg,
    ):
        port = await tg.start(serve_http, model)

        async def faults() -> None:
            await wait_until(lambda: first.pool.statistics().calls >= 1)
            await first.kill()  # in the middle of step 1
            await updated.wait()
            await second.kill()  # after step 1's update: step 2 has no sandbox at all

        tg.start_soon(faults)
        trainer = Trainer(config(tmp_path, port, [first.url, second.url], key), resume=False)
        trainer.driver = driver  # type: ignore[assignment]
        trainer._check_run_dir()
        with pytest.raises(BaseException) as info, anyio.fail_after(300):  # a bound against a hang, not a timing
            await trainer._lead(base)
        tg.cancel_scope.cancel()

    error = find(info.value, TrainError)
    assert re.match(
        r"step 2: 16 of 24 rollout attempts over the last 2 steps \(67%\) stopped at an infrastructure failure, above "
        r"run.max_infra_failed_rate = 0.2: tool execute_python_code_with_standard_io: 16 failed, the last with "
        r"'\[sandbox\] sandbox service unreachable: http://127.0.0.1:\d+: ConnectError", str(error),
    ), error  # fmt: skip
    records = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/infra_failed_rate"] for r in records] == [0.0, 1.0]  # step 1 failed over; step 2 had nothing
    assert records[1]["roc/dropped_infra_failed"] == 8 and records[1]["roc/groups_kept"] == 0
    # The first had served 1 or 2 of step 1's 8 calls (4 in turn had it lived); the second took the rest.
    calls = first.pool.statistics().calls, second.pool.statistics().calls
    assert calls[0] < 4 and sum(calls) >= 8, calls
    # Nothing trained after step 1, and nothing trained ever met a failure.
    assert len(driver.updates) == 1 and all(not t.infra_failed for _, gs in driver.updates for g in gs for t in g.trajectories)
    seen = "".join(FakeByteTokenizer().decode(r["prompt"]) for r in model.scripted.requests if "prompt" in r)
    assert "[sandbox]" not in seen
    recorded = [json.loads(line) for line in (trainer.run_dir / "trajectories" / "records.jsonl").read_text().splitlines()]
    assert {r["roc"] for r in recorded if r["step"] == 2} == {"infra_failed"}
