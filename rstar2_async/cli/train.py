"""Train with the rStar2 recipe: SFT cold start, then GRPO-RoC stages.

CONFIG is a TOML file (see configs/cpu-demo.toml and configs/rstar2-qwen3-14b.toml).
The run writes into <run.out_dir>/<run.name>: config.toml, metrics.jsonl, TensorBoard
logs, samples.jsonl, plots/*.png, eval/, weights/ (the latest exported weights, which
vLLM and transformers load directly) and checkpoints/.  A killed run continues with
--resume from its last checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "train a model with SFT + GRPO-RoC stages from a TOML config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the run's TOML config")
    p.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")


def run(args: argparse.Namespace) -> int:
    from rstar2_async.configio import ConfigError, load_toml
    from rstar2_async.data import DatasetError
    from rstar2_async.train_config import TrainConfig

    try:
        config = load_toml(args.config, TrainConfig)
        summary = train(config, resume=args.resume)
    except (ConfigError, DatasetError) as exc:
        print(f"rstar2 train: {exc}", file=sys.stderr)
        return 2
    if summary is not None:  # rank 0 of the learner reports
        import msgspec

        print(msgspec.json.encode(summary).decode())
    return 0


def train(config, *, resume: bool):  # type: ignore[no-untyped-def]
    """Run the trainer in this process (the learner is a single DeepSpeed rank)."""
    import anyio

    from rstar2_async.runtime import RUN_OPTIONS, tune_gc
    from rstar2_async.trainer import TrainError, Trainer

    tune_gc()
    try:
        return anyio.run(Trainer(config, resume=resume).run, backend_options=RUN_OPTIONS)
    except TrainError as exc:
        print(f"rstar2 train: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
