"""Train with the rStar2 recipe: SFT cold start, then GRPO-RoC stages.

CONFIG is a TOML file (see configs/cpu-demo.toml and configs/rstar2-qwen3-14b.toml).
The run writes into <run.out_dir>/<run.name>: config.toml, metrics.jsonl, TensorBoard
logs, samples.jsonl, plots/*.png, eval/, weights/ (the latest exported weights, which
vLLM and transformers load directly) and checkpoints/.  A killed run continues with
--resume from its last checkpoint.  SIGTERM (a scheduler's preemption) stops the run
at the next safe point: the rollout under way is dropped, a learner step under way
finishes, a checkpoint is written, and the command exits with status 143.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rstar2_async.config import TrainConfig
    from rstar2_async.recipe import TrainSummary

HELP = "train a model with SFT + GRPO-RoC stages from a TOML config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the run's TOML config")
    p.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")


def run(args: argparse.Namespace) -> int:
    from rstar2_async.config import TrainConfig, load_toml

    summary = train(load_toml(args.config, TrainConfig), resume=args.resume)
    if summary is None:  # a rank of the learner other than 0
        return 0
    import msgspec

    print(msgspec.json.encode(summary).decode())
    if summary.stopped:
        print(
            f"stopped after RL step {summary.rl_steps}; the checkpoint in {summary.run_dir}/checkpoints "
            f"holds it: continue with `rstar2 train {args.config} --resume`",
            file=sys.stderr,
        )
        return 128 + signal.SIGTERM  # as a process ended by the signal, so a scheduler sees it
    return 0


def train(config: TrainConfig, *, resume: bool) -> TrainSummary | None:
    """Run the trainer in this process: the whole learner, or one rank of it under
    torchrun / the deepspeed launcher (rank 0 returns the summary).

    Raises:
        TrainError: the run cannot start or continue (the message says what to change).
    """
    share_cpu_cores(config)
    import anyio

    from rstar2_async.recipe import Trainer
    from rstar2_async.rollout import RUN_OPTIONS, tune_gc

    if os.environ.get("RANK", "0") == "0":  # the other ranks of a learner run no rollouts
        tune_gc()
    return anyio.run(Trainer(config, resume=resume).run, backend_options=RUN_OPTIONS)


def share_cpu_cores(config: TrainConfig) -> None:
    """One OpenMP thread per process (unless ``OMP_NUM_THREADS`` is set) when the run
    launches its vLLM servers on CPU beside this learner: two OpenMP pools spinning
    over the same cores starve each other (measured on 2 cores with one busy: an SFT
    step took 7 s of CPU instead of 0.3 s).  Before torch loads; the servers inherit it."""
    if config.inference is None and not config.server.gpu_ids:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
