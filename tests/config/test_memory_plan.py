"""The learner's memory plan as a pure function: parameter counts, the verdict, and
the field a refusal names (figures for a Qwen3-14B-shaped model, the recipe's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import pytest

from rstar2_async.config import LearnerConfig, ModelShape, plan_memory

QWEN3_14B = {
    "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 17408, "vocab_size": 151936, "tie_word_embeddings": False,
}  # fmt: skip
GB = 10**9


def recipe(**kw) -> LearnerConfig:
    return LearnerConfig(**({"zero_stage": 3, "precision": "bf16", "micro_batch_tokens": 32768} | kw))


def test_parameter_count_matches_the_published_size() -> None:
    assert ModelShape.from_config(QWEN3_14B).params == pytest.approx(14.77e9, rel=0.01)


def test_the_recipe_fits_a_80gb_gpu_on_32_ranks() -> None:
    plan = plan_memory(ModelShape.from_config(QWEN3_14B), recipe(), ranks=32, device_bytes=80 * GB)
    assert plan.fits and plan.fix is None, plan.line()
    assert plan.params == 2 * ModelShape.from_config(QWEN3_14B).params // 32
    assert "fits" in plan.line()


def test_too_few_ranks_names_the_zero_stage() -> None:
    plan = plan_memory(ModelShape.from_config(QWEN3_14B), recipe(zero_stage=2), ranks=1, device_bytes=80 * GB)
    assert not plan.fits and "learner.zero_stage" in plan.fix
    plan = plan_memory(ModelShape.from_config(QWEN3_14B), recipe(), ranks=1, device_bytes=80 * GB)
    assert "add learner ranks" in plan.fix


def test_activations_name_checkpointing_or_the_token_budget() -> None:
    shape = ModelShape.from_config(QWEN3_14B)
    plan = plan_memory(shape, recipe(gradient_checkpointing=False), ranks=32, device_bytes=80 * GB)
    assert plan.fix.startswith("set learner.gradient_checkpointing = true")
    small = plan_memory(shape, recipe(), ranks=32, device_bytes=30 * GB)
    assert small.fix.startswith("lower learner.micro_batch_tokens from 32768 to <= ")
    most = int(small.fix.rsplit(" ", 1)[1])
    assert plan_memory(shape, recipe(micro_batch_tokens=most), ranks=32, device_bytes=30 * GB).fits
    assert not plan_memory(shape, recipe(micro_batch_tokens=most + 512), ranks=32, device_bytes=30 * GB).fits


def test_unknown_device_gives_no_verdict() -> None:
    plan = plan_memory(ModelShape.from_config(QWEN3_14B), recipe(), ranks=1, device_bytes=None)
    assert plan.fits and "device unknown" in plan.line()


def test_estimating_imports_no_torch(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_14B))
    code = (
        "import sys; from rstar2_async.config import LearnerConfig, ModelShape, plan_memory;"
        f"plan_memory(ModelShape.from_dir({str(tmp_path)!r}), LearnerConfig(), ranks=8, device_bytes=None);"
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
    assert msgspec.json.decode(msgspec.json.encode(plan_memory(
        ModelShape.from_config(QWEN3_14B), recipe(), ranks=32, device_bytes=None)))["fix"] is None  # fmt: skip
