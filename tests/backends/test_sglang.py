"""The SGLang adapters against a recording double of SGLang's native API
(``rstar2_async.testing.FakeSGLang``; SGLang has no CPU build): request shapes, the
load report, versions, and the pause modes the adapter can and cannot drive."""

from __future__ import annotations

import anyio
import httpx
import pytest

from backends import (
    RequestRejected,
    RetryPolicy,
    SamplingParams,
    ServerUnavailable,
    SGLangAdmin,
    SGLangTokenClient,
    TokenIds,
)
from backends._errors import BadResponse
from rstar2_async.testing import FakeSGLang, serve_http

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["cumulative", "incremental", "whole"])
@pytest.mark.parametrize("kind", ["list", "TokenIds"])
async def test_generate_sends_token_ids_and_reads_ids_logprobs_and_the_servers_version(kind: str, mode: str) -> None:
    """A later turn's context (a ``TokenIds`` whose JSON was made, then extended) goes
    out as the same body as a plain list.  Streamed, chunks that hold every token so
    far (SGLang's default) read as chunks of new tokens only
    (``--incremental-streaming-output``) and as the whole answer."""
    prompt = [1, 2, 3]
    if kind == "TokenIds":
        prompt = TokenIds([1])
        assert prompt.json() == b"[1]"
        prompt.extend([2, 3])
    fake = FakeSGLang(version="3", incremental=mode == "incremental")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, fake)
        async with SGLangTokenClient(f"http://127.0.0.1:{port}/v1", model="m", stream=mode != "whole") as client:
            c = await client.generate(prompt, max_tokens=5, sampling=SamplingParams(temperature=0.5, seed=9))
            fake.version = "default"  # not one of ours: the version the request was sent to
            client.weight_version = 4
            d = await client.generate([1, 2, 3], max_tokens=2, sampling=SamplingParams())
        tg.cancel_scope.cancel()
    body = next(r.body for r in fake.log if r.path == "/generate")
    assert body == {
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 5, "temperature": 0.5, "top_p": 1.0, "skip_special_tokens": False,
                            "sampling_seed": 9},
        "return_logprob": True,
    } | ({} if mode == "whole" else {"stream": True})  # fmt: skip
    assert (c.token_ids, c.logprobs, c.finish_reason, c.weight_version) == ([7, 8, 9], [-0.5] * 3, "stop", 3)
    assert (d.token_ids, d.finish_reason, d.weight_version) == ([7, 8], "length", 4)


async def test_admin_load_version_and_pause_modes() -> None:
    fake = FakeSGLang(capacity_tokens=5000, used_tokens=1200)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, fake)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            admin = SGLangAdmin(http)
            load = await admin.load()
            await admin.set_weight_version("2")
            version = await admin.weight_version()
            await admin.pause("abort")
            await admin.pause("wait")  # no native wait: the sync drains first, then aborts what is left
            with pytest.raises(ValueError, match='SGLang: pause mode "keep" is not supported'):
                await admin.pause("keep")
            await admin.resume()
        tg.cancel_scope.cancel()
    assert (load.capacity_tokens, load.used_tokens, load.running, load.waiting) == (5000, 1200, 2, 1)
    assert version == "2" and not SGLangAdmin.native_wait
    pauses = [r.body for r in fake.log if r.path == "/pause_generation"]
    assert pauses == [{"mode": "abort"}, {"mode": "abort"}]
    assert [r.path for r in fake.log][-1] == "/continue_generation"


async def test_a_load_report_without_capacity_is_a_bad_response() -> None:
    fake = FakeSGLang()
    fake.capacity_tokens = "unknown"  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, fake)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            with pytest.raises(BadResponse, match="no max_total_num_tokens"):
                await SGLangAdmin(http).load()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(("status", "error"), [(400, RequestRejected), (503, ServerUnavailable)])
async def test_a_refused_generate_is_our_error_naming_the_route(status: int, error: type[Exception]) -> None:
    async def refuse(method: str, target: str, body: bytes) -> tuple[int, bytes]:
        return status, b'{"error": "no"}'

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, refuse)
        retry = RetryPolicy(max_retries=0)
        async with SGLangTokenClient(f"http://127.0.0.1:{port}", model="m", retry=retry) as client:
            with pytest.raises(error, match=f"/generate: HTTP {status}"):
                await client.generate([1, 2], max_tokens=2, sampling=SamplingParams())
        tg.cancel_scope.cancel()
