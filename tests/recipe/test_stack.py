"""The weight sync ``rstar2 train`` builds from ``[weight_sync]``: the config's checks,
and a broadcast of a learner's real export from the stack, over gloo, into two
receiver processes that speak vLLM's HTTP choreography.  And ``check_reachable``
against a server that never answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import h11
import msgspec
import pytest
from anyio.abc import SocketStream

from backends import ServerUnavailable
from backends._launcher import free_port
from rstar2_async.config import ConfigError, InferenceConfig, TrainConfig, convert
from rstar2_async.recipe import check_reachable, rollout_stack
from rstar2_async.testing import FakeRawServer, raw_head
from tests.backends.test_weight_sync import assert_holds, weight_receivers

STAGES = [{"name": "rl", "kind": "rl", "data": "x"}]
BROADCAST = {"transport": "broadcast", "master_port": 29600}


def train_config(**sections: Any) -> TrainConfig:
    return convert({"model": {"path": "m"}, "stages": STAGES, **sections}, TrainConfig)


def broadcast_config(ports: list[int]) -> TrainConfig:
    """A config whose weight sync broadcasts over gloo to the receivers on ``ports``."""
    return train_config(
        inference={"base_urls": [f"http://127.0.0.1:{p}/v1" for p in ports], "model": "m"},
        weight_sync={**BROADCAST, "master_port": free_port("127.0.0.1"), "ranks_per_server": 1, "sender": "gloo"},
        sandbox={"workers": 1, "warmup": ""},
        reward={"workers": 1},
    )


def test_default_is_todays_disk_sync() -> None:
    ws = train_config().weight_sync
    assert (ws.transport, ws.pause_mode, ws.sender) == ("disk", None, "nccl")  # None: wait on-policy, abort streaming


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"weight_sync": {"transport": "nccl"}}, 'weight_sync.transport: expected one of "broadcast", "disk", got "nccl"'),
        ({"weight_sync": {"transport": "broadcast"}}, "weight_sync.master_port: required with transport"),
        ({"weight_sync": {**BROADCAST, "master_port": 70000}}, "weight_sync.master_port: expected int >= 1 and <= 65535"),
        ({"weight_sync": {**BROADCAST, "sender": "mpi"}}, 'weight_sync.sender: expected one of "gloo", "nccl", got "mpi"'),
        (
            {"weight_sync": BROADCAST, "inference": {"mode": "chat"}},
            'weight_sync.transport = "broadcast" needs inference.mode = "tokens", got "chat"',
        ),
        ({"weight_sync": BROADCAST, "inference": {}}, "weight_sync.ranks_per_server: required with external servers"),
        (
            {"weight_sync": {**BROADCAST, "ranks_per_server": [1, 1]}, "server": {"num_servers": 3}},
            "weight_sync.ranks_per_server: 2 entries for 3 servers (server.num_servers)",
        ),
    ],
)
def test_config_errors_name_the_field(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        train_config(**sections)
    assert message in str(info.value)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(base model, the learner's export of it)``: a tiny chat model exported in
    bf16, as the trainer exports each version (the base is fp32, so a sync that
    sent anything but the export would show in the dtypes)."""
    from rstar2_async.config import LearnerConfig
    from rstar2_async.demo import build_tiny_model
    from rstar2_async.learn import Learner, save_hf_checkpoint

    root = tmp_path_factory.mktemp("broadcast")
    corpus = ["What is 2 + 3? The answer is 5.", "<answer>\\boxed{5}</answer>", "print(1 + 1)"] * 50
    base = build_tiny_model(root / "base", vocab_size=320, hidden_size=64, num_layers=2, corpus=corpus)
    with pytest.MonkeyPatch.context() as mp:  # a one-process learner; later subprocesses must not inherit it
        for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
            mp.setenv(name, value)
        mp.setenv("MASTER_PORT", str(free_port("127.0.0.1")))
        learner = Learner(LearnerConfig(zero_stage=0, precision="bf16", gradient_checkpointing=False), base)
        try:
            out = save_hf_checkpoint(learner, root / "weights" / "v000001")
        finally:
            learner.close()
    assert out is not None
    return base, out


@pytest.mark.anyio
async def test_broadcast_sync_sends_the_export_to_every_server(export: tuple[Path, Path]) -> None:
    from safetensors.torch import load_file

    base, out = export
    exported = {n: t for f in sorted(out.glob("*.safetensors")) for n, t in load_file(f).items()}
    assert "lm_head.weight" in exported and {str(t.dtype) for t in exported.values()} == {"torch.bfloat16"}
    async with weight_receivers(2) as ports:
        config = broadcast_config(ports)
        assert config.inference is not None
        async with rollout_stack(
            rollout=config.rollout,
            inference=config.inference,
            sandbox=config.sandbox,
            tokenizer_dir=base,
            reward=config.reward,
            weight_sync=config.weight_sync,
        ) as stack:
            assert stack.sync is not None and stack.pool is not None
            with anyio.fail_after(120):
                report = await stack.sync.sync(out, version=1)  # as a resumed run's load_servers does
            assert stack.pool.weight_version == 1
        # Broadcast, and no server needed the disk fallback: what they hold came over gloo.
        assert report.transport == "broadcast" and report.servers == [0, 1]
        assert report.retried == [] and report.removed == []
        for port in ports:
            await assert_holds(port, exported, version="1")


