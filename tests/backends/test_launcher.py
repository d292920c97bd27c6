"""The vLLM launcher's process handling, against fake servers (fast; no vLLM needed).

The real server is covered in tests/integration/test_vllm_server.py. Here the
"interpreter" is a shell script that runs a small Python HTTP server (or just
fails), so start-up, readiness, death and tree shutdown are checked in seconds.
"""

from __future__ import annotations

import os
import random
import socket
import stat
import sys
import tempfile
import textwrap
from pathlib import Path

import anyio
import msgspec
import pytest
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from backends import (
    VLLM_WORKER_EXTENSION,
    LaunchError,
    ServerDied,
    VLLMServer,
    VLLMServerConfig,
    launch_vllm,
    serve_vllm,
)
from backends._process import descendants, free_port

pytestmark = pytest.mark.anyio

FAKE_SERVER = textwrap.dedent(
    """
    # A stand-in for `vllm serve`: answers /health and /v1/completions, and
    # starts a child that ignores SIGTERM (like a stuck engine process) plus a
    # grandchild, so that stopping must escalate to SIGKILL for the whole tree.
    import http.server, json, os, signal, subprocess, sys, tempfile
    port = int(sys.argv[sys.argv.index("--port") + 1])
    mode = os.environ.get("FAKE_MODE", "ok")
    print("fake vllm starting on", port, "mode", mode, flush=True)
    open(os.path.join(os.environ["VLLM_RPC_BASE_PATH"], "fake-ipc-socket"), "w").close()  # where vLLM's ZMQ sockets go
    tempfile.NamedTemporaryFile(prefix="vllm_dist_", delete=False).close()  # a file vLLM never removes
    if mode == "die":
        print("ValueError: the fake engine refuses to start", flush=True)
        sys.exit(3)
    stubborn = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \\
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); " \\
        "print('spawned', flush=True); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE)
    child.stdout.readline()  # the whole tree exists before we answer /health

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._send(200 if mode != "never-healthy" else 503, {})
        def do_POST(self):
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length))
            if self.path == "/exit":
                self._send(200, {})
                os._exit(7)
            code = 500 if mode == "bad-warmup" else 200
            self._send(code, {"choices": [{"token_ids": [1], "model": body["model"]}]})
        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_config(tmp_path: Path) -> VLLMServerConfig:
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {server} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return VLLMServerConfig(
        model=str(tmp_path / "model"),
        python=str(python),
        log_path=str(tmp_path / "logs" / "server.log"),
        startup_timeout_s=30,
        stop_grace_s=0.5,
    )


def server_environment(pid: int) -> dict[str, str]:
    return dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)


def rpc_base_path(pid: int) -> str:
    """The directory a running server was told to put vLLM's ZMQ sockets (and its temporary files) in."""
    return server_environment(pid)["VLLM_RPC_BASE_PATH"]


def _alive(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] != b"Z"


async def _gone(pids: list[int]) -> bool:
    with anyio.move_on_after(10):  # init reaps orphans a moment after they die
        while any(_alive(p) for p in pids):
            await anyio.sleep(0.02)
    return not any(_alive(p) for p in pids)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        VLLMServerConfig(model="m", max_model_len=4)
    with pytest.raises(ValueError, match="port"):
        VLLMServerConfig(model="m", port=70000)
    with pytest.raises(ValueError, match="kv_cache_gib"):
        VLLMServerConfig(model="m", kv_cache_gib=0)
    with pytest.raises(ValueError, match="startup_timeout_s"):
        VLLMServerConfig(model="m", startup_timeout_s=0)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"model": "m", "gpus": 2}, VLLMServerConfig)


async def test_missing_interpreter_is_a_launch_error(tmp_path: Path) -> None:
    config = VLLMServerConfig(model="m", python=str(tmp_path / "nope" / "python"))
    with pytest.raises(LaunchError, match="make vllm"):
        async with launch_vllm(config):
            pass


async def test_interpreter_that_cannot_run_is_a_launch_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(LaunchError, match="could not run"):
        async with launch_vllm(VLLMServerConfig(model="m", python=str(not_executable))):
            pass
    assert not any((tmp_path / "tmp").iterdir()), "no empty log, no scratch directory left"


