"""TokenIds: a trajectory's growing ids with their JSON, and the request the token client makes of them."""

from __future__ import annotations

import random

import httpx
import msgspec
import pytest

from backends import RetryPolicy, SamplingParams, TokenClient, TokenIds

pytestmark = pytest.mark.anyio


def test_the_json_follows_every_extend() -> None:
    rng = random.Random(0)
    ids = TokenIds()
    expected: list[int] = []
    assert ids.json() == b"[]" and len(ids) == 0
    for n in (0, 1, 0, 3, 240, 0, 17):  # empty extends leave it as it was
        new = [rng.randrange(151_936) for _ in range(n)]
        ids.extend(new)
        expected += new
        assert ids.json() == msgspec.json.encode(expected)
        assert ids == expected


def test_a_list_extended_by_any_iterable_whose_other_changes_are_refused() -> None:
    source = [1, 2, 3]
    ids = TokenIds(source)
    ids.extend((4, 5))
    ids += iter([6])
    assert ids.json() == b"[1,2,3,4,5,6]" and source == [1, 2, 3]  # its own list
    assert isinstance(ids, list) and ids == [1, 2, 3, 4, 5, 6] and msgspec.json.encode(ids) == ids.json()
    assert type(ids + [7]) is list and type(ids[1:]) is list and type(ids.copy()) is list
    changes = [
        lambda: ids.append(7), lambda: ids.insert(0, 7), lambda: ids.pop(), lambda: ids.remove(1), ids.clear,
        ids.sort, ids.reverse, lambda: ids.__setitem__(0, 7), lambda: ids.__delitem__(0), lambda: ids.__imul__(2),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="only grows"):
            change()
    assert ids == [1, 2, 3, 4, 5, 6] and ids.json() == b"[1,2,3,4,5,6]"


def test_the_json_handed_out_is_a_copy_that_outlives_an_extend() -> None:
    ids = TokenIds([1])
    sent = msgspec.Raw(ids.json())  # as a request holds it
    ids.extend([2])  # a bytearray lent out could not grow
    assert bytes(sent) == b"[1]" and ids.json() == b"[1,2]"


async def test_the_token_client_sends_the_same_body_for_token_ids_as_for_a_list() -> None:
    sent: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        sent.append(request.content)
        chunk = {"choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-1]}, "finish_reason": "stop"}]}
        return httpx.Response(200, content=b"data: " + msgspec.json.encode(chunk) + b"\n\ndata: [DONE]\n\n")

    prompt = [random.Random(1).randrange(151_936) for _ in range(3000)]
    transport = httpx.MockTransport(handler)
    async with TokenClient("http://h/v1", model="m", transport=transport, retry=RetryPolicy(max_retries=0)) as client:
        for ids in (prompt, TokenIds(prompt)):
            await client.generate(ids, max_tokens=4, sampling=SamplingParams(temperature=0.5, seed=3))
    as_list, as_token_ids = (msgspec.json.decode(body) for body in sent)
    assert as_token_ids == as_list and as_list["prompt"] == prompt
