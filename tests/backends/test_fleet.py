"""The fleet's supervision against fake engine processes (fast; no vLLM or SGLang).

The "interpreter" is a shell script that runs a small HTTP server answering the
engine's readiness endpoints and recording its command line and GPU environment.
The real vLLM fleet is covered in tests/integration/test_fleet.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tempfile
import textwrap
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from backends import LaunchError
from backends._fleet import Fleet, FleetConfig
from backends._pool import ServerPool

pytestmark = pytest.mark.anyio

FAKE = textwrap.dedent(
    """
    import http.server, json, os, sys
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    key = None
    if "--config" in args:  # SGLang's: `api-key: "..."`
        key = json.loads(open(args[args.index("--config") + 1]).read().split(":", 1)[1])
    record = os.environ["FAKE_RECORD"]
    with open(record, "a") as f:
        f.write(json.dumps({"argv": args, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "key": key}) + "\\n")
    if os.environ.get("FAKE_MODE") == "die":
        sys.exit(4)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def _denied(self):  # SGLang's --api-key: every route but /health and /metrics
            if key is None or self.path.startswith(("/health", "/metrics")) or self.headers.get("authorization") == "Bearer " + key:
                return False
            self.send_response(401)
            self.send_header("content-length", "0")
            self.end_headers()
            return True
        def do_GET(self):
            if self._denied():
                return
            if self.path == "/metrics":
                return self._send(b'vllm:cache_config_info{kv_cache_size_tokens="1000"} 1.0\\n')
            self._send({"max_total_num_tokens": 1000})
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            if self._denied():
                return
            self._send({"choices": [{"token_ids": [1], "text": "", "logprobs": {"token_logprobs": [0.0]}, "finish_reason": "stop"}]})
        def log_message(self, *a):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    (tmp_path / "fake.py").write_text(FAKE)
    python = tmp_path / "python"
    # vLLM's launcher runs `python -P _vllm_entry.py serve ...`, SGLang `python -m sglang.launch_server ...`.
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "fake.py"} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]


def config(tmp_path: Path, python: Path, **kw: object) -> FleetConfig:
    base = {
        "model": str(tmp_path / "model"),
        "python": str(python),
        "num_servers": 2,
        "log_dir": str(tmp_path / "logs"),
        "env": {"FAKE_RECORD": str(tmp_path / "record.jsonl")},
        "startup_timeout_s": 30,
    }
    return msgspec.convert({**base, **kw}, FleetConfig)


