"""The token client: the request it sends, and its reading of vLLM's completions (token ids, logprobs, bad answers)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from backends import BadResponse, RetryPolicy, SamplingParams, TokenClient

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(max_retries=0)


def answering(choice: dict[str, Any]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        return httpx.Response(200, json={"choices": [choice]})

    return httpx.MockTransport(handler)


async def generate(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    async with TokenClient("http://x/v1", model="m", transport=answering(choice), retry=NO_RETRY) as client:
        c = await client.generate([1, 2], max_tokens=4, sampling=SamplingParams())
    return c.token_ids, c.logprobs


async def test_token_ids_and_their_logprobs() -> None:
    choice = {"token_ids": [7, 8], "logprobs": {"tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.5, -1]}}
    assert await generate(choice | {"finish_reason": "stop"}) == ([7, 8], [-0.5, -1.0])


async def test_a_null_logprob_reads_as_zero() -> None:
    choice = {"token_ids": [7, 8], "logprobs": {"token_logprobs": [None, -1.5]}, "finish_reason": "stop"}
    assert await generate(choice) == ([7, 8], [0.0, -1.5])


async def test_ids_from_the_token_strings_of_a_server_without_token_ids() -> None:
    choice = {"logprobs": {"tokens": ["token_id:7", "token_id:9"], "token_logprobs": [-0.5, None]}, "finish_reason": "stop"}
    assert await generate(choice) == ([7, 9], [-0.5, 0.0])


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"logprobs": {"tokens": ["seven"], "token_logprobs": [-0.5]}}, "no token ids"),
        ({"logprobs": {"tokens": [7], "token_logprobs": [-0.5]}}, "no token ids"),
        ({"token_ids": [7, 8], "logprobs": {"token_logprobs": [-0.5]}}, "2 token ids but 1 logprobs"),
        ({"token_ids": [7], "logprobs": {"token_logprobs": ["x"]}}, "undecodable completion"),
    ],
)
async def test_bad_answers_are_bad_responses(choice: dict[str, Any], message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        await generate(choice)


async def test_the_request_as_sent_through_an_httpx_transport() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        sent.append(request)
        return httpx.Response(200, json={"choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-1]}, "finish_reason": "stop"}]})

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
