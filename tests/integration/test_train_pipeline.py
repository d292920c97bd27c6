"""The demo's pipeline at a small size, through every real part: a locally built model,
DeepSpeed SFT and GRPO steps, a vLLM server started by the trainer, the jailed sandbox,
math-verify, weight sync from disk, metrics, plots, checkpoints, a stop and a crash
and the resumes after them.

The runs start from ``sft_policy`` (the SFT cold start, trained once per session: it
teaches the tool format, so sampled groups have right and wrong answers and GRPO has
work to do); the on-policy run adds a short SFT stage of its own for the stage's
plumbing (schedule, export, sync, evaluation, checkpoint) through the real stack."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from rstar2_async.cli.train import train
from rstar2_async.config import TrainConfig, convert, to_toml
from rstar2_async.errors import TrainError
from rstar2_async.learn import latest_checkpoint

from .conftest import NO_COMPILE, SFT_STEPS, SFT_SYSTEM, SftPolicy

pytestmark = [pytest.mark.vllm, pytest.mark.deepspeed]

SHORT_SFT = 6
"""The on-policy run's own SFT stage: enough steps to check the schedule and the records."""
# A learner started in this process (the SFT fixture, another test) may have left its
# rendezvous in the environment: a child process must make its own.
LAUNCHER_ENV = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}


def config(
    tmp_path: Path, policy: SftPolicy, *, rl_steps: int, max_staleness: int = 0, sft: bool = False,
    hard_stage: bool = False, checkpoint_every: int = 1, mode: str = "on_policy", shards: int = 0,
    temperature: float = 1.0,
) -> TrainConfig:
    data = policy.data
    # rStar2's stage 3: the policy samples each problem twice, problems solved both
    # times are dropped, the optimizer starts fresh.
    hard = {"name": "hard", "kind": "rl", "data": str(data / "train.jsonl"), "steps": 1, "batch_problems": 4,
            "n_oversample": 6, "n_keep": 4, "hard_filter_samples": 2, "reset_optimizer": True}  # fmt: skip
    # Gentle: the policy already solves the task; this stage checks the plumbing.
    short_sft = {"name": "sft", "kind": "sft", "data": str(data / "sft.jsonl"), "steps": SHORT_SFT, "batch_problems": 16,
                 "lr": 1e-4, "lr_decay": "linear"}  # fmt: skip
    return convert(
        {
            "run": {"name": "pipeline", "out_dir": str(tmp_path / "runs"), "checkpoint_every": checkpoint_every, "samples_per_step": 2,
                    "max_staleness": max_staleness, "mode": mode},
            "model": {"path": str(policy.weights)},
            "server": {"max_model_len": 512, "kv_cache_gib": 0.25, "extra_args": list(NO_COMPILE)},
            "rollout": {
                "max_turns": 3, "max_response_tokens": 160, "system_prompt": SFT_SYSTEM, "list_tools": False,
                "sampling": {"temperature": temperature}, "shards": shards,
            },
            "sandbox": {"workers": 1},
            "learner": {"zero_stage": 0, "precision": "fp32", "gradient_checkpointing": False, "lr": 1e-3, "warmup_steps": 0,
                        **({"tis_cap": 2.0} if mode == "streaming" else {})},
            "eval": {"data": [str(data / "heldout.jsonl")], "n": 1, "sampling": {"temperature": 0.0}},
            "stages": ([short_sft] if sft else []) + [
                {"name": "rl", "kind": "rl", "data": str(data / "train.jsonl"), "steps": rl_steps, "batch_problems": 4,
                 "n_oversample": 6, "n_keep": 4, "lr_decay": "linear"},
            ] + ([hard] if hard_stage else []),
        },
        TrainConfig,
    )  # fmt: skip


def test_sft_cold_start_learns(sft_policy: SftPolicy) -> None:
    """The learner really steps: the session's SFT (what every run here starts from)."""
    assert len(sft_policy.losses) == SFT_STEPS and sft_policy.losses[-1] < sft_policy.losses[0] / 3


