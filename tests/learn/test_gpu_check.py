"""`make gpu-check DRY=1`: the GPU check's every phase on CPU with shrunk sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.deepspeed  # the learner in a subprocess
def test_dry_run_passes_and_ends_with_json() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    proc = subprocess.run(
        ["make", "-s", "gpu-check", "DRY=1", f"GPU_PY={sys.executable}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["dry"] and result["device"] == "cpu"
    for phase in ("zero2", "zero3", "torch"):
        assert result[phase]["tokens_per_s"] > 0 and result[phase]["peak_gb"] > 0, phase
    assert result["zero2"]["plan_gb"] > 0 and result["export"]["gb"] > 0
    assert result["logprobs"]["naive"]["tokens_per_s"] > 0
    if result["logprobs"]["chunked"] is None:
        assert result["logprobs"]["chunked_reason"] and result["chunked_vs_naive_peak"] is None
    else:
        assert result["chunked_vs_naive_peak"] > 0
