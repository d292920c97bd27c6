"""The rollout engine and agent loop against a scripted server over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from backends import Completion, RetryPolicy, SamplingParams, TokenClient
from rstar2_async.config import RolloutConfig, SamplingConfig
from rstar2_async.reward import score
from rstar2_async.rollout import RolloutEngine
from rstar2_async.testing import (
    IM_END,
    FakeByteTokenizer,
    FakeExactReward,
    FakeModelServer,
    FakeSandbox,
    last_user_message,
    serve_http,
)
from rstar2_async.types import Problem
from sandbox import ExecResult

pytestmark = pytest.mark.anyio

FAST_RETRY = RetryPolicy(max_retries=3, initial_s=0.001, max_s=0.01)


def problems(k: int) -> list[Problem]:
    return [Problem(id=f"p{i}", problem=f"What is {i + 2}*{i + 3}?", answer=str((i + 2) * (i + 3))) for i in range(k)]


@asynccontextmanager
async def running(server: FakeModelServer, **engine_kw: object) -> AsyncIterator[tuple[RolloutEngine, FakeSandbox]]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, server)
        sandbox = FakeSandbox()
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m", retry=FAST_RETRY) as client:
            config = engine_kw.pop("config", RolloutConfig(max_in_flight=8))
            yield (
                RolloutEngine(
                    backend=client,
                    sandbox=sandbox,
                    config=config,  # type: ignore[arg-type]
                    tokenizer=FakeByteTokenizer(),
                    reward=FakeExactReward(),
                    **engine_kw,  # type: ignore[arg-type]
                ),
                sandbox,
            )
        tg.cancel_scope.cancel()


async def test_groups_with_tool_calls_and_token_accounting() -> None:
    server = FakeModelServer()
    async with running(server) as (engine, sandbox):
        groups = await engine.run(problems(3), n=4)
    assert [g.problem.id for g in groups] == ["p0", "p1", "p2"]
    tok = FakeByteTokenizer()
    for g in groups:
        assert [t.sample_index for t in g.trajectories] == [0, 1, 2, 3]
        for t in g.trajectories:
            assert t.finish_reason == "answer" and t.reward == 1.0
            assert t.num_turns == 2 and t.num_tool_calls == 1 and t.num_tool_errors == 0
            assert len(t.response_ids) == len(t.loss_mask) == len(t.logprobs)
            first, second = t.turns
            # model tokens: mask 1 and the server's logprob; tool tokens: mask 0, logprob 0
            assert t.loss_mask[first.start:first.num_generated] == [1] * first.num_generated
            tool = slice(first.num_generated, first.num_generated + first.num_appended)
            assert set(t.loss_mask[tool]) == {0} and set(t.logprobs[tool]) == {0.0}
            assert second.start == first.num_generated + first.num_appended
            assert t.response_ids[first.num_generated - 1] == IM_END and t.response_ids[-1] == IM_END
            assert "<tool_response>\n" + g.problem.answer in tok.decode(t.response_ids[tool])
            assert set(t.logprobs[second.start:]) == {-0.25}
            assert t.response_text == tok.decode(t.response_ids)  # kept as pieces, never re-decoded
            # what was graded: the model's two turns, without their end tokens and the tool turn
            own = [tok.decode(t.response_ids[u.start:u.start + u.num_generated - 1]) for u in t.turns]
            assert t.model_text == "\n".join(own) and "<tool_response>" not in t.model_text
    # The prompt + response the server saw on the second turn is exactly our tokens.
    t = groups[0].trajectories[0]
    second_prompts = [r["prompt"] for r in server.requests if len(r["prompt"]) > len(t.prompt_ids) + 10]
    assert t.prompt_ids + t.response_ids[: t.turns[1].start] in second_prompts
    assert len(sandbox.calls) == 12
    stats = engine.statistics()
    assert stats.trajectories_finished == 12 and stats.groups_finished == 3 and stats.in_flight == 0
    assert stats.tool_calls == 12 and stats.turns == 24


async def test_groups_stream_out_before_the_batch_ends() -> None:
    slow_problem = Problem(id="slow", problem="What is 1*1?", answer="1")

    class SlowOnOne(FakeModelServer):
        async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
            if body and "1*1" in self.tokenizer.decode(json.loads(body)["prompt"]):  # not GET /v1/models
                await anyio.sleep(3600)  # never finishes unless cancelled
            return await super().__call__(method, path, body)

    async with running(SlowOnOne()) as (engine, _):
        async with engine.stream([slow_problem, *problems(2)], n=2) as groups:
            first = await groups.receive()
            second = await groups.receive()
            # leaving the block cancels the stuck trajectories
    assert {first.problem.id, second.problem.id} == {"p0", "p1"}


async def test_admission_bounds_trajectories_in_flight() -> None:
    peak = 0
    server = FakeModelServer(delay_s=0.01)
    async with running(server, config=RolloutConfig(max_in_flight=3)) as (engine, _):

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, engine.statistics().in_flight)
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            groups = await engine.run(problems(4), n=3)
            tg.cancel_scope.cancel()
    assert peak == 3 and sum(len(g.trajectories) for g in groups) == 12


async def test_failing_and_dropping_server_is_retried() -> None:
    server = FakeModelServer(fail_first=2, drop_first=1)
    async with running(server) as (engine, _):
        [group] = await engine.run(problems(1), n=1)
    assert group.trajectories[0].finish_reason == "answer"
    assert len(server.requests) == 2 + 2  # two failed attempts, then two good turns


async def test_garbage_responses_are_retried_then_reported_as_an_infrastructure_failure() -> None:
    """The server's failure, not the model's: each sample is rolled again once
    (``infra_rerolls = 1``), then left marked and ungraded."""
    server = FakeModelServer(garbage_first=100)
    async with running(server, config=RolloutConfig(infra_rerolls=1)) as (engine, _):
        [group] = await engine.run(problems(1), n=2)
    for t in group.trajectories:
        assert t.finish_reason == "error" and "BadResponse" in t.error and t.reward is None
        assert t.infra_failure == f"inference: {t.error}" and t.infra_retries == [t.infra_failure]
    assert len(server.requests) == 2 * 2 * (FAST_RETRY.max_retries + 1)
    assert engine.statistics().infra_failed == 4


async def test_aborted_generations_resume_from_their_tokens() -> None:
    server = FakeModelServer(abort_every=2)  # every other request stops halfway
    async with running(server) as (engine, _):
        [group] = await engine.run(problems(1), n=1)
    t = group.trajectories[0]
    assert t.finish_reason == "answer" and t.reward == 1.0
    resumed = [r for r in server.requests if r["prompt"][-1] != ord("\n")]
    assert resumed, "some requests must continue a partial answer"


async def test_token_budget_and_turn_limit() -> None:
    def chatter(conversation: str) -> str:
        call = {"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(1)"}}
        return f"again <tool_call>{json.dumps(call)}</tool_call>"

    async with running(FakeModelServer(policy=chatter), config=RolloutConfig(max_turns=3)) as (engine, sandbox):
        [group] = await engine.run(problems(1), n=1)
    t = group.trajectories[0]
    assert t.finish_reason == "turn_limit" and t.num_turns == 3
    assert t.num_tool_calls == 2 and len(sandbox.calls) == 2  # the last turn's call is not run

    async with running(FakeModelServer(policy=chatter), config=RolloutConfig(max_response_tokens=150)) as (engine, _):
        [group] = await engine.run(problems(1), n=1)
    t = group.trajectories[0]
    assert t.finish_reason == "token_budget" and len(t.response_ids) <= 150


async def test_malformed_call_returns_a_tool_error_to_the_model() -> None:
    def sloppy(conversation: str) -> str:
        if "<tool_response>" in last_user_message(conversation):
            return "<answer>\\boxed{0}</answer>"
        return "<tool_call>{oops</tool_call>"

    server = FakeModelServer(policy=sloppy)
    async with running(server) as (engine, sandbox):
        [group] = await engine.run(problems(1), n=1)
    t = group.trajectories[0]
    assert t.finish_reason == "answer" and t.num_tool_errors == 1 and sandbox.calls == []
    assert t.turns[0].tool_results[0].status == "invalid_call"
    assert "not valid JSON" in t.response_text


async def test_trajectory_timeout_keeps_what_it_has() -> None:
    server = FakeModelServer(delay_s=3600)
    config = RolloutConfig(trajectory_timeout_s=0.2)
    async with running(server, config=config) as (engine, _):
        [group] = await engine.run(problems(1), n=2)
    assert [t.finish_reason for t in group.trajectories] == ["timeout", "timeout"]


class FakeHangingSandbox:
    """Sandbox double whose calls never finish."""

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_timeout_during_a_tool_call_keeps_the_generated_turn() -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, FakeModelServer())
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m", retry=FAST_RETRY) as client:
            engine = RolloutEngine(
                backend=client, sandbox=FakeHangingSandbox(), config=RolloutConfig(trajectory_timeout_s=0.5), tokenizer=FakeByteTokenizer()
            )
            [group] = await engine.run(problems(1), n=1)
        tg.cancel_scope.cancel()
    [t] = group.trajectories
    assert t.finish_reason == "timeout"
    [turn] = t.turns  # generated before the timeout: recorded, its call never answered
    assert turn.num_generated == len(t.response_ids) > 0 and turn.tool_results == [] and turn.num_appended == 0
    assert "<tool_call>" in t.response_text and t.loss_mask == [1] * turn.num_generated


async def test_a_stored_sample_cut_off_after_its_tool_turn_regrades_as_graded() -> None:
    """The transcript ends with the tool's output, the gold answer; the model never
    wrote it.  The run grades the model's text (0), and so does a regrade of
    ``model_text``; the real grader reading the whole transcript would pay the tool."""

    class FakeStuckAfterTools(FakeModelServer):
        async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
            if body and self.requests:  # the turn after the tool's: until the trajectory's timeout
                await anyio.sleep_forever()
            return await super().__call__(method, path, body)

    config = RolloutConfig(trajectory_timeout_s=0.5)
    async with running(FakeStuckAfterTools(), config=config) as (engine, _):
        [group] = await engine.run(problems(1), n=1)
    [t] = group.trajectories
    assert t.finish_reason == "timeout" and t.reward == 0.0 and t.num_tool_calls == 1
    assert t.response_text.rstrip().endswith("</tool_response><|im_end|>\n<|im_start|>assistant")
    assert score(t.model_text, group.problem.answer, mode="lenient") == 0.0
    assert score(t.response_text, group.problem.answer, mode="lenient") == 1.0


async def test_cancellation_leaves_no_task_or_connection() -> None:
    server = FakeModelServer(delay_s=3600)
    async with running(server) as (engine, _):
        with anyio.move_on_after(0.3):
            await engine.run(problems(4), n=4)
        assert engine.statistics().in_flight == 0


async def test_client_rejects_4xx_without_retry() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += request.url.path.endswith("/completions")  # not the GET /v1/models
        return httpx.Response(400, json={"error": "prompt too long"})

    async with TokenClient("http://x/v1", model="m", transport=httpx.MockTransport(handler)) as client:
        from backends import RequestRejected

        with pytest.raises(RequestRejected, match="prompt too long"):
            await client.generate([1, 2], max_tokens=4, sampling=SamplingParams())
    assert calls == 1


async def test_chat_mode_through_the_openai_sdk() -> None:
    from backends import ChatClient

    server = FakeModelServer()
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, server)
        async with ChatClient.from_url(f"http://127.0.0.1:{port}/v1", model="hosted", api_key="sk-test") as client:
            engine = RolloutEngine(backend=client, sandbox=FakeSandbox(), config=RolloutConfig(), reward=FakeExactReward())
            groups = await engine.run(problems(2), n=2)
        tg.cancel_scope.cancel()
    for g in groups:
        for t in g.trajectories:
            assert t.finish_reason == "answer" and t.reward == 1.0 and t.num_tool_calls == 1
            assert t.response_ids == [] and "<tool_response>" in t.response_text
            assert "<tool_response>" not in t.model_text and t.model_text.endswith(f"\\boxed{{{g.problem.answer}}}</answer>")
    assert server.requests[0]["model"] == "hosted"
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["system", "user", "assistant", "user"]


async def test_finished_trajectories_are_not_rerun() -> None:
    server = FakeModelServer()
    async with running(server) as (engine, _):
        first = await engine.run(problems(2), n=2)
        kept = {(t.problem_id, t.sample_index): t for g in first for t in g.trajectories if t.sample_index == 0}
        requests_before = len(server.requests)
        seen: list[tuple[str, int]] = []
        second = await engine.run(problems(2), n=2, finished=kept, on_trajectory=lambda t: seen.append((t.problem_id, t.sample_index)))
    assert sorted(seen) == [("p0", 1), ("p1", 1)]
    assert len(server.requests) - requests_before == 2 * 2  # two new trajectories of two turns
    assert [g.trajectories[0] for g in second] == [g.trajectories[0] for g in first]


class FakeGatedBackend:
    """Test double of a token backend: every generation waits at a gate, so the test
    sees exactly how many run at once, then answers ``\\boxed{1}`` and EOS."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.active = self.peak = 0
        self.seen: list[tuple[int, float]] = []  # (max_tokens, temperature) of each request
        self.sessions: list[object] = []

    async def generate(self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: object = None) -> Completion:
        self.seen.append((max_tokens, sampling.temperature))
        self.sessions.append(session)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await self.gate.wait()
        finally:
            self.active -= 1
        ids = [*b"<answer>\\boxed{1}</answer>", IM_END]
        return Completion(token_ids=ids, logprobs=[-0.1] * len(ids), finish_reason="stop")


