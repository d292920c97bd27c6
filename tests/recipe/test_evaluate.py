"""Evaluation metrics and resume, through the engine, the real grader and a
scripted server over HTTP."""

from __future__ import annotations

import json
import math
from pathlib import Path

import anyio
import msgspec
import pytest

from backends import TokenClient
from rstar2_async.config import RolloutConfig, SamplingConfig
from rstar2_async.errors import DatasetError
from rstar2_async.recipe import evaluate, load_finished, load_problems, majority_correct, regrade, summarize
from rstar2_async.recipe._evaluate import EQUAL_BUDGET, vote
from rstar2_async.reward import Grader, score
from rstar2_async.rollout import RolloutEngine
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeSandbox, arithmetic_policy, serve_http
from rstar2_async.types import Group, Problem, Trajectory, Turn


def wrong_on_odd_problems(conversation: str) -> str:
    text = arithmetic_policy(conversation)
    if "<answer>" in text and "(odd)" in conversation:
        return "<answer>\\boxed{-1}</answer>"
    return text


def problems() -> list[Problem]:
    return [
        Problem(id=f"q{i}", problem=f"What is {i + 2}*{i + 3}? ({'odd' if i % 2 else 'even'})", answer=str((i + 2) * (i + 3)))
        for i in range(4)
    ]


@pytest.mark.anyio
async def test_metrics_samples_and_resume(tmp_path: Path) -> None:
    server = FakeModelServer(policy=wrong_on_odd_problems)
    async with anyio.create_task_group() as tg, Grader(workers=1) as grader:
        port = await tg.start(serve_http, server)
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m") as client:
            engine = RolloutEngine(
                backend=client, sandbox=FakeSandbox(), config=RolloutConfig(), tokenizer=FakeByteTokenizer(), reward=grader
            )
            summary = await evaluate(engine, "toy", problems(), n=3, out_dir=tmp_path, sampling=engine.config.sampling, mode="strict")
            assert summary.avg_at_n == 0.5 and summary.pass_at_n == 0.5 and summary.maj_at_n == 0.5
            assert summary.mean_turns == 2 and summary.mean_tool_calls == 1 and summary.mean_tool_errors == 0
            assert summary.finish_reasons == {"answer": 12} and summary.resumed_samples == 0
            lines = (tmp_path / "samples.jsonl").read_bytes().splitlines()
            assert len(lines) == 12
            golds = {q.id: q.answer for q in problems()}
            for line in lines:  # a stored sample regraded by the public API gets the run's score
                stored = msgspec.json.decode(line, type=Trajectory)
                assert score(stored.model_text, golds[stored.problem_id]) == stored.reward
            assert json.loads((tmp_path / "summary.json").read_text())["avg_at_n"] == 0.5

            # Interrupted run: keep 7 complete lines and half of the 8th.
            (tmp_path / "samples.jsonl").write_bytes(b"\n".join(lines[:7]) + b"\n" + lines[7][:20])
            before = len(server.requests)
            resumed = await evaluate(engine, "toy", problems(), n=3, out_dir=tmp_path, sampling=engine.config.sampling, mode="strict")
            assert resumed.resumed_samples == 7
            assert len(server.requests) - before == 5 * 2  # only the 5 missing samples ran
            assert (resumed.avg_at_n, resumed.pass_at_n) == (0.5, 0.5)
            assert len((tmp_path / "samples.jsonl").read_bytes().splitlines()) == 12
        tg.cancel_scope.cancel()


def test_majority_vote_uses_normalised_answers() -> None:
    def t(i: int, text: str, reward: float) -> Trajectory:
        return Trajectory("p", i, [], [], [], [], [], "answer", 0, response_text=text, reward=reward)

    votes = [t(0, "\\boxed{1/2}", 1.0), t(1, "\\boxed{\\frac{1}{2}}", 1.0), t(2, "\\boxed{3}", 0.0)]
    assert majority_correct(Group(Problem("p", "", "1/2"), votes))
    votes = [t(0, "\\boxed{3}", 0.0), t(1, "\\boxed{3}", 0.0), t(2, "\\boxed{1/2}", 1.0)]
    assert not majority_correct(Group(Problem("p", "", "1/2"), votes))


def test_majority_vote_reads_answers_as_the_grading_mode_did() -> None:
    def t(i: int, text: str, reward: float) -> Trajectory:
        return Trajectory("p", i, [], [], [], [], [], "answer", 0, response_text=text, reward=reward)

    # two unboxed right answers (graded right leniently) against one boxed wrong one
    votes = [t(0, "So the answer is 7.", 1.0), t(1, "Answer: 7", 1.0), t(2, "\\boxed{3}", 0.0)]
    group = Group(Problem("p", "", "7"), votes)
    assert majority_correct(group, mode="lenient")
    assert not majority_correct(group)  # strict sees only the boxed 3
    s = summarize("toy", [group], n=3, temperature=1.0, top_p=1.0, mode="lenient")
    assert s.maj_at_n == 1.0


