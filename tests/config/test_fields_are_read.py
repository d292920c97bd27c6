"""Every config field does something.

Statically: each field of every section of ``rstar2 train`` and ``rstar2 eval`` is read
(``something.field``) by the code that consumes it, outside the config package's own
checks.  Dynamically, for the sections whose fields travel furthest before they act
(``[inference]``, ``[pool]``, ``[reward]``, ``[server]``): each set to a distinctive
value arrives in the component it configures.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import anyio
import msgspec
import msgspec.inspect as mi
import pytest

from rstar2_async.config import ConfigError, EvalConfig, TrainConfig, convert
from rstar2_async.demo import cached_tiny_model
from rstar2_async.recipe import rollout_stack
from rstar2_async.testing import FakeModelServer, serve_http

ROOT = Path(__file__).resolve().parents[2]


def structs(cls: type, seen: dict[type, str] | None = None, path: str = "") -> dict[type, str]:
    """Every struct type reachable from ``cls``, with the dotted path of one use."""
    seen = {} if seen is None else seen
    if cls in seen:
        return seen
    seen[cls] = path or cls.__name__
    for f in mi.type_info(cls).fields:  # type: ignore[union-attr]
        for t in _struct_types(f.type):
            structs(t, seen, f"{path}.{f.name}" if path else f.name)
    return seen


def _struct_types(info: mi.Type) -> list[type]:
    if isinstance(info, mi.StructType):
        return [info.cls]
    if isinstance(info, mi.UnionType):
        return [c for t in info.types for c in _struct_types(t)]
    if isinstance(info, (mi.ListType, mi.TupleType, mi.VarTupleType)):
        return _struct_types(info.item_type)  # type: ignore[union-attr]
    if isinstance(info, mi.DictType):
        return _struct_types(info.value_type)
    return []


def attributes_read(roots: list[Path]) -> set[str]:
    names: set[str] = set()
    for root in roots:
        for path in root.rglob("*.py"):
            if "config" in path.relative_to(ROOT).parts[:2]:
                continue  # the config package's own validation does not count
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
    return names


def test_every_field_of_every_section_is_read_by_its_consumer() -> None:
    core_reads = attributes_read([ROOT / "rstar2_async"])
    sandbox_reads = attributes_read([ROOT / "sandbox"])
    unread = []
    for top in (TrainConfig, EvalConfig):
        for cls, where in structs(top).items():
            reads = sandbox_reads if cls.__module__.startswith("sandbox") else core_reads
            for field in msgspec.structs.fields(cls):
                if field.name not in reads:
                    unread.append(f"{where}.{field.name} ({cls.__name__})")
    assert unread == []


class _Probe(msgspec.Struct):
    a_field_nothing_reads: int = 0


def test_the_check_finds_a_field_nothing_reads() -> None:
    reads = attributes_read([ROOT / "rstar2_async"])
    assert "max_in_flight" in reads and "a_field_nothing_reads" not in reads


DISTINCT: dict[str, Any] = {
    "inference": {
        "model": "m-distinct", "connect_timeout_s": 3.5, "read_timeout_s": 123.0, "pool_timeout_s": 7.5,
        "max_connections": 77, "max_retries": 3, "backoff_initial_s": 0.125, "backoff_max_s": 2.5,
    },
    "pool": {
        "policy": "round_robin", "stall_timeout_s": 12.5, "request_timeout_s": 321.0, "unavailable_timeout_s": 45.0, "max_failovers": 5,
        "poll_interval_s": 0.75, "headroom": 0.15, "hold_headroom": 0.03, "hold_reports": 3, "affinity_slack": 0.4,
        "affinity_queue_slack": 6, "expected_reservations": False, "expected_new_tokens": 555,
        "reserve_new_tokens": 444, "default_capacity_tokens": 99999,
    },
    "reward": {"workers": 1, "timeout_s": 6.5, "grading": "lenient"},
    "rollout": {"max_in_flight": 13, "tools": ["rstar2_async.rollout.tools:jupyter"]},
    "sandbox": {"workers": 1},
}


@pytest.mark.anyio
async def test_inference_pool_and_reward_values_arrive_where_they_act(tmp_path: Path) -> None:
    model = cached_tiny_model(Path("runs/cache"))
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, FakeModelServer())
        key_file = tmp_path / "key"
        key_file.write_text("key-distinct\n")
        inference = {**DISTINCT["inference"], "base_urls": [f"http://127.0.0.1:{port}/v1"], "api_key_file": str(key_file)}
        sections = {**DISTINCT, "inference": inference}
        config = convert(sections, EvalConfig)
        async with rollout_stack(
            rollout=config.rollout, inference=config.inference, sandbox=config.sandbox, tokenizer_dir=model,
            pool=config.pool, reward=config.reward, local_server=config.server,
        ) as stack:  # fmt: skip
            pool, grader, engine = stack.pool, stack.grader, stack.engine
            assert pool is not None
            p, i = DISTINCT["pool"], DISTINCT["inference"]
            assert (pool.model, pool.request_timeout_s, pool.unavailable_timeout_s) == (i["model"], p["request_timeout_s"], p["unavailable_timeout_s"])
            assert (pool.max_failovers, pool.poll_interval_s) == (p["max_failovers"], p["poll_interval_s"])
            assert (pool._stall_watch.stall_s, pool._stall_watch.limit_s) == (p["stall_timeout_s"], p["request_timeout_s"])
            assert (pool.expected_reservations, pool.reserve_new_tokens) == (False, p["reserve_new_tokens"])
            d = pool._dispatcher
            assert (d.policy, d.affinity_slack, d.affinity_queue_slack, d.headroom) == ("round_robin", 0.4, 6, 0.15)
            assert (d.hold_reports, d.hold_headroom, d.statistics().expected_new_tokens) == (3, 0.03, 555)
            assert d.statistics().servers[0].capacity_tokens == 99999  # no load report yet: the default
            client = pool.servers[0].client
            assert (client.retry.max_retries, client.retry.initial_s, client.retry.max_s) == (3, 0.125, 2.5)
            timeout = client._http.timeout
            assert (timeout.connect, timeout.read, timeout.pool) == (3.5, 123.0, 7.5)
            assert client._transport.max_connections == 77
            assert (b"authorization", b"Bearer key-distinct") in client._raw_headers
            assert pool.servers[0]._admin_http.headers["authorization"] == "Bearer key-distinct"
            assert (grader.statistics().max_workers, grader._timeout, grader._mode) == (1, 6.5, "lenient")
            assert engine.statistics().in_flight == 0 and engine._limiter.total_tokens == 13
            assert list(engine.toolbox.tools) == ["jupyter_code"]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_chat_mode_gets_the_timeouts_connections_and_key_too(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("chat-key")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, FakeModelServer())
        inference = {
            **DISTINCT["inference"], "base_urls": [f"http://127.0.0.1:{port}/v1"], "mode": "chat",
            "api_key_file": str(tmp_path / "key"),
        }  # fmt: skip
        config = convert({"inference": inference, "reward": {"workers": 1}, "sandbox": {"workers": 1}}, EvalConfig)
        async with rollout_stack(
            rollout=config.rollout, inference=config.inference, sandbox=config.sandbox, reward=config.reward
        ) as stack:
            sdk = stack.engine.backend._client  # type: ignore[union-attr]
            assert (sdk.max_retries, sdk.timeout.connect, sdk.timeout.read, sdk.timeout.pool) == (3, 3.5, 123.0, 7.5)
            assert sdk._client._transport.max_connections == 77
            assert sdk.api_key == "chat-key"
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("content", [None, "  \n", "no path"])
async def test_a_missing_or_empty_key_file_is_an_error_naming_the_field(
    tmp_path: Path, content: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty path too: it must not fall back to ``$api_key_env`` (set here)."""
    monkeypatch.setenv("RSTAR2_TEST_KEY", "from-env")
    key_file = "" if content == "no path" else str(tmp_path / "key")
    if content not in (None, "no path"):
        Path(key_file).write_text(content)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, FakeModelServer())
        inference = {
            "base_urls": [f"http://127.0.0.1:{port}/v1"], "mode": "chat", "api_key_file": key_file,
            "api_key_env": "RSTAR2_TEST_KEY",
        }  # fmt: skip
        config = convert({"inference": inference, "reward": {"workers": 1}, "sandbox": {"workers": 1}}, EvalConfig)
        with pytest.raises(ConfigError, match=r"inference\.api_key_file: secret file.*(No such file|is empty)"):
            async with rollout_stack(
                rollout=config.rollout, inference=config.inference, sandbox=config.sandbox, reward=config.reward
            ):
                pass
        tg.cancel_scope.cancel()