async def test_vllm_fleet_starts_k_servers_restarts_a_dead_one_on_its_address(tmp_path: Path, fake_python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backends._fleet.RESTART_BACKOFF_S", (0.05,))
    cfg = config(tmp_path, fake_python, gpu_ids=[[0, 1], [2, 3]], tensor_parallel_size=2, extra_args=["--seed", "1"])
    async with Fleet(cfg) as fleet:
        servers = fleet.servers
        assert [s.index for s in servers] == [0, 1] and len({s.url for s in servers}) == 2
        assert [s.url for s in fleet.specs()] == [s.url for s in servers]
        first = records(tmp_path)
        assert sorted(r["gpus"] for r in first) == ["0,1", "2,3"]
        argv = first[0]["argv"]
        assert argv[2:4] == ["serve", cfg.model] and "--tensor-parallel-size" in argv and argv[-2:] == ["--seed", "1"]
        fleet.set_model(str(tmp_path / "step-3"))
        os.kill(servers[1].pid, signal.SIGKILL)
        with anyio.fail_after(20):
            while fleet.statistics().restarts < 1 or fleet.statistics().up < 2:
                await anyio.sleep(0.05)
        again = fleet.servers[1]
        assert again.url == servers[1].url and again.pid != servers[1].pid and again.restarts == 1
        assert records(tmp_path)[-1]["argv"][3] == str(tmp_path / "step-3"), "restarted on the latest weights"
        async with httpx.AsyncClient() as http:
            assert (await http.get(again.url + "/health")).status_code == 200
        async with ServerPool(fleet.specs(), model="m", poll_interval_s=0.05) as pool:
            assert pool.statistics().servers_up == 2
            assert [s.capacity_tokens for s in pool.statistics().dispatch.servers] == [1000, 1000]
    pids = [r["pid"] for r in records(tmp_path)]
    with anyio.fail_after(10):
        while any(Path(f"/proc/{p}").exists() and b"Z" not in Path(f"/proc/{p}/stat").read_bytes().split(b")")[-1][:3] for p in pids):
            await anyio.sleep(0.05)


async def test_sglang_fleet_command_line(tmp_path: Path, fake_python: Path) -> None:
    cfg = config(tmp_path, fake_python, engine="sglang", num_servers=1, base_port=None, served_model_name="tiny", max_model_len=2048)
    async with Fleet(cfg) as fleet:
        argv = records(tmp_path)[0]["argv"]
        assert argv[:2] == ["-m", "sglang.launch_server"]
        port = fleet.servers[0].url.rsplit(":", 1)[1]
        assert argv[argv.index("--model-path") + 1] == cfg.model and argv[argv.index("--port") + 1] == port
        assert argv[argv.index("--tp-size") + 1] == "1" and argv[argv.index("--context-length") + 1] == "2048"
        assert argv[argv.index("--served-model-name") + 1] == "tiny"
        assert fleet.specs()[0].engine == "sglang"


async def test_first_start_failure_is_a_launch_error(tmp_path: Path, fake_python: Path) -> None:
    cfg = config(tmp_path, fake_python, env={"FAKE_RECORD": str(tmp_path / "record.jsonl"), "FAKE_MODE": "die"})
    with pytest.raises(LaunchError, match=r"\d server.s. failed to start; first: .*exited with status 4"):
        async with Fleet(cfg):
            pytest.fail("must not start")


async def test_with_a_secret_engines_bind_loopback_behind_a_proxy_that_asks_for_it(tmp_path: Path, fake_python: Path) -> None:
    cfg = config(tmp_path, fake_python, num_servers=1, host="0.0.0.0")
    async with Fleet(cfg, api_key="k3y") as fleet:
        argv = records(tmp_path)[0]["argv"]
        public = fleet.specs()[0].url
        engine_port = argv[argv.index("--port") + 1]
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and engine_port != public.rsplit(":", 1)[1]
        local = public.replace("0.0.0.0", "127.0.0.1")
        async with httpx.AsyncClient(base_url=local) as http:
            bare = [(await http.request(m, p)).status_code for m, p in (("GET", "/metrics"), ("POST", "/pause"), ("POST", "/collective_rpc"), ("POST", "/v1/completions"))]
            keyed = await http.get("/metrics", headers={"authorization": "Bearer k3y"})
        async with ServerPool([local], model="m", poll_interval_s=0.05, api_key="k3y") as pool:
            assert pool.statistics().servers_up == 1
            assert [s.capacity_tokens for s in pool.statistics().dispatch.servers] == [1000]
    assert bare == [401] * 4 and keyed.status_code == 200 and b"kv_cache_size_tokens" in keyed.content


async def test_sglang_behind_the_proxy_asks_for_the_secret_on_its_own_port(tmp_path: Path, fake_python: Path) -> None:
    cfg = config(tmp_path, fake_python, engine="sglang", num_servers=1, host="0.0.0.0")
    async with Fleet(cfg, api_key="s3cret") as fleet:
        (started,) = records(tmp_path)
        argv = started["argv"]
        assert started["key"] == "s3cret" and "s3cret" not in " ".join(argv), "the key is given in a file, not in argv"
        assert not Path(argv[argv.index("--config") + 1]).exists(), "the key file is gone once the server is ready"
        engine = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        async with httpx.AsyncClient(base_url=engine) as http:
            bare = [(await http.request(m, p)).status_code for m, p in (("GET", "/get_server_info"), ("POST", "/generate"))]
            keyed = await http.get("/get_server_info", headers={"authorization": "Bearer s3cret"})
        public = fleet.specs()[0].url.replace("0.0.0.0", "127.0.0.1")
        async with ServerPool([public], model="m", poll_interval_s=0.05, api_key="s3cret") as pool:
            assert pool.statistics().servers_up == 1  # through the proxy, which forwards the key to the engine
    assert bare == [401, 401] and keyed.status_code == 200
    # SGLang writes its arguments, the key among them, into its log: no one else reads it
    assert (tmp_path / "logs" / "server-0.log").stat().st_mode & 0o077 == 0


def test_no_two_servers_or_proxies_are_given_one_port(tmp_path: Path, fake_python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each choice is free when made, but none is held until its server binds it
    choices = iter([20001, 20001, 20002, 20001, 20003, 20002, 20004])
    monkeypatch.setattr("backends._fleet.free_port", lambda _host: next(choices))
    fleet = Fleet(config(tmp_path, fake_python, num_servers=2), api_key="k3y")
    public = [int(s.url.rsplit(":", 1)[1]) for s in fleet.specs()]
    assert public == [20001, 20002] and fleet._engine_ports == [20003, 20004]


def test_a_fleet_off_loopback_needs_a_secret_or_insecure(tmp_path: Path, fake_python: Path) -> None:
    cfg = config(tmp_path, fake_python, host="0.0.0.0")
    with pytest.raises(ValueError, match="without a secret"):
        Fleet(cfg)
    Fleet(cfg, insecure=True)


def test_config_validation_names_the_fields() -> None:
    with pytest.raises(ValueError, match="fleet.gpu_ids"):
        FleetConfig(model="m", num_servers=2, gpu_ids=[[0]])
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        FleetConfig(model="m", num_servers=1, gpu_ids=[[0]], tensor_parallel_size=2)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"model": "m", "gpus": 3}, FleetConfig)


@pytest.mark.parametrize("arg", ["--config", "--api-key=theirs"])
def test_sglang_extra_args_cannot_replace_the_key_file(tmp_path: Path, fake_python: Path, arg: str) -> None:
    """SGLang's last ``--config`` wins: the user's would leave the engine without the secret."""
    cfg = config(tmp_path, fake_python, engine="sglang", extra_args=[arg, "mine.yaml"])
    with pytest.raises(ValueError, match=r"fleet\.extra_args: --(config|api-key) would replace") as caught:
        Fleet(cfg, api_key="s3cret")
    assert "theirs" not in str(caught.value)  # the option, never its value (a key, maybe)
    Fleet(cfg)  # without a secret the user's --config is theirs to give


async def test_the_sglang_key_file_is_removed_when_writing_it_fails(
    tmp_path: Path, fake_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the key is written: the file (the key's first bytes, maybe) goes too."""
    keys = tmp_path / "keys"
    keys.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(keys))

    class FakeFullDisk:
        def __init__(self, fd: int, mode: str) -> None:
            self._fd = fd

        def __enter__(self) -> FakeFullDisk:  # noqa: PYI034 - a local class
            return self

        def __exit__(self, *exc: object) -> None:
            os.close(self._fd)

        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", FakeFullDisk)
    cfg = config(tmp_path, fake_python, engine="sglang", num_servers=1)
    with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="No space left"), flatten_subgroups=True):
        async with Fleet(cfg, api_key="s3cret"):
            pass
    assert list(keys.iterdir()) == []
