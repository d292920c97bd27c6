"""The CPU demo: a tiny model learns to use the Python tool, end to end.

Writes a synthetic task (exact products of two-digit numbers, which the model can only
get right by running code and copying the result into \\boxed{}) under
<run dir>/data, then trains with CONFIG (default configs/cpu-demo.toml): SFT cold
start on transcripts of an imperfect teacher (it guesses without the tool in
``--guess-fraction`` of them), then GRPO-RoC through a vLLM server, the jailed
sandbox pool, the DeepSpeed learner and weight sync from disk.  Prints the held-out accuracy
after SFT and after RL, the share of time per phase, and where the plots are.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

HELP = "run the tiny end-to-end CPU training (SFT + GRPO-RoC on a synthetic tool task)"

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cpu-demo.toml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="demo config (default: configs/cpu-demo.toml)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted demo run")
    p.add_argument("--train-problems", type=int, default=4000, help="RL problem pool size")
    p.add_argument("--sft-transcripts", type=int, default=4000, help="SFT transcripts")
    p.add_argument(
        "--guess-fraction", type=float, default=0.3,
        help="share of SFT transcripts where the teacher guesses instead of using the tool (RL must unlearn it)",
    )  # fmt: skip
    p.add_argument("--heldout", type=int, default=100, help="held-out problems for the accuracy figures")
    p.add_argument("--min-digits", type=int, default=2, help="fewest digits of an operand")
    p.add_argument("--max-digits", type=int, default=2, help="most digits of an operand")


def run(args: argparse.Namespace) -> int:
    import time

    import msgspec

    from rstar2_async.cli.train import train
    from rstar2_async.config import ConfigError, TrainConfig, load_toml
    from rstar2_async.demo import (
        SYSTEM_PROMPT,
        make_problems,
        write_problems,
        write_sft_transcripts,
    )

    t0 = time.monotonic()
    try:
        config = load_toml(args.config, TrainConfig)
    except ConfigError as exc:
        print(f"rstar2 demo: {exc}", file=sys.stderr)
        return 2
    run_dir = Path(config.run.out_dir) / config.run.name
    data = run_dir / "data"
    system = config.rollout.system_prompt or SYSTEM_PROMPT
    # Disjoint seeds: held-out problems are never trained on (collisions are removed).
    digits = (args.min_digits, args.max_digits)
    heldout = make_problems(args.heldout, seed=1_000_003, prefix="heldout", digits=digits)
    seen = {p.problem for p in heldout}
    train_pool = [p for p in make_problems(args.train_problems, seed=1, prefix="train", digits=digits) if p.problem not in seen]
    sft = [p for p in make_problems(args.sft_transcripts, seed=2, prefix="sft", digits=digits) if p.problem not in seen]
    write_problems(heldout, data / "heldout.jsonl")
    write_problems(train_pool, data / "train.jsonl")
    write_sft_transcripts(sft, data / "sft.jsonl", system=system, guess_fraction=args.guess_fraction, seed=2)

    summary = train(config, resume=args.resume)
    if summary.stopped:
        print("stopped (SIGTERM); continue with `rstar2 demo --resume` and the same options", file=sys.stderr)
        return 128 + signal.SIGTERM
    after_sft = next((e for e in summary.evals if e["stage"] == "sft"), None)
    final = summary.evals[-1] if summary.evals else None
    phases = {k: v for k, v in summary.phase_seconds.items() if v}
    wall = time.monotonic() - t0
    result = {
        "acc_before_rl": after_sft["accuracy"] if after_sft else None,
        "acc_after_rl": final["accuracy"] if final else None,
        "rl_steps": summary.rl_steps,
        "wall_s": round(wall, 1),
        # Shares of the wall time; "reward" is the time any grading ran, and grading
        # runs inside the rollout as trajectories end, so it overlaps "rollout".
        "phase_share": {k: round(v / wall, 3) for k, v in phases.items()},
        "phase_seconds": {k: round(v, 1) for k, v in phases.items()},
        "plots": summary.plots,
        "run_dir": summary.run_dir,
    }
    (run_dir / "demo_summary.json").write_bytes(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
    print(
        f"\nheld-out accuracy: {result['acc_before_rl']} after SFT -> {result['acc_after_rl']} after RL "
        f"({summary.rl_steps} RL steps, {result['wall_s']:.0f} s)\nplots: {run_dir / 'plots'}",
        file=sys.stderr,
    )
    print(msgspec.json.encode(result).decode())
    return 0