def test_majority_vote_reads_the_models_text_not_its_tools_output() -> None:
    # Two samples cut off after a tool printed 3: the model answered nothing, so they
    # are no votes for 3 (read from the whole transcript, they would outvote the 7).
    right = Trajectory("p", 0, [], [], [], [], [], "answer", 0, response_text="\\boxed{7}", reward=1.0)
    said = "Let me count. <tool_call>print(len('abc'))</tool_call>"
    tool = "<|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    turn = Turn(0, 10, 10, 0, "stop", text_span=(0, len(said)))
    cut = [Trajectory("p", i, [], [], [], [], [turn], "timeout", 0, response_text=said + tool, reward=0.0) for i in (1, 2)]
    group = Group(Problem("p", "", "7"), [right, *cut])
    assert majority_correct(group, mode="lenient")
    assert [t.model_text for t in cut] == [said, said]


@pytest.mark.anyio
async def test_regrade_grades_the_models_text_and_counts_records_without_spans(tmp_path: Path) -> None:
    said = "Let me count. <tool_call>print(len('abcdefg'))</tool_call>"
    tool = "<|im_end|>\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n"
    cut = Trajectory("q", 0, [], [], [], [], [Turn(0, 9, 9, 0, "stop", text_span=(0, len(said)))], "timeout", 0,
                     response_text=said + tool, reward=1.0)  # fmt: skip
    older = Trajectory("q", 1, [], [], [], [], [Turn(0, 9, 0, 0, "stop")], "answer", 0, response_text="So 7.", reward=0.0)
    failed = Trajectory("q", 2, [], [], [], [], [], "error", 0, error="x", infra_failure="inference: x")
    (tmp_path / "samples.jsonl").write_bytes(b"".join(msgspec.json.encode(t) + b"\n" for t in (cut, older, failed)))
    async with Grader(workers=1, mode="lenient") as grader:
        summary, unspanned = await regrade(
            "toy", [Problem("q", "", "7")], out_dir=tmp_path, reward=grader, sampling=SamplingConfig(), mode="lenient"
        )
    stored = [msgspec.json.decode(line, type=Trajectory) for line in (tmp_path / "samples.jsonl").read_bytes().splitlines()]
    assert [t.reward for t in stored] == [0.0, 1.0, None]  # the tool's 7 is no answer; the old record's is read whole
    assert unspanned == 1 and (summary.n, summary.errors, summary.avg_at_n) == (3, 1, 0.5)
    assert json.loads((tmp_path / "summary.json").read_text())["avg_at_n"] == 0.5


def test_load_finished_ignores_other_problems(tmp_path: Path) -> None:
    assert load_finished(tmp_path / "none.jsonl", problems()) == {}


def test_datasets_load_and_errors_are_clear(tmp_path: Path) -> None:
    assert len(load_problems("aime24")) == 30
    assert len(load_problems("math500", limit=5)) == 5
    with pytest.raises(DatasetError, match="unknown data set 'aime2099'.*aime24"):
        load_problems("aime2099")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\n{"problem": "y"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: Object missing required field `answer`"):
        load_problems(bad)


def test_errored_samples_are_counted_apart_not_as_wrong_answers() -> None:
    def t(i: int, reward: float | None, finish: str = "answer", error: str = "") -> Trajectory:
        return Trajectory("p", i, [], [], [], [], [], finish, 0, response_text="\\boxed{1}", reward=reward, error=error)  # type: ignore[arg-type]

    refused = "RequestRejected: HTTP 400: too long"
    groups = [
        Group(Problem("a", "", "1"), [t(0, 1.0), t(1, None, "error", refused)]),
        Group(Problem("b", "", "1"), [t(0, 0.0), t(1, 1.0)]),
        Group(Problem("c", "", "1"), [t(0, None, "error", "ServerUnavailable: down"), t(1, None, "error", "x")]),
    ]
    s = summarize("toy", groups, n=2, temperature=1.0, top_p=1.0)
    assert s.avg_at_n == 2 / 3  # over the 3 samples that ran; counting errors as wrong would give 1/3
    assert (s.errors, s.first_error) == (3, refused)
    assert s.pass_at_n == 1.0 and s.problems == 3  # over the problems with a sample that ran
    assert s.finish_reasons == {"answer": 3, "error": 3}
    nothing = summarize("toy", groups[2:], n=2, temperature=1.0, top_p=1.0)
    assert nothing.errors == 2 and math.isnan(nothing.avg_at_n) and math.isnan(nothing.pass_at_n)


def test_errored_samples_are_redone_on_resume(tmp_path: Path) -> None:
    def t(i: int, finish: str) -> Trajectory:
        return Trajectory("q0", i, [], [], [], [], [], finish, 0, error="refused" if finish == "error" else "")  # type: ignore[arg-type]

    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in (t(0, "answer"), t(1, "error"))))
    assert set(load_finished(path, problems())) == {("q0", 0)}  # sample 1 is run again
    with path.open("ab") as f:  # as the rerun appends it
        f.write(msgspec.json.encode(t(1, "token_budget")) + b"\n")
    assert load_finished(path, problems())["q0", 1].finish_reason == "token_budget"


