"""The invariant of ``benchmarks/train_chaos.py``, on a short run: the real trainer,
pool, weight sync (with its deadline), grader and two real sandbox services, under
the benchmark's own fault schedule (``rstar2_async.testing.inject_faults``): a
server stopped mid-generation and another mid-sync, a sandbox worker SIGKILLed every
second, a service killed mid-step and restarted.  The servers' model and the learner
are the doubles of ``test_train_fleet``.  The run finishes, no group is lost, nothing
trained met an infrastructure failure, and the stopped sync missed its deadline."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import anyio
import pytest

from rstar2_async.config import TrainConfig, convert
from rstar2_async.recipe import Trainer
from rstar2_async.testing import (
    Chaos,
    FakeModelServer,
    FakeVLLM,
    RestartableService,
    chaos_figures,
    inject_faults,
    serve_http,
    write_byte_tokenizer,
)
from sandbox import SandboxConfig
from tests.recipe.test_train_fleet import FakeLearnerDriver, first_answer_wrong

pytestmark = pytest.mark.anyio
STEPS, BATCH = 5, 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a whole run; the parts' own tests cover trio


def free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def config(tmp_path: Path, model_ports: list[int], services: list[str], key: Path) -> TrainConfig:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i + 2}*{i + 3}?", "answer": str((i + 2) * (i + 3))}) + "\n"
                            for i in range(16)))  # fmt: skip
    return convert(
        {
            "run": {"out_dir": str(tmp_path / "runs"), "samples_per_step": 0},
            "model": {"path": str(tmp_path)},
            "inference": {"base_urls": [f"http://127.0.0.1:{p}/v1" for p in model_ports], "model": "m"},
            "pool": {"poll_interval_s": 0.1, "stall_timeout_s": 1.0},
            "weight_sync": {"timeout_s": 2.0},
            "rollout": {"max_turns": 3, "max_response_tokens": 300},
            "sandbox": {"urls": services, "api_key_file": str(key)},
            "reward": {"workers": 1},
            "stages": [{"name": "rl", "kind": "rl", "data": str(data), "steps": STEPS, "batch_problems": BATCH,
                        "n_oversample": 4, "n_keep": 2, "roc_min_per_class": 1}],
        },
        TrainConfig,
    )  # fmt: skip


async def test_a_short_run_under_the_benchmarks_chaos_loses_nothing_and_trains_nothing_that_failed(tmp_path: Path) -> None:
    secret = secrets.token_urlsafe(16)
    key = tmp_path / "sandbox.key"
    key.write_text(secret)
    fakes = [FakeVLLM(FakeModelServer(policy=first_answer_wrong(), delay_s=0.05), load_s=0.3) for _ in range(2)]
    base = write_byte_tokenizer(tmp_path / "model")
    sandbox = SandboxConfig(workers=1, spares=0, warmup="", hang_grace_s=1.0, memory_mb=1024)
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, fake) for fake in fakes]
        services = [RestartableService(port, secret, sandbox, tg) for port in free_ports(2)]
        for service in services:
            await service.start()
        trainer = Trainer(config(tmp_path, ports, [s.url for s in services], key), resume=False)
        trainer.driver = FakeLearnerDriver(base)  # type: ignore[assignment]
        trainer._check_run_dir()
        chaos = Chaos(
            servers=lambda: fakes, requests=lambda i, path: sum(r.path == path for r in fakes[i].log),
            services=services, stall_s=1.5, sync_stop_s=3.0, service_down_s=0.5,  # the load outlasts its 2 s deadline
        )  # fmt: skip
        tg.start_soon(inject_faults, trainer.run_dir, chaos)
        with anyio.fail_after(300):  # a bound against a hang, not a timing
            await trainer._lead(base)
            await chaos.done.wait()  # the restart may come after the last step
        tg.cancel_scope.cancel()
    figures = chaos_figures(trainer.run_dir, BATCH)
    assert figures["steps"] == STEPS
    assert (figures["lost_groups"], figures["infra_failed_trained"]) == (0, 0), figures
    assert figures["sync_deadline_hits"] >= 1, figures
    assert {"server_stopped_generating", "server_stopped_syncing", "service_killed", "service_restarted"} <= set(chaos.counts)
    assert chaos.counts["worker_killed"] >= 1 and not any(f.paused for f in fakes)
