"""What a training run says when it starts, one line each: the model it starts from,
the chat template its rollouts render, how trajectories are graded, and how each new
version of the weights reaches the servers.

A run from a Hugging Face directory trained elsewhere is where these choices matter
and are easy to miss: its own template frames the tool results, the training
default grades rStar2's format (which such a model has never seen), and the sync
path decides whether the servers hold the learner's weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import ROLLOUT_RECORD, TrainConfig
from ..rollout import ChatTokenizer, HFChatTokenizer

__all__ = ["announce_start", "start_lines"]


def start_lines(config: TrainConfig, base: Path, tokenizer: ChatTokenizer | None) -> list[str]:
    """The lines :func:`announce_start` prints (``base``: the model the run starts from)."""
    trained_here = (base / ROLLOUT_RECORD).is_file()
    if config.model.tiny is not None:
        model = f"model: a tiny Qwen2 built into {base}"
    elif trained_here:
        model = f"model: {base} (trained by rstar2: it has {ROLLOUT_RECORD})"
    else:
        model = f"model: {base}, a Hugging Face directory not trained by rstar2 (no {ROLLOUT_RECORD})"
    if isinstance(tokenizer, HFChatTokenizer):
        template = tokenizer.describe()
    else:
        template = f"chat template: {type(tokenizer).__name__}'s"
    return [model, template, _grading(config, first_time=not trained_here and config.model.tiny is None), _sync(config)]


def announce_start(config: TrainConfig, base: Path, tokenizer: ChatTokenizer | None) -> None:
    """Print :func:`start_lines` to stderr, each prefixed ``rstar2 train:``."""
    for line in start_lines(config, base, tokenizer):
        print(f"rstar2 train: {line}", file=sys.stderr, flush=True)


def _grading(config: TrainConfig, *, first_time: bool) -> str:
    reward = config.reward
    if reward.function is not None:
        return f"reward: {reward.function} (reward.function)"
    mode = reward.grading or "strict"
    why = "reward.grading" if reward.grading else "training's default: rStar2's format, the last \\boxed{} of <answer>"
    line = f"grading: {mode} ({why})"
    if mode == "strict" and first_time and not any(s.kind == "sft" for s in config.stages):
        line += (
            "; a model never taught that format may score 0 on every sample and learn nothing: "
            'add an SFT stage, or set reward.grading = "lenient"'
        )
    return line


def _sync(config: TrainConfig) -> str:
    ws = config.weight_sync
    if config.inference is None:
        servers = f"the {config.server.num_servers} {config.server.engine} server(s) this run launches"
    else:
        servers = f"the {len(config.inference.base_urls)} server(s) of inference.base_urls"
    if ws.transport == "disk":
        how = "reload each step's export (<run>/weights/vNNNNNN) in place"
    else:
        rendezvous = f"{ws.master_address}:{ws.master_port}"
        how = f"receive each step's export from the learner's rank 0 over {ws.sender} ({rendezvous})"
    pause = ws.pause_mode or ("abort" if config.run.mode == "streaming" else "wait")
    check = (
        "each server's probe log-probs checked against the learner's after every sync (weight_sync.verify)"
        if ws.verify
        else "syncs NOT checked (weight_sync.verify = false)"
    )
    return f'weight sync: {servers} {how} (weight_sync.transport = "{ws.transport}"), turns in flight: {pause}; {check}'