def test_majority_vote_groups_equal_answers_written_differently() -> None:
    def t(i: int, text: str, reward: float) -> Trajectory:
        return Trajectory("p", i, [], [], [], [], [], "answer", 0, response_text=text, reward=reward)

    # three wrong votes for one value in three spellings outvote two right ones
    votes = [t(0, "\\boxed{0.5}", 0.0), t(1, "\\boxed{\\frac{1}{2}}", 0.0), t(2, "\\boxed{1/2}", 0.0)]
    votes += [t(3, "\\boxed{0.25}", 1.0), t(4, "\\boxed{\\frac14}", 1.0)]
    assert not majority_correct(Group(Problem("p", "", "1/4"), votes))
    # answers the grader rewarded are one group, whatever their spelling
    votes = [t(0, "\\boxed{\\pi/2}", 1.0), t(1, "\\boxed{\\frac{\\pi}{2}}", 1.0), t(2, "\\boxed{3}", 0.0)]
    votes += [t(3, "\\boxed{3}", 0.0)]
    votes[0:0] = [t(9, "\\boxed{1.5707963}", 1.0)]
    assert majority_correct(Group(Problem("p", "", "\\frac{\\pi}{2}"), votes))
    # lenient extraction, then equivalence: a decimal comma and a point are one vote
    votes = [t(0, "The answer is 1,5.", 0.0), t(1, "Answer: 1.5", 0.0), t(2, "The answer is 2.", 1.0)]
    assert not majority_correct(Group(Problem("p", "", "2"), votes), mode="lenient")
    # lenient equivalence includes its tolerance: two spellings of the rounded value are one vote
    votes = [t(0, "\\boxed{3.14159}", 0.0), t(1, "\\boxed{3.1416}", 0.0)]
    votes += [t(2, "\\boxed{2}", 1.0), t(3, "\\boxed{2}", 1.0)]
    assert not majority_correct(Group(Problem("p", "", "2"), votes), mode="lenient")  # a tie, answered first
    assert majority_correct(Group(Problem("p", "", "2"), votes))  # strict: two votes of one each
    # a tie goes to the group answered first
    votes = [t(0, "\\boxed{3}", 0.0), t(1, "\\boxed{2}", 1.0)]
    assert not majority_correct(Group(Problem("p", "", "2"), votes))
    # two wrong answers equal only to math-verify (the grader's worker) are one vote too
    votes = [t(0, "\\boxed{\\sqrt{12}}", 0.0), t(1, "\\boxed{2\\sqrt{2}}", 1.0)]
    votes += [t(2, "\\boxed{2\\sqrt{3}}", 0.0), t(3, "\\boxed{\\sqrt{8}}", 1.0)]
    for mode in ("strict", "lenient"):
        assert not majority_correct(Group(Problem("p", "", "2\\sqrt{2}"), votes), mode=mode)  # a tie, answered first
    assert majority_correct(Group(Problem("p", "", "2\\sqrt{2}"), [*votes, t(4, "\\boxed{2\\sqrt{2}}", 1.0)]))


def test_majority_vote_asks_the_grader_within_its_budget() -> None:
    def t(i: int, text: str, reward: float) -> Trajectory:
        return Trajectory("p", i, [], [], [], [], [], "answer", 0, response_text=text, reward=reward)

    # 12 wrong answers, all different to math-verify too: 66 comparisons would settle it
    votes = [t(0, "\\boxed{\\pi}", 1.0), t(1, "\\boxed{\\pi}", 1.0)]
    votes += [t(2 + k, f"\\boxed{{\\sqrt{{{k + 2}}} + x}}", 0.0) for k in range(12)]
    group = Group(Problem("p", "", "\\pi"), votes)
    assert vote(group) == (True, True) and EQUAL_BUDGET < 66
    summary = summarize("toy", [group], n=14, temperature=1.0, top_p=1.0)
    assert (summary.maj_at_n, summary.maj_at_n_capped) == (1.0, 1)
    assert vote(Group(group.problem, votes[:8])) == (True, False)  # 15 comparisons
