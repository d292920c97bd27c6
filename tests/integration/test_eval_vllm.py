"""`rstar2 eval` against a real vLLM server in exact token mode: resume, a budget over the
context, and the README's command on what the demo writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends._launcher import VLLMServer
from rstar2_async.cli.main import main
from tests.cli.test_readme_eval import demo_commands, make_demo_run_dir
from tests.integration.conftest import TINY_MAX_MODEL_LEN

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


def test_a_response_budget_over_the_context_is_clamped_not_refused(
    vllm_server: VLLMServer, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default budget (8192) is over the server's max_model_len (2048): vLLM would
    refuse every request; clamped, each sample runs to its end or to the context's."""
    data = tmp_path / "mini.jsonl"
    data.write_text("".join(json.dumps({"id": f"m{i}", "problem": f"What is {i} * 3?", "answer": str(3 * i)}) + "\n" for i in range(2)))
    argv = [
        "eval", "--endpoint", vllm_server.base_url + "/v1", "--served-model", vllm_server.model,
        "--tokenizer", str(tiny_model_dir), "--data", str(data), "--n", "1", "--temperature", "1.0",
        "--top-p", "1.0", "--max-turns", "1", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert main(argv) == 0
    [summary] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["errors"] == 0
    for line in (tmp_path / "out" / "mini" / "samples.jsonl").read_text().splitlines():
        s = json.loads(line)
        assert s["finish_reason"] in ("answer", "token_budget", "turn_limit")
        assert len(s["prompt_ids"]) + len(s["response_ids"]) <= TINY_MAX_MODEL_LEN


@pytest.mark.slow
def test_the_readme_vllm_command_runs_on_the_demo(
    vllm_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rstar2 eval --model runs/cpu-demo/weights/latest ...` as the README writes it
    (a vLLM server started on the demo's final weights), on two problems."""
    make_demo_run_dir(tmp_path, monkeypatch)
    [argv] = demo_commands("vllm")
    capsys.readouterr()
    assert main([*argv, "--limit", "2"]) == 0
    out, err = capsys.readouterr()
    assert "rollout settings from runs/cpu-demo/weights/latest/rollout.toml (as trained)" in err
    [summary] = json.loads(out.strip().splitlines()[-1])
    assert summary["problems"] == 2 and summary["errors"] == 0
