"""What a training run says at start: the model, its template, the grading, the sync path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rstar2_async.config import RolloutConfig, TrainConfig, convert, write_rollout_record
from rstar2_async.recipe._announce import start_lines
from rstar2_async.rollout import HFChatTokenizer
from tests.rollout.chat_templates import llama_tokenizer

RL = {"name": "rl", "kind": "rl", "data": "x"}


def lines(base: Path, **sections: Any) -> list[str]:
    config = convert({"model": {"path": str(base)}, "stages": [RL], **sections}, TrainConfig)
    return start_lines(config, base, HFChatTokenizer.from_pretrained(base))


def test_a_plain_hugging_face_directory(tmp_path: Path) -> None:
    model, template, grading, sync = lines(llama_tokenizer(tmp_path / "m"))
    assert model.endswith("a Hugging Face directory not trained by rstar2 (no rollout.toml)")
    assert "tokenizer_config.json, each result's text through tojson" in template and "ipython" in template
    assert grading.startswith("grading: strict (training's default") and 'reward.grading = "lenient"' in grading
    assert sync == (
        'weight sync: the 1 vllm server(s) this run launches reload each step\'s export (<run>/weights/vNNNNNN) in place '
        '(weight_sync.transport = "disk"), turns in flight: wait; '
        "each server's probe log-probs checked against the learner's after every sync (weight_sync.verify)"
    )
    *_, unchecked = lines(tmp_path / "m", weight_sync={"verify": False})
    assert unchecked.endswith("syncs NOT checked (weight_sync.verify = false)")


def test_a_model_trained_here_with_its_own_settings(tmp_path: Path) -> None:
    base = llama_tokenizer(tmp_path / "m")
    write_rollout_record(base, RolloutConfig())
    broadcast = {"transport": "broadcast", "master_port": 29500, "ranks_per_server": 1}
    model, _, grading, sync = lines(
        base, reward={"grading": "lenient"}, weight_sync=broadcast, run={"mode": "streaming"},
        inference={"base_urls": ["http://a/v1", "http://b/v1"], "model": "m"},
    )  # fmt: skip
    assert model.endswith("(trained by rstar2: it has rollout.toml)") and grading == "grading: lenient (reward.grading)"
    assert sync.startswith("weight sync: the 2 server(s) of inference.base_urls receive each step's export from the learner's")
    assert "over nccl (127.0.0.1:29500)" in sync and "turns in flight: abort; each server's probe" in sync
