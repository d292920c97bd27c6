"""`rstar2 eval` against a real vLLM server in exact token mode: resume, a budget over the
context, and the README's command on what the demo writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends._launcher import VLLMServer
from rstar2_async.cli.main import main
from tests.cli.test_readme_eval import make_demo_run_dir, run_readme_command
from tests.integration.conftest import TINY_MAX_MODEL_LEN

pytestmark = [pytest.mark.vllm]


def token_mode_argv(server: VLLMServer, tokenizer: Path, tmp_path: Path, problems: int, *options: str) -> list[str]:
    """`rstar2 eval` of ``problems`` small products against ``server``, results in tmp_path/out."""
    data = tmp_path / "mini.jsonl"
    rows = [{"id": f"m{i}", "problem": f"What is {i} * 3?", "answer": str(3 * i)} for i in range(problems)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [
        "eval", "--endpoint", server.base_url + "/v1", "--served-model", server.model, "--tokenizer", str(tokenizer),
        "--data", str(data), "--temperature", "1.0", "--top-p", "1.0", "--out", str(tmp_path / "out"), *options,
    ]  # fmt: skip


def test_eval_a_vllm_endpoint_in_token_mode(
    vllm_server: VLLMServer, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = token_mode_argv(vllm_server, tiny_model_dir, tmp_path, 3, "--n", "2", "--max-response-tokens", "48")
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


@pytest.mark.parametrize("mode", ["tokens", "chat"])
def test_a_response_budget_over_the_context_is_clamped_not_refused(
    vllm_server: VLLMServer, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """The default budget (8192) is over the server's max_model_len (2048): vLLM refuses
    such a request; clamped, each sample runs to its end or to the context's."""
    argv = token_mode_argv(vllm_server, tiny_model_dir, tmp_path, 2, "--n", "1", "--max-turns", "1")
    if mode == "chat":  # the OpenAI SDK; the conversation counted by the server's /tokenize
        argv[argv.index("--tokenizer") : argv.index("--tokenizer") + 2] = []
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
    run_readme_command(make_demo_run_dir(tmp_path, monkeypatch), "vllm", capsys)
