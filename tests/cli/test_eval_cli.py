"""`rstar2 eval` end to end: real sandbox pool, real grader, scripted endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread
import pytest

from rstar2_async.cli.main import main
from rstar2_async.testing import FakeModelServer, arithmetic_policy, serve_http


@pytest.fixture
def endpoint() -> Iterator[tuple[str, FakeModelServer]]:
    server = FakeModelServer()
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(serve_http, server)
        yield f"http://127.0.0.1:{port}/v1", server
        future.cancel()


def test_eval_against_an_endpoint_and_resume(tmp_path: Path, endpoint: tuple[str, FakeModelServer], capsys: pytest.CaptureFixture[str]) -> None:
    url, server = endpoint
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"What is {i}*7?", "answer": str(i * 7)}) + "\n" for i in range(3)))
    argv = ["eval", "--endpoint", url, "--served-model", "toy-model", "--data", str(data), "--n", "2",
            "--temperature", "0.7", "--top-p", "0.9", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    [summary] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["avg_at_n"] == 1.0 and summary["pass_at_n"] == 1.0 and summary["mean_tool_calls"] == 1.0
    assert summary["temperature"] == 0.7 and summary["top_p"] == 0.9
    samples = (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 6
    assert "temperature = 0.7" in (tmp_path / "out" / "config.toml").read_text()
    chats = [r for r in server.requests if "messages" in r]  # the rest: the reachability check
    assert chats and all(r["temperature"] == 0.7 and r["top_p"] == 0.9 for r in chats)

    assert main(argv) == 0  # everything is done: resumes, generates nothing
    assert len([r for r in server.requests if "messages" in r]) == len(chats)
    [again] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["resumed_samples"] == 6 and again["avg_at_n"] == 1.0

    # Other sampling or grading would score two kinds of sample as one: refused before a request, naming each.
    other = [*argv, "--grading", "strict"]
    other[other.index("--temperature") + 1] = "1.0"
    with pytest.raises(SystemExit, match=r"(?s)reward\.grading: 'lenient' then, 'strict' now.*temperature: 0\.7 then, 1\.0 now"):
        main(other)
    assert len([r for r in server.requests if "messages" in r]) == len(chats)
    assert json.loads((tmp_path / "out" / "toy" / "settings.json").read_text())["rollout.sampling.temperature"] == 0.7
    assert len((tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()) == 6
    # Nor may the data set's file change under its samples (a corrected gold answer).
    data.write_text(data.read_text().replace('"answer": "7"', '"answer": "8"'))
    with pytest.raises(SystemExit, match=r"data\.sha256"):
        main(argv)


def unboxed(conversation: str) -> str:
    """arithmetic_policy's solver, ending with its answer in words, not boxed."""
    return arithmetic_policy(conversation).replace("<answer>\\boxed{", "The answer is ").replace("}</answer>", ".")


