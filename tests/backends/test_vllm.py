"""The vLLM admin adapter against the recording vLLM double (asyncio and trio)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from backends._errors import BadResponse
from backends._vllm import VLLMAdmin, parse_vllm_weight_version, vllm_weight_version
from rstar2_async.testing import FakeVLLM, serve_http

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def admin(fake: FakeVLLM) -> AsyncIterator[VLLMAdmin]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, fake)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
            yield VLLMAdmin(http)
        tg.cancel_scope.cancel()


async def test_weight_versions_are_our_ints_as_vllm_strings() -> None:
    fake = FakeVLLM()
    async with admin(fake) as a:
        assert await a.weight_version() == "default"  # vLLM's own, before any update
        await a.set_weight_version(7)
        assert fake.version == "7"  # vLLM keeps a string
        assert await a.weight_version() == "7"
        await a.set_weight_version("8")  # the weight sync's str(version) is the same int
        await a.finish_weight_update(9)
        assert [r.body for r in fake.log if r.path != "/weight_info"] == [
            {"new_version": "7"}, {"new_version": "8"}, {"weight_version": "9"}
        ]
        for bad in (-1, True, "v2", "1.5", 2.0):
            with pytest.raises(ValueError, match="non-negative int"):
                await a.set_weight_version(bad)  # type: ignore[arg-type]
        assert fake.version == "9"  # nothing was sent
        fake.version = "step-12"  # set by someone else: not one of ours
        assert await a.weight_version() == "default"
        fake.version = None  # type: ignore[assignment]  # an API that changed shape
        with pytest.raises(BadResponse, match="expected a string"):
            await a.weight_version()


def test_weight_version_conversions() -> None:
    assert vllm_weight_version(0) == "0" and vllm_weight_version("12") == "12"
    assert parse_vllm_weight_version("12") == 12
    assert parse_vllm_weight_version("default") is None and parse_vllm_weight_version("") is None
    assert parse_vllm_weight_version("１２") is None  # non-ASCII digits are not ours
    with pytest.raises(BadResponse):
        parse_vllm_weight_version(12)


@pytest.mark.parametrize(("served", "expected"), [(5, 5), ("7", 7), ("default", 0), (None, 0)])
async def test_completion_weight_version_as_int_or_vllm_string(served: object, expected: int) -> None:
    # A server that stamps completions with a string version must not read as broken.
    from backends import RetryPolicy, SamplingParams, TokenClient
    from rstar2_async.testing import FakeByteTokenizer, FakeModelServer

    prompt = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])
    server = FakeModelServer(weight_version=served)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, server)
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m", retry=RetryPolicy(max_retries=0)) as client:
            c = await client.generate(prompt, max_tokens=300, sampling=SamplingParams())
        tg.cancel_scope.cancel()
    assert c.weight_version == expected