@pytest.mark.anyio
async def test_publish_broadcasts_the_learners_weights_while_it_writes_them(
    export: tuple[Path, Path], tmp_path: Path
) -> None:
    # What the trainer does after each update with the broadcast transport: one
    # gather into memory, the broadcast from it, the export written in the
    # background.  The servers end with exactly the bytes of that export, none
    # through the disk path.
    from functools import partial

    from safetensors.torch import load_file

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, LearnerDriver
    from rstar2_async.recipe import Publisher

    base, _ = export
    out = tmp_path / "weights" / "v000002"
    async with weight_receivers(2) as ports:
        config = broadcast_config(ports)
        assert config.inference is not None
        with pytest.MonkeyPatch.context() as mp:
            for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
                mp.setenv(name, value)
            mp.setenv("MASTER_PORT", str(free_port("127.0.0.1")))
            learner = Learner(LearnerConfig(zero_stage=0, precision="bf16", gradient_checkpointing=False), base)
        try:
            async with rollout_stack(
                rollout=config.rollout, inference=config.inference, sandbox=config.sandbox, tokenizer_dir=base,
                reward=config.reward, weight_sync=config.weight_sync,
            ) as stack:  # fmt: skip
                assert stack.pool is not None

                async def learn(fn: Any, *args: Any) -> Any:
                    return await anyio.to_thread.run_sync(partial(fn, *args))

                with anyio.fail_after(120):
                    async with Publisher(stack, learn, LearnerDriver(learner)) as publisher:
                        report = await publisher.publish(out, 2)
                        assert stack.pool.weight_version == 2
                        await publisher.written()
                        assert (out / "config.json").is_file()
        finally:
            learner.close()
        assert report.transport == "broadcast" and report.servers == [0, 1] and report.retried == []
        exported = {n: t for f in sorted(out.glob("*.safetensors")) for n, t in load_file(f).items()}
        assert "lm_head.weight" in exported and {str(t.dtype) for t in exported.values()} == {"torch.bfloat16"}
        for port in ports:
            await assert_holds(port, exported, version="2")


@pytest.mark.anyio
async def test_check_reachable_gives_up_on_a_server_that_never_answers() -> None:
    """A server that takes the connection but never answers fails in the timeout
    (not a hang: ``timeout`` around pytest); any answer, even a 404, will do."""

    async def silent(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await hung.stall(stream)
        return False

    async def missing(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(raw_head(404, 2) + b"{}")
        return True

    hung, answering = FakeRawServer(silent), FakeRawServer(missing)
    async with anyio.create_task_group() as tg:
        await tg.start(hung.serve)
        await tg.start(answering.serve)
        urls = [f"http://127.0.0.1:{hung.port}/v1", f"http://127.0.0.1:{answering.port}/v1"]
        with anyio.fail_after(30):
            with pytest.raises(ServerUnavailable, match="ReadTimeout"):
                await check_reachable(InferenceConfig(base_urls=urls[:1], connect_timeout_s=0.3))
            await check_reachable(InferenceConfig(base_urls=urls, connect_timeout_s=0.3))
            await hung.wait_gone(2)  # each try's connection closed
        tg.cancel_scope.cancel()
    assert answering.requests == 1


@pytest.mark.anyio
async def test_a_template_without_tool_results_fails_before_anything_starts(tmp_path: Path) -> None:
    """No server is asked (none listens on the URL): the template is checked first,
    and ``rollout.chat_template`` is the fix it names."""
    from rstar2_async.config import RolloutConfig
    from sandbox import SandboxConfig
    from tests.rollout.chat_templates import CHATML_DROPPING_TOOLS, QWEN25_STYLE, qwen_tokenizer

    tokenizer = qwen_tokenizer(tmp_path / "tok", CHATML_DROPPING_TOOLS)
    nowhere = InferenceConfig(base_urls=[f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"], model="m")
    sandbox = SandboxConfig(workers=1, warmup="")
    with pytest.raises(ConfigError, match="leaves a tool result's text out.*rollout.chat_template"):
        async with rollout_stack(rollout=RolloutConfig(), inference=nowhere, sandbox=sandbox, tokenizer_dir=tokenizer):
            pass
    (tmp_path / "fixed.jinja").write_text(QWEN25_STYLE)
    fixed = RolloutConfig(chat_template=str(tmp_path / "fixed.jinja"))
    with pytest.raises(ConfigError, match="rollout.chat_template = .* applies to token mode"):
        chat = msgspec.structs.replace(nowhere, mode="chat")
        async with rollout_stack(rollout=fixed, inference=chat, sandbox=sandbox):
            pass
