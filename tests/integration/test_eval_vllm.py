"""`rstar2 eval` against a real vLLM server in exact token mode, with resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends._launcher import VLLMServer
from rstar2_async.cli.main import main

pytestmark = [pytest.mark.vllm]


def test_eval_a_vllm_endpoint_in_token_mode(
    vllm_server: VLLMServer, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "mini.jsonl"
    rows = [{"id": f"m{i}", "problem": f"What is {i} * 3?", "answer": str(3 * i)} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "eval", "--endpoint", vllm_server.base_url + "/v1", "--served-model", vllm_server.model,
        "--tokenizer", str(tiny_model_dir), "--data", str(data), "--n", "2", "--temperature", "1.0",
        "--top-p", "1.0", "--max-response-tokens", "48", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert main(argv) == 0
    [summary] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["problems"] == 3 and summary["n"] == 2 and summary["avg_at_n"] == 0.0  # an untrained model
    samples = [json.loads(line) for line in (tmp_path / "out" / "mini" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6
    for s in samples:  # token mode: the server's ids and logprobs are kept
        assert s["response_ids"] and len(s["response_ids"]) == len(s["logprobs"]) == len(s["loss_mask"])
        assert s["finish_reason"] in ("answer", "token_budget")

    # An interrupted evaluation: drop the last two samples; the rerun makes only those.
    path = tmp_path / "out" / "mini" / "samples.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:4]))
    assert main(argv) == 0
    [again] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["resumed_samples"] == 4 and len(path.read_text().splitlines()) == 6
