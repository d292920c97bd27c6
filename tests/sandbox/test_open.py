"""``open_sandbox`` over remote services (``[sandbox] urls``, ``api_key_file``): two
real services on loopback, one of them a ``rstar2 sandbox serve`` process SIGKILLed
while it runs a batch; the secret read from its file; the faults named at start."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from sandbox import SandboxClient, SandboxConfig, ServiceError, ServiceUnavailable, open_sandbox

from ._helpers import live_service

pytestmark = pytest.mark.anyio
SECRET = "open-sandbox-secret"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # real pools and a served process per test; the client's own tests cover trio


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "sandbox.key"
    path.write_text(SECRET + "\n")
    return path


@asynccontextmanager
async def served_process(tmp_path: Path, key_file: Path) -> AsyncIterator[tuple[anyio.abc.Process, str]]:
    """``rstar2 sandbox serve`` with one worker, in its own process; yields it and its URL."""
    (tmp_path / "serve.toml").write_text('[sandbox]\nworkers = 1\nspares = 0\nwarmup = ""\n')
    command = [
        sys.executable, "-c", "import sys; from rstar2_async.cli.main import main; sys.exit(main(sys.argv[1:]))",
        "sandbox", "serve", "--port", "0", "--config", str(tmp_path / "serve.toml"), "--secret-file", str(key_file),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with await anyio.open_process(command, env=env) as process:
        try:
            assert process.stderr is not None
            text = ""
            with anyio.fail_after(120):
                async for chunk in process.stderr:
                    text += chunk.decode()
                    if found := re.search(r"serving on (http://127\.0\.0\.1:\d+)", text):
                        break
            assert found, text
            yield process, found.group(1)
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


async def test_calls_spread_over_the_services_and_fail_over_when_one_is_killed(tmp_path: Path, key_file: Path) -> None:
    async with served_process(tmp_path, key_file) as (process, far), live_service(SECRET, workers=1) as near:
        settings = SandboxConfig(urls=[far, near.url], api_key_file=str(key_file))
        async with open_sandbox(settings) as client, httpx.AsyncClient(headers={"authorization": f"Bearer {SECRET}"}) as http:
            assert isinstance(client, SandboxClient)
            spread = [await client.run(f"print({i})") for i in range(2)]  # one batch each: one to each service
            assert near.pool.statistics().calls == 1
            async with anyio.create_task_group() as tg:
                results: dict[int, str] = {}

                async def call(i: int) -> None:
                    results[i] = (await client.run(f"import time; time.sleep(0.2); print({i})")).stdout

                for i in range(4):  # one batch, to the process's service (the next in turn)
                    tg.start_soon(call, i)

                async def busy() -> bool:
                    metrics = (await http.get(f"{far}/metrics")).text
                    return "sandbox_workers_busy 1" in metrics

                with anyio.fail_after(60):
                    while not await busy():
                        await anyio.sleep(0.01)
                process.send_signal(signal.SIGKILL)  # mid-batch
            stats = client.statistics()
    assert [r.stdout for r in spread] == ["0\n", "1\n"]
    assert results == {i: f"{i}\n" for i in range(4)}  # the batch ran again on the other service
    assert stats.retries >= 1 and stats.by_status == {"ok": 6} and far in stats.addresses_down
    assert process.returncode == -signal.SIGKILL


async def test_the_secret_file_and_the_services_are_checked_before_any_call(tmp_path: Path, key_file: Path) -> None:
    with pytest.raises(ValueError, match=r"^sandbox\.api_key_file: secret file .*missing\.key: No such file"):
        open_sandbox(SandboxConfig(urls=["http://127.0.0.1:1"], api_key_file=str(tmp_path / "missing.key")))
    (tmp_path / "wrong.key").write_text("not-the-secret")
    async with live_service(SECRET, workers=1) as live:
        with pytest.raises(ServiceError, match=r"refused the secret \(401\)"):
            async with open_sandbox(SandboxConfig(urls=[live.url], api_key_file=str(tmp_path / "wrong.key"))):
                pass
        await live.kill()
        with pytest.raises(ServiceUnavailable, match=rf"no sandbox service answers: {re.escape(live.url)}: ConnectError"):
            async with open_sandbox(SandboxConfig(urls=[live.url], api_key_file=str(key_file))):
                pass