def test_sft_then_rl_stopped_by_sigterm_and_resumed(tmp_path: Path, sft_policy: SftPolicy) -> None:
    """One run of every kind of stage through ``rstar2 train``: SFT, on-policy RL one
    step ahead (staleness 1) and rStar2's hard stage.  SIGTERM mid-RL (a scheduler's
    preemption): the run stops at the next safe point and checkpoints it, though no
    periodic checkpoint was due; ``--resume`` then continues from that step."""
    cfg = config(tmp_path, sft_policy, rl_steps=3, max_staleness=1, sft=True, hard_stage=True, checkpoint_every=100)
    toml = tmp_path / "run.toml"
    toml.write_text(to_toml(cfg))
    run = Path(cfg.run.out_dir) / cfg.run.name
    metrics = run / "metrics.jsonl"
    rstar2 = Path(sys.executable).with_name("rstar2")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    # Files, not pipes: progress bars would fill a pipe nobody reads while we wait.
    with (tmp_path / "out").open("w+") as out_file, (tmp_path / "err").open("w+") as err_file:
        proc = subprocess.Popen([str(rstar2), "train", str(toml)], stdout=out_file, stderr=err_file, env=env)
        try:
            deadline = time.monotonic() + 900
            while not (metrics.exists() and '"stage":"rl"' in metrics.read_text()):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "err").read_text()[-3000:]
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # during step 2's rollout, or step 2's update
            proc.wait(timeout=300)
        finally:
            proc.kill()
        out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert proc.returncode == 143, err[-3000:]
    stopped = json.loads(out.strip().splitlines()[-1])
    assert "--resume" in err and stopped["stopped"] is True
    assert stopped["phase_seconds"]["sft"] > 0
    assert subprocess.run(["pgrep", "-f", str(run)], check=False, capture_output=True).stdout == b""  # no server or worker left
    state = json.loads((latest_checkpoint(run / "checkpoints") / "state.json").read_text())["state"]
    assert state["stage"] == 1 and state["step_in_stage"] == state["rl_step"] >= 1
    with pytest.raises(TrainError, match="--resume"):  # the run exists: never overwrite it silently
        train(cfg, resume=False)

    summary = train(cfg, resume=True)
    assert summary.rl_steps == 4 and not summary.stopped
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    sft = [r for r in records if "sft/loss" in r]
    rl = [r for r in records if r.get("stage") == "rl"]
    # SFT was not redone; the stage's own lr falls linearly to 0 over its steps.
    assert len(sft) == SHORT_SFT and all(r["sft/loss"] > 0 for r in sft)
    assert [r["sft/lr"] for r in sft] == pytest.approx([1e-4 * (1 - k / SHORT_SFT) for k in range(SHORT_SFT)])
    assert [r["step"] for r in rl] == [1, 2, 3]  # no RL step redone
    # lr_decay = "linear": learner.lr falls toward 0 over the stage's 3 steps (no
    # learner/lr on a step where RoC kept nothing to train on).
    assert any("learner/lr" in r for r in rl)
    for r in rl:
        if "learner/lr" in r:
            assert r["learner/lr"] == pytest.approx(1e-3 * (4 - r["step"]) / 3)
    # staleness 1 is within the bound; the resumed run's servers got the version of the
    # weights they load, so its groups are not mistaken for stale ones.
    assert all(r["async/stale_groups_dropped"] == 0 for r in rl)
    # The server generated, the sandbox ran the model's calls, and the grader graded.
    assert all(r["rollout/trajectories"] == 4 * 6 for r in rl)
    assert any(r["rollout/tool_calls_mean"] > r["rollout/tool_errors_mean"] for r in rl)  # calls that ran
    tool_runs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert tool_runs and any(s["tool_calls"] for s in tool_runs)
    # Every trajectory of every RL step is recorded for `rstar2 view`, with RoC's decision.
    index = (run / "trajectories" / "index.jsonl").read_text().splitlines()
    assert len(index) == sum(r["rollout/trajectories"] for r in records if "rollout/trajectories" in r)
    assert any('"kept"' in row for row in index)
    # Weight sync: the SFT stage's export moved the server to version 1.
    assert any(s["weight_version"] >= 1 for s in tool_runs)
    assert (run / "weights").is_dir() and any((run / "weights").iterdir())
    assert summary.evals[0]["stage"] == "sft" and summary.evals[-1]["stage"] == "final"
    assert (run / "plots" / "reward.png").stat().st_size > 1000
    # The training-health signals of every trained step (recipe/_health.py).
    trained = [r for r in rl if "learner/loss" in r]
    health = ["learner/logprob_diff_mean", "learner/logprob_diff_max", "learner/entropy", "learner/clip_frac_low",
              "learner/clip_frac_high", "learner/clip_frac_dual", "learner/ratio_max", "rollout/response_tokens_max",
              "rollout/finish_token_budget", "rollout/tool_error_rate", "roc/all_equal_share", "async/staleness_max"]  # fmt: skip
    assert trained and all(k in r for r in trained for k in health)
    assert all(r["learner/entropy"] > 0 and 0 <= r["learner/logprob_diff_mean"] <= r["learner/logprob_diff_max"] for r in trained)
    assert (run / "plots" / "mismatch.png").stat().st_size > 1000
    # Every sync was verified before the server sampled from it: learner and server agree (fp32).
    assert all(r["sync/probe_diff_max"] <= 1e-5 for r in trained)
    assert (run / "tensorboard").is_dir()
    assert {"rollout", "eval"} <= {k for k, v in summary.phase_seconds.items() if v > 0}
    # The hard stage sampled every problem, kept those not solved every time (stored
    # for resume), and trained on them.  (How many are dropped depends on sampling;
    # tests/recipe/test_hard_filter.py checks the decision itself.)
    state = json.loads((latest_checkpoint(run / "checkpoints") / "state.json").read_text())["state"]
    train_ids = {json.loads(line)["id"] for line in (sft_policy.data / "train.jsonl").read_text().splitlines()}
    assert state["hard_problems"]["hard"] and set(state["hard_problems"]["hard"]) <= train_ids
    assert [r["stage"] for r in records if r.get("stage") == "hard"] == ["hard"]


