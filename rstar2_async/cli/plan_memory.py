"""Estimate the learner's memory per rank for a run config, before any GPU is taken.

Reads the model's config.json (hidden size, layers, heads, MLP width, vocabulary)
and the [learner] section (ZeRO stage, precision, gradient checkpointing,
micro_batch_tokens) and prints the bytes per rank for parameters, gradients,
optimizer states, activations (with and without gradient checkpointing) and the
log-prob chunk, against the device's memory.  Exits 1, naming the field to change,
when the plan does not fit: the trainer refuses to start on the same estimate.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HELP = "estimate the learner's memory per rank for a run config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the run's TOML config")
    p.add_argument(
        "--ranks", type=int, default=int(os.environ.get("WORLD_SIZE", "1")),
        help="learner ranks (data-parallel devices ZeRO partitions over; default $WORLD_SIZE or 1)",
    )  # fmt: skip
    p.add_argument(
        "--device-memory-gb",
        type=float,
        help="memory of one device in GB (default: learner.device_memory_gb, else this machine's GPU)",
    )
    p.add_argument("--model", type=Path, help="model directory to read config.json from (default: model.path)")


def run(args: argparse.Namespace) -> int:
    from rstar2_async.config import ConfigError, ModelShape, TrainConfig, load_toml, plan_memory

    config = load_toml(args.config, TrainConfig)
    model = args.model or (Path(config.model.path) if config.model.path else None)
    if model is None or not (model / "config.json").is_file():
        raise ConfigError(f"model: no config.json in {model} (a [model.tiny] config needs --model DIR)")
    gb = args.device_memory_gb or config.learner.device_memory_gb
    device_bytes = int(gb * 1e9) if gb else _cuda_memory()
    plan = plan_memory(ModelShape.from_dir(model), config.learner, ranks=args.ranks, device_bytes=device_bytes)
    c = config.learner
    print(f"model {model}: {ModelShape.from_dir(model).params / 1e9:.2f}B parameters; ZeRO-{c.zero_stage}, {c.precision},"
          f" {args.ranks} rank(s), micro_batch_tokens={c.micro_batch_tokens}, log-prob chunk {c.logprob_chunk_tokens} tokens")  # fmt: skip
    gib = 1024**3
    rows = {
        "parameters": plan.params, "gradients": plan.gradients, "optimizer states": plan.optimizer,
        "activations (checkpointed)": plan.activations_with_checkpointing,
        "activations (not checkpointed)": plan.activations_without_checkpointing,
        "log-prob chunk": plan.logprob_chunk, "total (as configured)": plan.total,
    }  # fmt: skip
    for name, value in rows.items():
        print(f"  {name:<32}{value / gib:10.2f} GiB")
    print(plan.line())
    return 0 if plan.fits else 1


def _cuda_memory() -> int | None:
    """This machine's first GPU's memory (nvidia-smi: the CLI does not import torch),
    or None without one."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=0"]
    out = subprocess.run(query, check=False, capture_output=True, text=True, timeout=30)
    return int(out.stdout.split()[0]) * 2**20 if out.returncode == 0 and out.stdout.strip() else None  # MiB