async def test_one_limiter_bounds_a_rollout_ahead_and_an_evaluation_at_once() -> None:
    backend = FakeGatedBackend()
    config = RolloutConfig(max_in_flight=4, max_response_tokens=500, sampling=SamplingConfig(temperature=1.0))
    engine = RolloutEngine(backend=backend, sandbox=FakeSandbox(), config=config, tokenizer=FakeByteTokenizer())
    results: dict[str, list] = {}

    async def rollout() -> None:  # a training step's rollout, with its stage's budget
        results["rollout"] = await engine.run(problems(3), n=2, max_response_tokens=300)

    async def evaluation() -> None:  # an evaluation at once, greedy
        results["eval"] = await engine.run(problems(2), n=2, sampling=SamplingConfig(temperature=0.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(rollout)
        tg.start_soon(evaluation)
        await anyio.wait_all_tasks_blocked()
        assert backend.active == 4 and engine.statistics().in_flight == 4  # not 4 per call
        assert engine.statistics().waiting_for_admission >= 1
        backend.gate.set()
    assert backend.peak == 4
    assert sum(len(g.trajectories) for g in results["rollout"] + results["eval"]) == 10
    # Each call's own limits reached its generations.
    assert sorted(set(backend.seen)) == [(300, 1.0), (500, 0.0)]
    assert backend.seen.count((300, 1.0)) == 6 and backend.seen.count((500, 0.0)) == 4


async def test_problems_from_a_stream_are_taken_as_the_feeder_offers_them() -> None:
    server = FakeModelServer()
    async with running(server) as (engine, _):
        send, feed = anyio.create_memory_object_stream[Problem](0)
        fed = problems(3)
        async with engine.stream(feed, n=2) as groups:
            async with send:
                for p in fed:
                    await send.send(p)  # returns once the engine took it
            got = [g async for g in groups]  # the stream ends with the feed
    assert sorted(g.problem.id for g in got) == ["p0", "p1", "p2"]
    assert all(any(g.problem is p for p in fed) for g in got)  # the very objects fed
    assert all(t.reward == 1.0 for g in got for t in g.trajectories)


async def test_one_problem_in_flight_twice_has_a_session_per_trajectory() -> None:
    """Streaming can run one problem at two stream positions at once (an epoch's end):
    each trajectory is its own pool session (affinity, the held KV, end_session)."""
    backend = FakeGatedBackend()
    engine = RolloutEngine(backend=backend, sandbox=FakeSandbox(), config=RolloutConfig(), tokenizer=FakeByteTokenizer())
    twice = [*problems(1), *problems(1)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run, twice, 2)
        await anyio.wait_all_tasks_blocked()
        assert backend.active == 4
        backend.gate.set()
    assert len(set(backend.sessions)) == 4


async def test_seeded_calls_seed_each_request_from_the_problem_sample_and_turn() -> None:
    """Every request of a seeded call has its own seed, a function of (call seed,
    problem, how often the call met it, sample, turn): a rerun sends the same ones,
    whatever order the requests arrive in.  Unseeded calls send none."""

    def seeds(server: FakeModelServer) -> dict[tuple[str, int], list[int]]:
        """(problem text, turn) -> the seeds its requests sent."""
        out: dict[tuple[str, int], list[int]] = {}
        for r in server.requests:
            text = FakeByteTokenizer().decode(r["prompt"])
            out.setdefault((text.split("What is ")[1][:8], text.count("<tool_response>\n")), []).append(r["seed"])
        return {key: sorted(v) for key, v in out.items()}

    batch = [*problems(2), problems(1)[0]]  # p0 twice: its second meeting samples afresh
    runs = []
    for _ in range(2):
        server = FakeModelServer()
        async with running(server) as (engine, _):
            await engine.run(batch, n=2, sampling=SamplingConfig(seed=7))
        runs.append(server)
    all_seeds = [r["seed"] for r in runs[0].requests]
    assert len(all_seeds) == 3 * 2 * 2 and len(set(all_seeds)) == len(all_seeds)  # 3 groups x 2 samples x 2 turns
    assert seeds(runs[0]) == seeds(runs[1])
    server = FakeModelServer()
    async with running(server) as (engine, _):
        await engine.run(batch, n=2, sampling=SamplingConfig(seed=8))
    assert not set(all_seeds) & {r["seed"] for r in server.requests}
    server = FakeModelServer()
    async with running(server) as (engine, _):
        await engine.run(batch, n=2)
    assert all("seed" not in r for r in server.requests)