# The kill waits for a checkpoint whose queue holds a finished group, and a group whose
# samples all score the same is dropped.  At temperature 1 the session's policy scores
# 0-0.04 a step (seeded: the same every run), and 12 steps went by without one (clean
# clones at 7733807 and d407969); sampled cooler it solves some of each group's tries
# (the kill came after step 1, both cases), so 8 steps leave room.
STREAM_STEPS = 8
STREAM_TEMPERATURE = 0.6


def test_streaming_killed_mid_stage_resumes_without_losing_or_repeating_a_group(
    tmp_path: Path, sft_policy: SftPolicy
) -> None:
    """A streaming stage (staleness 1) SIGKILLed, its whole process tree, right after a
    checkpoint that holds finished-but-untrained groups: the resumed run trains every
    group of the stream exactly once, none staler than the bound.  The killed run has
    its rollout in a worker process (``rollout.shards = 1``), the resumed one in the
    trainer's process: both ways of running a streaming stage, and a checkpoint that
    does not depend on which wrote it (one kill and resume instead of one per way)."""
    cfg = config(tmp_path, sft_policy, rl_steps=STREAM_STEPS, max_staleness=1, mode="streaming", shards=1,
                 temperature=STREAM_TEMPERATURE)
    toml = tmp_path / "run.toml"
    toml.write_text(to_toml(cfg))
    run = Path(cfg.run.out_dir) / cfg.run.name
    rstar2 = Path(sys.executable).with_name("rstar2")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    with (tmp_path / "out").open("w+") as out_file, (tmp_path / "err").open("w+") as err_file:
        proc = subprocess.Popen([str(rstar2), "train", str(toml)], stdout=out_file, stderr=err_file, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 900
            while True:  # a checkpoint of the RL stage whose queue is not empty
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "err").read_text()[-3000:]
                last = latest_checkpoint(run / "checkpoints")
                try:
                    stream = json.loads((last / "state.json").read_text())["state"].get("stream") if last else None
                    killed_at = json.loads((last / "state.json").read_text())["state"] if last else None
                except FileNotFoundError:  # retention removed it as we read
                    continue
                if stream and stream["queued"]:
                    break
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ProcessLookupError):  # a run that ended: its error is the assertion's
                os.killpg(proc.pid, signal.SIGKILL)  # the learner, its vLLM server, sandbox and graders: a crash
            proc.wait()
    assert killed_at is not None
    # Had a later step's sync replaced the checkpoint's export (only the newest is
    # kept) before the kill, the resumed run would find it gone: it writes it back.
    shutil.rmtree(killed_at["weights_dir"], ignore_errors=True)
    cfg = msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(cfg.rollout, shards=0))
    summary = train(cfg, resume=True)
    assert summary.rl_steps == STREAM_STEPS and not summary.stopped
    state = json.loads((latest_checkpoint(run / "checkpoints") / "state.json").read_text())["state"]
    stream = state["stream"]  # the stage's last checkpoint: its whole stream
    trained, dropped = stream["trained"], stream["dropped"]
    assert len(set(trained)) == len(trained) and trained == sorted(trained)  # none twice, in stream order
    positions = STREAM_STEPS * 4  # 4 problems a step
    assert set(trained) | {p for p in dropped if p < positions} == set(range(positions))
    assert not set(trained) & set(dropped)
    assert set(killed_at["stream"]["queued"]) <= set(trained)  # what the crash left queued was trained
    assert set(range(stream["next_seq"])) == set(trained) | set(dropped) | set(stream["in_flight"]) | set(stream["queued"])
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r.get("stage") == "rl"]
    # No trained group staler than the bound (a step whose groups RoC all dropped trains none).
    assert any("async/staleness_max" in r for r in rl)
    assert all(r.get("async/staleness_max", 0) <= 1 for r in rl)
    assert all(r["async/stale_groups_dropped"] == 0 for r in rl)  # and none paid for and dropped
    assert all("async/turns_interrupted" in r for r in rl)
