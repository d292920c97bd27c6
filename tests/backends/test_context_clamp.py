"""A request's ``max_tokens`` is clamped to what the server's context leaves after
the prompt (``max_model_len`` from ``GET /v1/models``, learnt once per client), and a
trajectory that runs out of context ends as ``token_budget``, not as an error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from backends import ChatClient, SamplingParams, TokenClient
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import RolloutEngine, Toolbox, load_tools, problem_messages
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeSandbox, serve_http
from rstar2_async.types import Problem

pytestmark = pytest.mark.anyio

PROMPT = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])


@asynccontextmanager
async def client_for(server: FakeModelServer, asked: list[str]) -> AsyncIterator[TokenClient]:
    async def handler(method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/v1/models":
            asked.append(path)
        return await server(method, path, body)

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, handler)
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m") as client:
            yield client
        tg.cancel_scope.cancel()


async def test_max_tokens_is_clamped_to_the_context_left_after_the_prompt() -> None:
    server, asked = FakeModelServer(max_model_len=300), []
    async with client_for(server, asked) as client:
        async with anyio.create_task_group() as tg:  # many first turns at once: one question
            for _ in range(8):
                tg.start_soon(lambda: client.generate(PROMPT, max_tokens=8192, sampling=SamplingParams()))
        assert await client.context_length() == 300
    assert asked == ["/v1/models"]
    assert [r["max_tokens"] for r in server.requests] == [300 - len(PROMPT)] * 8


async def test_a_prompt_that_fills_the_context_gets_length_without_a_request() -> None:
    server, asked = FakeModelServer(max_model_len=50), []
    async with client_for(server, asked) as client:
        done = await client.generate(list(range(60, 110)), max_tokens=16, sampling=SamplingParams())
    assert (done.token_ids, done.finish_reason) == ([], "length") and server.requests == []


async def test_a_server_that_does_not_say_gets_max_tokens_unchanged() -> None:
    server, asked = FakeModelServer(), []  # /v1/models answers 404
    async with client_for(server, asked) as client:
        for _ in range(2):
            await client.generate(PROMPT, max_tokens=8192, sampling=SamplingParams())
        assert await client.context_length() is None
    assert asked == ["/v1/models"] and [r["max_tokens"] for r in server.requests] == [8192, 8192]


def _prompt_length(problem: Problem, config: RolloutConfig) -> int:
    return len(FakeByteTokenizer().encode_prompt(problem_messages(problem, config, Toolbox(load_tools(config.tools), FakeSandbox()))))


@pytest.mark.parametrize("room", [8, 60])  # cut in the first turn; cut after the tool's answer
async def test_a_trajectory_out_of_context_ends_as_token_budget(room: int) -> None:
    config = RolloutConfig(max_response_tokens=8192, max_in_flight=4)
    problems = [Problem(id=f"p{i}", problem=f"What is {i + 2}*{i + 3}?", answer=str((i + 2) * (i + 3))) for i in range(2)]
    server = FakeModelServer(max_model_len=max(_prompt_length(p, config) for p in problems) + room)
    async with client_for(server, []) as client:
        engine = RolloutEngine(backend=client, sandbox=FakeSandbox(), config=config, tokenizer=FakeByteTokenizer())
        groups = await engine.run(problems, n=2)
    for t in (t for g in groups for t in g.trajectories):
        assert (t.finish_reason, t.error) == ("token_budget", "")
        assert len(t.prompt_ids) + len(t.response_ids) <= server.max_model_len  # type: ignore[operator]


CHAT = [{"role": "user", "content": "What is 2*3?"}]


@asynccontextmanager
async def chat_client_for(server: FakeModelServer, asked: list[str]) -> AsyncIterator[ChatClient]:
    async def handler(method: str, path: str, body: bytes) -> tuple[int, bytes]:
        asked.append(path)
        return await server(method, path, body)

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, handler)
        async with ChatClient.from_url(f"http://127.0.0.1:{port}/v1", model="m", api_key="k") as client:
            yield client
        tg.cancel_scope.cancel()


async def test_chat_max_tokens_is_clamped_by_the_servers_count_of_the_conversation() -> None:
    server, asked = FakeModelServer(max_model_len=120), []
    room = 120 - len("<|im_start|>user\nWhat is 2*3?<|im_end|>\n<|im_start|>assistant\n")
    async with chat_client_for(server, asked) as client:
        for _ in range(2):
            done = await client.chat(CHAT, max_tokens=8192, sampling=SamplingParams())
            assert done.finish_reason == "length" and done.completion_tokens <= room
        full = await client.chat([{"role": "user", "content": "x" * 200}], max_tokens=16, sampling=SamplingParams())
    assert (full.text, full.finish_reason, full.completion_tokens) == ("", "length", 0)
    assert [r["max_tokens"] for r in server.requests] == [room, room]  # the full one was not sent
    assert asked.count("/v1/models") == 1 and asked.count("/tokenize") == 3


async def test_a_chat_server_that_does_not_say_gets_max_tokens_unchanged() -> None:
    server, asked = FakeModelServer(), []  # no /v1/models card, no /tokenize: a hosted endpoint
    async with chat_client_for(server, asked) as client:
        for _ in range(2):
            assert (await client.chat(CHAT, max_tokens=8192, sampling=SamplingParams())).finish_reason == "stop"
    assert [r["max_tokens"] for r in server.requests] == [8192, 8192]
    assert asked.count("/v1/models") == 1 and "/tokenize" not in asked
