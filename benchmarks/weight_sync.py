"""Weight-sync benchmark: time to move a model of 100 MB and 1 GB to a server, per transport.

The "server" is tests/backends/_weight_receiver.py: a process speaking vLLM's
weight-sync HTTP choreography that really receives the weights into its own
memory, as vLLM copies them into its parameters (disk: it reads every
safetensors file and copies each tensor into its parameter, as
``reload_weights`` does; broadcast: it receives every tensor over a gloo group
from this process, on loopback).  The model is float32 tensors of 16 MB.

What is timed: a sync is the whole :meth:`WeightSync.sync` (pause, load, flush,
version, resume over HTTP).  The disk sync starts from weights the learner has
already exported; the export is timed apart as ``learner_save_s`` (median over
the repeats, one export per repeat, each replacing the last).  It is the learner's
real export, ``save_hf_checkpoint`` (its buckets of ``learner.export_bucket_mb``,
safetensors shards of ``learner.export_shard_mb`` written by
``_export_writer.write_safetensors_dir``, config.json, every file and the directory
fsynced, the directory renamed into place), called on a stand-in for a ZeRO-0
learner on CPU in float32: a module whose parameters are the benchmark's tensors
(a DeepSpeed learner of 1 GB on CPU takes longer to build than the benchmark runs;
ZeRO 0-2 gather nothing, and with the export dtype the training one nothing is
cast, so the stand-in runs the same code on the same bytes; ZeRO-3's gathers and a
GPU's device-to-host copies are not timed).  The broadcast sync starts from
tensors in the learner's memory.  The baseline, in the same run, is ``cp -r`` of
the exported directory then reading the copy back: it writes and reads the bytes
once each (both through the page cache, as the sync's reads are; without the
export's fsyncs), so it is a floor for "put the bytes somewhere and read them",
not for "make a process hold them".  Medians over ``--repeats``;
``disk_sync_vs_copy`` is the disk sync's median over the copy's (the largest over
the sizes at top level), ``save_and_disk_sync_vs_copy`` is (export + disk sync)
over the copy.

Publishing with the broadcast transport (step 7 as the trainer runs it,
``recipe._publish.Publisher``), in the same run: ``publish_broadcast_s`` is ours, the
time until ``publish`` returns (one gather into memory, then the broadcast from it;
the export directory is written in the background, done after
``publish_broadcast_written_s``); ``publish_broadcast_before_s`` is what the trainer
did before, the export to disk then the broadcast of that directory's tensors.
``publish_speedup`` is before over ours (medians): how much sooner the trainer goes
on to the next rollout and update; ``*_hold_s`` is how long the servers were held
(the sync alone).

Usage: ``python benchmarks/weight_sync.py [--sizes-mb 100 1000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio

from backends import BroadcastTransport, DiskTransport, ServerPool, WeightSync
from rstar2_async.config import LearnerConfig
from rstar2_async.recipe import Publisher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_weights(size_mb: int):
    import torch

    n = size_mb * (1 << 20) // 4
    per = (16 << 20) // 4  # 16 MB tensors, like transformer matrices
    tensors, i = {}, 0
    while n > 0:
        k = min(per, n)
        tensors[f"model.layers.{i}.weight"] = torch.randn(k)
        n -= k
        i += 1
    return tensors


class ExportingLearner:
    """What ``save_hf_checkpoint`` reads of a :class:`Learner`: rank 0 of a ZeRO-0
    learner on CPU in float32 whose parameters are ``weights`` (shared, not copied)."""

    def __init__(self, weights: dict, model_path: Path) -> None:
        import torch
        from transformers import PretrainedConfig

        class Module(torch.nn.Module):
            def named_parameters(self, *args, **kwargs):
                return iter(self.params.items())

        self.rank, self.dtype, self.model_path = 0, torch.float32, model_path
        self.config = LearnerConfig(zero_stage=0, precision="fp32")
        self.module = Module()
        self.module.params = {n: torch.nn.Parameter(t, requires_grad=False) for n, t in weights.items()}
        self.module.config = PretrainedConfig()


def export(learner: ExportingLearner, out: Path) -> float:
    from rstar2_async.learn import save_hf_checkpoint

    t0 = time.perf_counter()
    save_hf_checkpoint(learner, out)
    return time.perf_counter() - t0


class Stack:
    """What ``publish`` reads of a rollout stack: its weight sync, no fleet."""

    def __init__(self, sync: WeightSync) -> None:
        self.sync, self.fleet = sync, None


class Driver:
    """What ``publish`` asks of the learner driver, on the one-rank stand-in."""

    def __init__(self, learner: ExportingLearner) -> None:
        self.learner = learner

    def gather_export(self):
        from rstar2_async.learn import gather_export

        return gather_export(self.learner)

    def export(self, out: Path) -> None:
        export(self.learner, out)


async def learn(fn, *args):
    return await anyio.to_thread.run_sync(fn, *args)


async def publish_before(learner: ExportingLearner, out: Path, sync: WeightSync, version: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    await learn(export, learner, out)
    report = await sync.sync(out, version)
    return time.perf_counter() - t0, report.total_s


async def publish_ours(learner: ExportingLearner, out: Path, sync: WeightSync, version: int) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    async with Publisher(Stack(sync), learn, Driver(learner)) as publisher:  # type: ignore[arg-type]
        report = await publisher.publish(out, version)
        returned = time.perf_counter() - t0
    return returned, report.total_s, time.perf_counter() - t0


def copy_and_read(src: Path, dst: Path) -> float:
    shutil.rmtree(dst, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    for f in sorted(dst.iterdir()):
        with f.open("rb") as fh:
            while fh.read(1 << 24):
                pass
    return time.perf_counter() - t0


async def run(sizes: list[int], repeats: int) -> dict:
    port = free_port()
    proc = await anyio.open_process(
        [sys.executable, str(ROOT / "tests/backends/_weight_receiver.py"), str(port)], stdout=subprocess.PIPE, stderr=None
    )
    results: dict = {"benchmark": "weight_sync", "repeats": repeats, "export": "learn.save_hf_checkpoint"}
    try:
        assert proc.stdout is not None and b"ready" in await proc.stdout.receive()
        async with ServerPool([f"http://127.0.0.1:{port}"], model="m", poll_interval_s=1.0) as pool:
            broadcast = WeightSync(pool, BroadcastTransport(master_port=free_port()))
            disk = WeightSync(pool, DiskTransport())
            version = 0
            for size in sizes:
                weights = make_weights(size)
                with tempfile.TemporaryDirectory() as tmp:
                    src = Path(tmp) / "weights"
                    learner = ExportingLearner(weights, Path(tmp))
                    saves, copies, disks, casts, phases, before, ours = [], [], [], [], [], [], []
                    for _ in range(repeats):
                        saves.append(await anyio.to_thread.run_sync(export, learner, src))
                        copies.append(await anyio.to_thread.run_sync(copy_and_read, src, Path(tmp) / "copy"))
                        version += 1
                        report = await disk.sync(src, version)
                        disks.append(report.total_s)
                        phases.append(report)
                        version += 1
                        casts.append((await broadcast.sync(weights, version)).total_s)
                        version += 1
                        before.append(await publish_before(learner, Path(tmp) / "published", broadcast, version))
                        version += 1
                        ours.append(await publish_ours(learner, Path(tmp) / "published", broadcast, version))
                m = statistics.median
                save_s = m(saves)
                results[f"{size}mb"] = {
                    "copy_and_read_s": round(m(copies), 3),
                    "disk_sync_s": round(m(disks), 3),
                    "broadcast_sync_s": round(m(casts), 3),
                    "disk_load_s": round(m(r.load_s for r in phases), 3),
                    "disk_pause_resume_flush_version_s": round(m(r.pause_s + r.resume_s + r.flush_s + r.version_s for r in phases), 3),
                    "disk_sync_vs_copy": round(m(disks) / m(copies), 3),
                    "learner_save_s": round(save_s, 3),
                    "save_and_disk_sync_vs_copy": round((save_s + m(disks)) / m(copies), 3),
                    "broadcast_s_per_gb": round(m(casts) / (size / 1024), 3),
                    "learner_save_s_per_gb": round(save_s / (size / 1024), 3),
                    "publish_broadcast_before_s": round(m(b for b, _ in before), 3),
                    "publish_broadcast_s": round(m(o for o, _, _ in ours), 3),
                    "publish_broadcast_written_s": round(m(w for _, _, w in ours), 3),
                    "publish_speedup": round(m(b for b, _ in before) / m(o for o, _, _ in ours), 3),
                    "publish_broadcast_before_hold_s": round(m(h for _, h in before), 3),
                    "publish_broadcast_hold_s": round(m(h for _, h, _ in ours), 3),
                }
                del weights, learner
    finally:
        proc.kill()
        await proc.wait()
    results["disk_sync_vs_copy"] = max(v["disk_sync_vs_copy"] for k, v in results.items() if k.endswith("mb"))
    results["publish_speedup"] = min(v["publish_speedup"] for k, v in results.items() if k.endswith("mb"))
    results["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args.sizes_mb, args.repeats)))


if __name__ == "__main__":
    main()
