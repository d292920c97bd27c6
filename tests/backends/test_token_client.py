"""The token client: the request it sends, and its reading of vLLM's completions (token
ids, logprobs, bad answers), streamed and whole."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
import pytest

from backends import BadResponse, RetryPolicy, SamplingParams, ServerUnavailable, TokenClient
from rstar2_async.testing import FakeModelServer, serve_http

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(max_retries=0)


def answering(choice: dict[str, Any], *events: bytes) -> httpx.MockTransport:
    """A server that answers ``choice``: whole, or streamed as one chunk (after
    ``events``, raw events sent first) and ``[DONE]``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        answer = msgspec.json.encode({"choices": [choice]})
        if not json.loads(request.content).get("stream"):
            return httpx.Response(200, content=answer)
        return httpx.Response(200, content=b"".join(events) + b"data: " + answer + b"\n\ndata: [DONE]\n\n")

    return httpx.MockTransport(handler)


async def generate(choice: dict[str, Any], stream: bool, *events: bytes) -> tuple[list[int], list[float]]:
    transport = answering(choice, *events)
    async with TokenClient("http://x/v1", model="m", transport=transport, retry=NO_RETRY, stream=stream) as client:
        c = await client.generate([1, 2], max_tokens=4, sampling=SamplingParams())
    return c.token_ids, c.logprobs


@pytest.fixture(params=[True, False], ids=["streamed", "whole"])
def stream(request: pytest.FixtureRequest) -> bool:
    return request.param


async def test_token_ids_and_their_logprobs(stream: bool) -> None:
    choice = {"token_ids": [7, 8], "logprobs": {"tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.5, -1]}}
    assert await generate(choice | {"finish_reason": "stop"}, stream) == ([7, 8], [-0.5, -1.0])


async def test_a_null_logprob_reads_as_zero(stream: bool) -> None:
    choice = {"token_ids": [7, 8], "logprobs": {"token_logprobs": [None, -1.5]}, "finish_reason": "stop"}
    assert await generate(choice, stream) == ([7, 8], [0.0, -1.5])


async def test_ids_from_the_token_strings_of_a_server_without_token_ids(stream: bool) -> None:
    choice = {"logprobs": {"tokens": ["token_id:7", "token_id:9"], "token_logprobs": [-0.5, None]}, "finish_reason": "stop"}
    assert await generate(choice, stream) == ([7, 9], [-0.5, 0.0])


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"logprobs": {"tokens": ["seven"], "token_logprobs": [-0.5]}}, "no token ids"),
        ({"logprobs": {"tokens": [7], "token_logprobs": [-0.5]}}, "no token ids"),
        ({"token_ids": [7, 8], "logprobs": {"token_logprobs": [-0.5]}}, "2 token ids but 1 logprobs"),
        ({"token_ids": [7], "logprobs": {"token_logprobs": ["x"]}}, "undecodable completion"),
    ],
)
async def test_bad_answers_are_bad_responses(choice: dict[str, Any], message: str, stream: bool) -> None:
    with pytest.raises(BadResponse, match=message):
        await generate(choice, stream)


async def test_a_streamed_chunk_with_an_error_fails_the_request_and_keeps_nothing_twice() -> None:
    first = {"choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-0.5]}, "finish_reason": None}]}
    error = {"error": {"message": "engine dead", "code": 500}}
    events = [b"data: " + msgspec.json.encode(first) + b"\n\n", b"data: " + msgspec.json.encode(error) + b"\n\n"]
    with pytest.raises(ServerUnavailable, match="engine dead"):
        await generate({"token_ids": [8], "logprobs": {"token_logprobs": [-1]}, "finish_reason": "stop"}, True, *events)


async def test_a_stream_cut_short_resumes_from_its_tokens() -> None:
    """A stream that ends without a finish reason was cut short: the next request
    continues from the tokens it streamed, and they are not asked for again."""
    sent: list[dict] = []
    parts = iter([([7, 8], None), ([9], "stop")])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        sent.append(json.loads(request.content))
        ids, finish = next(parts)
        chunk = {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": [-0.5] * len(ids)}, "finish_reason": finish}]}
        return httpx.Response(200, content=b"data: " + msgspec.json.encode(chunk) + b"\n\ndata: [DONE]\n\n")

    async with TokenClient("http://x/v1", model="m", transport=httpx.MockTransport(handler), retry=NO_RETRY) as client:
        c = await client.generate([1, 2], max_tokens=10, sampling=SamplingParams())
    assert (c.token_ids, c.finish_reason) == ([7, 8, 9], "stop")
    assert [(b["prompt"], b["max_tokens"]) for b in sent] == [([1, 2], 10), ([1, 2, 7, 8], 8)]
    assert client.statistics().resumed == 1


async def test_streamed_in_many_chunks_over_http_equals_the_whole_answer() -> None:
    """The same scripted model over real HTTP: the streamed turn (chunks of the
    request's ``stream_interval`` tokens) reads as the whole one, token for token."""
    import anyio

    server = FakeModelServer()
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, server)
        prompt = server.tokenizer.encode_prompt([{"role": "user", "content": "What is 6*7?"}])
        got = []
        for stream in (True, False):
            async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m", retry=NO_RETRY, stream=stream) as client:
                got.append(await client.generate(prompt, max_tokens=500, sampling=SamplingParams()))
        tg.cancel_scope.cancel()
    streamed, whole = got
    assert len(streamed.token_ids) > 32  # more than two chunks
    assert (streamed.token_ids, streamed.logprobs, streamed.finish_reason) == (whole.token_ids, whole.logprobs, whole.finish_reason)
    assert server.requests[0]["stream"] is True and "stream" not in server.requests[1]


async def test_the_request_as_sent_through_an_httpx_transport() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        sent.append(request)
        chunk = {"choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-1]}, "finish_reason": "stop"}]}
        return httpx.Response(200, content=b"data: " + msgspec.json.encode(chunk) + b"\n\ndata: [DONE]\n\n")

    transport = httpx.MockTransport(handler)
    async with TokenClient("http://h:8000/v1", model="m", api_key="k", transport=transport, retry=NO_RETRY) as client:
        await client.generate([1, 2, 3], max_tokens=4, sampling=SamplingParams(temperature=0.5, seed=3))
    [request] = sent
    assert (request.method, str(request.url)) == ("POST", "http://h:8000/v1/completions")
    content = request.content
    assert request.headers.raw == [
        (b"Host", b"h:8000"),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer k"),
        (b"Content-Length", str(len(content)).encode()),
    ]
    body = json.loads(content)
    assert (body["prompt"], body["max_tokens"], body["temperature"], body["seed"]) == ([1, 2, 3], 4, 0.5, 3)
    assert body["return_token_ids"] is True and request.extensions["timeout"]["read"] == 3600.0
    assert (body["stream"], body["stream_interval"]) == (True, 64)
