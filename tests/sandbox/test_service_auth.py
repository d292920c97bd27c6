"""The sandbox service behind a secret, with its batch cap (the HTTP layer's own
limits are tested in tests/httpgate)."""

from __future__ import annotations

import anyio
import httpx
import pytest

from sandbox import SandboxClient, SandboxPool, SandboxService

from ._helpers import config

pytestmark = pytest.mark.anyio
SECRET = "s3cret-for-tests"
AUTH = {"authorization": f"Bearer {SECRET}"}


async def test_service_with_a_secret_and_a_batch_cap() -> None:
    async with SandboxPool(config(workers=1)) as pool, anyio.create_task_group() as tg:
        service = SandboxService(pool, port=0, secret=SECRET, max_batch=4)
        port = await tg.start(service.serve)
        url = f"http://127.0.0.1:{port}"
        async with SandboxClient([url], api_key=SECRET) as client:
            good = await client.run("print(6 * 7)")
        async with SandboxClient([url], retries=0) as client:
            refused = await client.run("print(1)")
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            too_many = await http.post("/v1/batch", json={"calls": [{"code": "1"}] * 5})
        tg.cancel_scope.cancel()
    assert good.status == "ok" and good.stdout == "42\n"
    assert refused.status == "internal" and "401" in refused.stderr
    assert too_many.status_code == 413 and "at most 4" in too_many.json()["error"]