def test_eval_regrades_stored_samples_without_sampling_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = FakeModelServer(policy=unboxed)
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"What is {i}*7?", "answer": str(i * 7)}) + "\n" for i in range(3)))
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(serve_http, server)
        argv = ["eval", "--endpoint", f"http://127.0.0.1:{port}/v1", "--served-model", "toy-model", "--data", str(data),
                "--n", "2", "--temperature", "0.7", "--top-p", "0.9", "--out", str(tmp_path / "out"), "--grading", "lenient"]
        assert main(argv) == 0
        [lenient] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        asked = len(server.requests)
        strict = [*argv[:-1], "strict"]
        with pytest.raises(SystemExit, match="(?s)reward.grading: 'lenient' then, 'strict' now.*--regrade"):
            main(strict)
        assert main([*strict, "--regrade", "--n", "1", "--limit", "1"]) == 0  # every stored sample, all the same
        [regraded] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert len(server.requests) == asked  # nothing sampled
        assert main(strict) == 0  # the record now says strict: a plain rerun resumes
        assert len(server.requests) == asked
        other = [*strict, "--regrade"]
        other[other.index("--temperature") + 1] = "1.0"
        with pytest.raises(SystemExit, match=r"(?s)temperature: 0\.7 then, 1\.0 now.*only how they are graded"):
            main(other)
        with pytest.raises(SystemExit, match="holds no samples"):
            main([*strict, "--regrade", "--out", str(tmp_path / "empty")])
        future.cancel()
    assert lenient["avg_at_n"] == 1.0 and (regraded["avg_at_n"], regraded["n"], regraded["problems"]) == (0.0, 2, 3)
    stored = [json.loads(line) for line in (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()]
    assert len(stored) == 6 and {t["reward"] for t in stored} == {0.0}
    assert json.loads((tmp_path / "out" / "toy" / "settings.json").read_text())["reward.grading"] == "strict"
    assert json.loads((tmp_path / "out" / "toy" / "summary.json").read_text())["avg_at_n"] == 0.0


def test_a_resume_record_compares_the_settings_both_versions_know(tmp_path: Path) -> None:
    from rstar2_async.cli._eval_record import check_resumable, write_record

    (tmp_path / "samples.jsonl").write_text("{}\n")
    write_record(tmp_path, {"model": "m", "rollout.sampling.temperature": 0.7})
    check_resumable(tmp_path, {"model": "m", "rollout.sampling.temperature": 0.7, "data.sha256": "ab"})  # newer
    with pytest.raises(SystemExit, match=r"model: 'm' then, 'n' now"):
        check_resumable(tmp_path, {"model": "n", "rollout.sampling.temperature": 0.7})
    (tmp_path / "samples.jsonl").write_text("")  # no samples yet: nothing to mix
    check_resumable(tmp_path, {"model": "n"})


def test_eval_requires_explicit_sampling(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--endpoint", "http://x/v1", "--served-model", "m", "--data", "aime24"])
    assert "--temperature" in capsys.readouterr().err


def test_eval_names_a_bad_data_set(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--endpoint", "http://x/v1", "--served-model", "m", "--data", "nope", "--temperature", "0", "--top-p", "1"]
    assert main(argv) == 2
    assert "unknown data set 'nope'" in capsys.readouterr().err


def test_eval_names_an_unreachable_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["eval", "--endpoint", f"http://127.0.0.1:{port}/v1", "--served-model", "m", "--data", "aime24",
            "--temperature", "0", "--top-p", "1", "--limit", "1", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no inference endpoint is reachable" in err and f"127.0.0.1:{port}" in err


def test_eval_a_model_in_process_with_the_transformers_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rstar2_async.demo import cached_tiny_model

    model = cached_tiny_model(Path("runs/cache"))
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"What is {i}*7?", "answer": str(i * 7)}) + "\n" for i in range(2)))
    argv = ["eval", "--model", str(model), "--engine", "transformers", "--data", str(data), "--n", "2", "--temperature", "0",
            "--top-p", "1", "--max-response-tokens", "24", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    [summary] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["problems"] == 2 and summary["n"] == 2
    lines = [json.loads(x) for x in (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and not (tmp_path / "out" / "servers").exists()  # no server was started
    for t in lines:  # token mode, in this process: ids, mask and sampling logprobs of every token
        assert 0 < len(t["response_ids"]) <= 24 and len(t["logprobs"]) == len(t["response_ids"])
        assert any(lp < 0 for lp in t["logprobs"])
    by_problem = {}
    for t in lines:  # greedy: both samples of a problem are the same
        by_problem.setdefault(t["problem_id"], []).append(t["response_ids"])
    assert all(a == b for a, b in by_problem.values())


def test_engine_goes_with_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--endpoint", "http://x/v1", "--served-model", "m", "--engine", "transformers", "--data", "aime24",
            "--temperature", "0", "--top-p", "1"]  # fmt: skip
    with pytest.raises(SystemExit, match="--engine goes with --model"):
        main(argv)


def test_a_grader_that_cannot_start_is_one_line(
    tmp_path: Path, endpoint: tuple[str, FakeModelServer], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    # As when math-verify is missing: the worker dies before its warm-up.
    broken = [sys.executable, "-c", "raise SystemExit('No module named math_verify')"]
    monkeypatch.setattr("rstar2_async.reward._worker.worker_command", lambda function=None: (broken, {}))
    url, _ = endpoint
    argv = ["eval", "--endpoint", url, "--served-model", "m", "--data", "aime24", "--limit", "1",
            "--temperature", "0", "--top-p", "1", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "rstar2 eval: GraderBrokenError: grading worker failed to start" in err and "Traceback" not in err


class FakeRefusingServer(FakeModelServer):
    """Refuses (400, as for a context too long) every request about a problem marked ``(refused)``."""

    async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if b"(refused)" in body:
            return 400, b'{"error": {"message": "max_tokens is too large", "code": 400}}'
        return await super().__call__(method, path, body)


@pytest.mark.parametrize(("refused", "problems", "status"), [(1, 3, 1), (1, 10, 0)])  # 33% errored; 10%, not more
def test_errors_are_counted_apart_and_too_many_fail_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused: int, problems: int, status: int
) -> None:
    rows = [
        {"id": f"t{i}", "problem": f"What is {i}*7?{' (refused)' if i < refused else ''}", "answer": str(i * 7)}
        for i in range(problems)
    ]  # fmt: skip
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(serve_http, FakeRefusingServer())
        argv = ["eval", "--endpoint", f"http://127.0.0.1:{port}/v1", "--served-model", "m", "--data", str(data),
                "--n", "2", "--temperature", "0.7", "--top-p", "0.9", "--out", str(tmp_path / "out")]  # fmt: skip
        assert main(argv) == status
        future.cancel()
    out, err = capsys.readouterr()
    [summary] = json.loads(out.strip().splitlines()[-1])
    assert summary["errors"] == 2 * refused and summary["avg_at_n"] == 1.0  # over the samples that ran
    assert summary["finish_reasons"] == {"answer": 2 * (problems - refused), "error": 2 * refused}
    assert f"{2 * refused}/{2 * problems}" in err  # the table's errors column
    assert json.loads((tmp_path / "out" / "toy" / "summary.json").read_text())["errors"] == 2 * refused
    assert ("max_tokens is too large" in err) == bool(status)  # the first error, when the command fails
