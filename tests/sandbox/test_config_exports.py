"""SandboxConfig bounds and messages, the export list, the seccomp filter, the CLI surface."""

from __future__ import annotations

import os

import anyio
import msgspec
import pytest

import sandbox
from sandbox import SandboxConfig, _seccomp
from sandbox._queue import FifoQueue, QueueFull


def test_bounds_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"^sandbox.workers: expected int >= 1, got 0$"):
        SandboxConfig(workers=0)
    with pytest.raises(ValueError, match=r"sandbox.max_timeout_s: expected float > 0, got 0.0"):
        SandboxConfig(max_timeout_s=0.0)
    with pytest.raises(msgspec.ValidationError, match="sandbox.memory_mb: expected int >= 256, got 10"):
        SandboxConfig.from_dict({"memory_mb": 10})
    with pytest.raises(msgspec.ValidationError, match="unknown field `wrokers`"):
        SandboxConfig.from_dict({"wrokers": 2})


def test_defaults_and_toml_round_trip() -> None:
    cfg = SandboxConfig.from_dict({"workers": 3, "preload": ["math"]})
    assert cfg.resolved_workers == 3 and cfg.insecure is False
    assert SandboxConfig().resolved_workers == 2 * len(os.sched_getaffinity(0))
    assert msgspec.convert(msgspec.to_builtins(cfg), SandboxConfig) == cfg


def test_every_config_field_has_a_docstring() -> None:
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sandbox._config))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SandboxConfig")
    body = cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):
            nxt = body[i + 1]
            assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), node.target.id


def test_exports() -> None:
    assert sorted(sandbox.__all__) == sorted([
        "ClientState", "ClientStatistics", "ExecResult", "HostSupport", "PoolState", "PoolStatistics",
        "Sandbox", "SandboxBroken", "SandboxClient", "SandboxClosed", "SandboxConfig", "SandboxError",
        "SandboxPool", "SandboxService", "SandboxUnavailable", "ServiceError", "ServiceUnavailable",
        "Status", "SECRET_ENV", "benchmark", "check_host", "open_sandbox", "pool_processes", "worker_pids",
    ])
    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None
    assert isinstance(sandbox.SandboxPool(), sandbox.Sandbox)
    assert isinstance(sandbox.SandboxClient(["http://x"]), sandbox.Sandbox)


def test_sandbox_never_imports_the_core() -> None:
    import pathlib

    for path in pathlib.Path(sandbox.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "rstar2_async" not in text and "import backends" not in text, path


def test_seccomp_filter_filled_in_per_pid_is_the_one_assembled_for_it() -> None:
    for pid in (1, 2, 7, 4096, 4194304):
        assert _seccomp.build(pid) == _seccomp._assemble(pid)
    assert _seccomp.build(7) != _seccomp.build(8)


def test_seccomp_prepare_on_a_machine_without_a_syscall_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import ``_child``, which prepares the filter, whether or not the pool
    uses it: on an architecture the filter does not know, that must not fail."""
    monkeypatch.setattr(_seccomp.platform, "machine", lambda: "riscv64")
    _seccomp._assembled.cache_clear()
    try:
        assert _seccomp.supported() is not None
        _seccomp.prepare()
    finally:
        _seccomp._assembled.cache_clear()


def test_seccomp_filter_denies_in_a_forked_child() -> None:
    assert _seccomp.supported() is None
    assert len(_seccomp.build(7)) % 8 == 0
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.setpgid(0, 0)
            _seccomp.install(os.getpid())
            import socket

            try:
                socket.socket()
            except PermissionError:
                try:
                    os.fork()
                except PermissionError:
                    os.kill(os.getpid(), 0)  # allowed: itself
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_queue_is_fifo_and_bounded() -> None:
    q: FifoQueue[int] = FifoQueue(3)
    for i in range(3):
        q.put_nowait(i)
    with pytest.raises(QueueFull):
        q.put_nowait(3)
    assert q.discard(1) and not q.discard(1)
    assert q.get_nowait() == 0
    q.put_nowait(0)
    assert q.drain() == [2, 0] and len(q) == 0
    with pytest.raises(anyio.WouldBlock):
        q.get_nowait()


def test_cli_rejects_bad_config(tmp_path, capsys) -> None:
    from rstar2_async.cli.main import main

    bad = tmp_path / "run.toml"
    bad.write_text("[sandbox]\nworkers = 0\n")
    assert main(["sandbox", "serve", "--config", str(bad)]) == 2
    assert "sandbox.workers: expected int >= 1, got 0" in capsys.readouterr().err
    empty = tmp_path / "key"
    empty.write_text("\n")
    assert main(["sandbox", "serve", "--host", "0.0.0.0", "--secret-file", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().err