async def test_ready_server_then_exit_stops_the_whole_tree(fake_config: VLLMServerConfig) -> None:
    async with launch_vllm(fake_config) as server:
        assert isinstance(server, VLLMServer)
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        assert server.model == fake_config.model
        tree = [server.pid, *descendants(server.pid)]
        assert len(tree) >= 3, tree  # the fake server, its stubborn child and grandchild
        scratch = Path(rpc_base_path(server.pid))
        assert (scratch / "fake-ipc-socket").exists() and scratch.parent == Path(tempfile.gettempdir())
        assert [p.name.startswith("vllm_dist_") for p in scratch.iterdir()].count(True) == 1, "its temporary files"
        env = server_environment(server.pid)
        assert env["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir(), "torch.compile's cache is shared by starts"
    assert await _gone(tree)
    assert "fake vllm starting" in Path(server.log_path).read_text()
    assert not scratch.exists()  # the server's sockets and temporary files go with it


async def test_cancellation_stops_the_whole_tree(fake_config: VLLMServerConfig) -> None:
    async with anyio.create_task_group() as tg:
        server: VLLMServer = await tg.start(serve_vllm, fake_config)
        tree = [server.pid, *descendants(server.pid)]
        tg.cancel_scope.cancel()
    assert await _gone(tree)


async def test_death_after_start_raises_server_died(fake_config: VLLMServerConfig) -> None:
    import httpx

    with pytest.RaisesGroup(pytest.RaisesExc(ServerDied, match="status 7")):
        async with anyio.create_task_group() as tg:
            server: VLLMServer = await tg.start(serve_vllm, fake_config)
            tree = [server.pid, *descendants(server.pid)]
            async with httpx.AsyncClient(base_url=server.base_url) as http:
                await http.post("/exit", json={})
            await anyio.sleep_forever()
    assert await _gone(tree)  # the orphaned children too


async def test_death_at_start_up_raises_with_log_tail(fake_config: VLLMServerConfig) -> None:
    config = msgspec.structs.replace(fake_config, env={"FAKE_MODE": "die"})
    with pytest.raises(LaunchError) as info:
        async with launch_vllm(config):
            pytest.fail("must not start")
    message = str(info.value)
    assert "exited with status 3 while starting" in message
    assert "the fake engine refuses to start" in message
    assert config.log_path in message


async def test_start_up_budget_runs_out(fake_config: VLLMServerConfig) -> None:
    config = msgspec.structs.replace(fake_config, env={"FAKE_MODE": "never-healthy"}, startup_timeout_s=1.0)
    with pytest.raises(LaunchError, match="not ready within 1 s"):
        async with launch_vllm(config):
            pytest.fail("must not start")
    # Nothing of the fake server's tree is left (its command line names the log dir's parent).
    needle = str(Path(fake_config.python).parent).encode()
    pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and _mentions(e.path, needle)]
    assert await _gone(pids)


async def test_failed_warm_up_is_a_launch_error(fake_config: VLLMServerConfig) -> None:
    config = msgspec.structs.replace(fake_config, env={"FAKE_MODE": "bad-warmup"})
    with pytest.raises(LaunchError, match="warm-up request answered 500"):
        async with launch_vllm(config):
            pytest.fail("must not start")


def _mentions(proc_dir: str, needle: bytes) -> bool:
    try:
        return needle in Path(proc_dir, "cmdline").read_bytes()
    except OSError:
        return False


async def test_environment_enables_dev_mode_and_puts_only_the_worker_extension_on_the_path(
    fake_config: VLLMServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backends._launcher import _environment

    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    # A learner under torchrun (or init_distributed) has these; vLLM's workers must not see them.
    for name, value in {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    env = _environment(msgspec.structs.replace(fake_config, env={"HF_HUB_OFFLINE": "0"}), "/tmp/vllm-1-tmp-x")
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["TMPDIR"] == env["VLLM_RPC_BASE_PATH"] == "/tmp/vllm-1-tmp-x"
    assert env["HF_HUB_OFFLINE"] == "0"  # config.env wins over our defaults
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT"} & env.keys()
    # Ours is dropped; the extension's directory holds its one module (vLLM imports it by name).
    extension = Path(env["PYTHONPATH"])
    assert [p.name for p in extension.glob("*.py")] == ["rstar2_vllm_ext.py"]
    assert VLLM_WORKER_EXTENSION.split(".")[0] == "rstar2_vllm_ext"


async def test_entry_point_dies_with_its_launcher_even_on_sigkill(tmp_path: Path) -> None:
    """`_vllm_entry.py` watches its parent: SIGKILL of the launching process
    (which cannot clean up) still stops the server and removes the directory of its
    sockets. A stub `vllm` package stands in for the real one."""
    import signal
    import subprocess

    from backends._launcher import _ENTRY

    cli = tmp_path / "stub" / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    rpc_dir = tmp_path / "rpc"
    rpc_dir.mkdir()
    (rpc_dir / "socket").touch()
    for d in (cli, cli.parent, cli.parent.parent):
        (d / "__init__.py").write_text("")
    (cli / "main.py").write_text("import sys, time\ndef main():\n    print('serving', flush=True)\n    time.sleep(600)\n")
    launcher = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        env = dict(os.environ, PYTHONPATH={str(tmp_path / "stub")!r}, RSTAR2_LAUNCHER_PID=str(os.getpid()),
                   RSTAR2_SCRATCH_DIR={str(rpc_dir)!r})
        child = subprocess.Popen([sys.executable, "-P", {str(_ENTRY)!r}, "serve"], env=env, stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"serving\\n"
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        server_pid = int(await anyio.to_thread.run_sync(parent.stdout.readline))
        assert _alive(server_pid)
        parent.send_signal(signal.SIGKILL)
        assert await _gone([server_pid])
        assert not rpc_dir.exists()
    finally:
        parent.kill()
        parent.wait()


def test_a_free_port_is_below_the_ephemeral_range_outgoing_connections_take() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port("127.0.0.1") for _ in range(20)}
    assert all(10000 <= p < low for p in ports) and len(ports) > 1  # random, not one port for all
    state = random.getstate()
    try:  # seeded as training seeds it, two processes still choose apart
        random.seed(0)
        first = [free_port("127.0.0.1") for _ in range(3)]
        random.seed(0)
        assert [free_port("127.0.0.1") for _ in range(3)] != first
    finally:
        random.setstate(state)


def test_a_free_port_skips_one_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port("127.0.0.1")))
        held.listen()
        taken, other = held.getsockname()[1], free_port("127.0.0.1")
        monkeypatch.setattr("backends._process._RANDOM.sample", lambda *_: [taken, other])
        assert free_port("127.0.0.1") == other
