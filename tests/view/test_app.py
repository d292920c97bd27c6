"""The server of `rstar2 view` on asyncio and trio: assets, the API, errors, shutdown."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from rstar2_async.view import serve, write_sample_run

pytestmark = pytest.mark.anyio


async def test_the_page_and_its_api_are_served_read_only_and_the_server_stops_when_cancelled(tmp_path: Path) -> None:
    write_sample_run(tmp_path, steps=2, problems=2, samples=4, keep=2)
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve, tmp_path, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=url) as client:
            page = await client.get("/")
            assert page.status_code == 200 and "/assets/app.js" in page.text and "http" not in page.text.replace("http-equiv", "")
            for name in ("app.js", "charts.js", "app.css"):
                assert (await client.get(f"/assets/{name}")).status_code == 200
            assert (await client.get("/assets/../_app.py")).status_code == 404
            run = (await client.get("/api/run")).json()
            assert run["steps"] == [1, 2] and run["trajectories"] == 16 and run["sources"][0] == "train"
            table = (await client.get("/api/table", params={"step": "2", "sort": "reward", "desc": "1", "size": "3"})).json()
            assert table["total"] == 8 and [r["step"] for r in table["rows"]] == [2, 2, 2]
            record = (await client.get("/api/trajectory", params={"i": str(table["rows"][0]["i"])})).json()
            assert record["step"] == 2 and record["turns"]
            bad = await client.get("/api/table", params={"size": "many"})
            assert bad.status_code == 400 and "size" in bad.json()["error"]
            assert (await client.get("/api/trajectory", params={"i": "9999"})).status_code == 400
            assert (await client.post("/api/run")).status_code == 405
            metrics = (await client.get("/api/metrics", params={"since": "1"})).json()
            assert metrics["total"] == 3 and len(metrics["records"]) == 2  # 2 steps + 1 evaluation
        tg.cancel_scope.cancel()
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before  # nothing written
    with pytest.raises(OSError):  # stopped: nothing listens any more
        await anyio.connect_tcp("127.0.0.1", int(url.rsplit(":", 1)[1].strip("/")))
