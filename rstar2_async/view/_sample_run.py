"""A generated run directory in the shape ``rstar2 train`` writes, without training.

For trying the viewer, its browser test, its benchmark (100,000 trajectories) and the
README's screenshots.  The trajectories are synthetic (a tool call computing a sum, an
answer, random rewards), but every file is written by the trainer's own code: the
trajectory recorder, GRPO-RoC's decisions, ``rollout_metrics`` for ``metrics.jsonl``
and the evaluation's ``samples.jsonl`` encoding.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import msgspec

from ..recipe import record_step, rollout_metrics
from ..rollout import render_tool_turn
from ..selection import roc_downsample
from ..types import Group, Problem, ToolCall, ToolResult, Trajectory, Turn

__all__ = ["write_sample_run"]


def _trajectory(problem: Problem, index: int, rng: random.Random, version: int, filler: int) -> Trajectory:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    turns, text, pos, mask, chars = [], [], 0, [], 0  # chars: the transcript's length so far
    for k in range(rng.choice((1, 2, 2, 3))):
        code = f"# step {k + 1}: check the sum\nx = {a} + {b}\nprint(x * {k + 1})"
        ok = rng.random() > 0.15
        said = f"Turn {k + 1}: let me compute it with Python. " + "reasoning " * filler
        said += '<tool_call>{"name": "python", "arguments": {"code": ' + msgspec.json.encode(code).decode() + "}}</tool_call>"
        output = str((a + b) * (k + 1)) if ok else "Traceback (most recent call last):\nNameError: name 'y' is not defined"
        result = ToolResult("ok" if ok else "error", output, 0.01 + rng.random() / 10, ToolCall("python", {"code": code}))
        tool = render_tool_turn([output])
        n_gen, n_app = len(said) // 4, len(tool) // 4
        turns.append(Turn(pos, n_gen, n_app, version, "stop", [result], 0.2, 0, (chars, chars + len(said))))
        text += [said, tool]
        chars += len(said) + len(tool)
        mask += [1] * n_gen + [0] * n_app
        pos += n_gen + n_app
    right = rng.random() < 0.5
    final = f"So the answer is <answer>\\boxed{{{problem.answer if right else a * b}}}</answer>"
    turns.append(Turn(pos, len(final) // 4, 0, version, "stop", [], 0.1, 1, (chars, chars + len(final))))
    text.append(final)
    mask += [1] * (len(final) // 4)
    finish = "answer" if rng.random() > 0.1 else "token_budget"
    return Trajectory(
        problem_id=problem.id, sample_index=index, prompt_ids=[1, 2, 3], response_ids=list(range(len(mask))),
        loss_mask=mask, logprobs=[0.0] * len(mask), turns=turns, finish_reason=finish, weight_version=version,
        response_text="".join(text), reward=1.0 if right and finish == "answer" else 0.0,
    )  # fmt: skip


def write_sample_run(
    run_dir: Path,
    *,
    steps: int = 4,
    problems: int = 4,
    samples: int = 8,
    keep: int = 4,
    seed: int = 0,
    filler: int = 20,
    eval_every: int = 2,
    first_step: int = 1,
) -> int:
    """Write (append) steps ``first_step..`` of a run of ``steps`` x ``problems`` x
    ``samples`` trajectories into ``run_dir`` (metrics, trajectories, and an evaluation
    every ``eval_every`` steps); returns the number of trajectories recorded."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    t0, total = time.time() - 60 * steps, 0
    encoder = msgspec.json.Encoder()
    with (run_dir / "metrics.jsonl").open("ab") as metrics:
        for step in range(first_step, first_step + steps):
            batch = [Problem(f"p{step:03d}-{j:03d}", f"What is the sum of the two numbers in case {j}?", str(rng.randint(10, 198))) for j in range(problems)]
            groups = [Group(p, [_trajectory(p, i, rng, step - 1, filler) for i in range(samples)]) for p in batch]
            decided = [(g, roc_downsample(g, keep, random.Random(f"{seed}/{step}/{g.problem.id}"))) for g in groups]
            total += record_step(run_dir / "trajectories", step, "rl-8k", decided).written
            values = {"stage": "rl-8k", **rollout_metrics(groups), "learner/loss": rng.gauss(0, 0.05) / step}
            values.update({"time/rollout_s": 20 + rng.random() * 5, "time/reward_s": 1.0, "time/update_s": 8.0, "time/sync_s": 2.0})
            metrics.write(encoder.encode({"step": step, **values, "wall_time": t0 + 60 * step}) + b"\n")
            if eval_every and step % eval_every == 0:
                out = run_dir / "eval" / f"step-{step:06d}-rl-8k" / "gsm8k"
                out.mkdir(parents=True, exist_ok=True)
                trajectories = [_trajectory(p, 0, rng, step, filler) for p in batch]
                (out / "samples.jsonl").write_bytes(b"".join(encoder.encode(t) + b"\n" for t in trajectories))
                accuracy = sum(t.reward or 0.0 for t in trajectories) / len(trajectories)
                record = {"step": step, "eval/gsm8k": accuracy, "eval/accuracy": accuracy, "time/eval_s": 5.0, "wall_time": t0 + 60 * step + 5}
                metrics.write(encoder.encode(record) + b"\n")
    return total
