"""Fixtures of the learner tests: loopback rendezvous, tiny models (one torch thread: tests/conftest.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # _learnkit, _dist_worker

# Two busy cores: one thread per process keeps timings stable and runs reproducible.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def single_process_env() -> Iterator[None]:
    """Rendezvous variables of a one-process world, removed again afterwards so
    other tests' subprocesses do not inherit them. The process group itself stays."""
    from rstar2_async.learn._learner import _free_port

    with pytest.MonkeyPatch.context() as mp:
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        for k, v in env.items():
            mp.setenv(k, v)
        mp.setenv("MASTER_PORT", os.environ.get("MASTER_PORT", str(_free_port())))
        yield


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer-free Qwen2 with a 32-token vocabulary (untied, head_dim 64)."""
    from _learnkit import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("models") / "lm32")


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 with a local BPE tokenizer and the ChatML template."""
    from rstar2_async.demo import build_tiny_model

    corpus = ["What is 2 + 3? The answer is 5.", "<answer>\\boxed{5}</answer>", "print(1 + 1)"] * 50
    return build_tiny_model(
        tmp_path_factory.mktemp("models") / "chat", vocab_size=320, hidden_size=64, num_layers=2, corpus=corpus
    )
