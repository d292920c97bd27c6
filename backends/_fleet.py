"""A fleet: K inference servers of one engine, started together, watched, restarted.

``async with Fleet(config) as fleet`` starts every server concurrently and enters
once all are ready (health checked, warmed up).  A supervisor task per server
watches its process; when it dies, the server is started again on the *same*
address (so a :class:`backends.ServerPool` polling it picks it up again), with the
model set by :meth:`Fleet.set_model` (a weight sync's latest directory) and a
backoff between attempts.  Leaving the block stops every process tree (SIGTERM,
grace, SIGKILL; shielded).

vLLM servers run through :func:`backends.serve_vllm`; SGLang servers through
:func:`serve_sglang` here (``python -m sglang.launch_server``; GPU only).  GPUs
are given per server as ``CUDA_VISIBLE_DEVICES``.

With a secret (``Fleet(config, api_key=...)``), each engine binds to loopback on
a port of its own and :func:`backends.serve_proxy` answers on the fleet's
address, asking for the secret on every route (vLLM's dev-mode routes
included); without one, the engines bind the fleet's address themselves, which
is refused off loopback unless ``insecure``.  Behind the proxy the engines ask for
the secret too, so other users of the node do not get in through the loopback
port: vLLM on ``/v1`` (``VLLM_API_KEY``), SGLang on every route but ``/health``
and ``/metrics`` (``--api-key``, in a private ``--config`` file that is removed
once the server is ready).

Not covered: several nodes (run one fleet per node), and a port another process
takes while its server is down (the restart fails with `LaunchError` and is
retried until ``max_restarts``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Annotated, Final, Literal, Self, final

import anyio
import httpx
import msgspec
from anyio.abc import TaskStatus

from httpgate import check_bind, transport_for

from ._errors import LaunchError, ServerDied
from ._launcher import VLLMServerConfig, serve_vllm
from ._pool import ServerSpec
from ._process import engine_environment, free_port, launch_failure, stop_tree
from ._proxy import serve_proxy
from ._sglang import sglang_command

__all__ = ["Fleet", "FleetConfig", "FleetServer", "FleetStatistics", "serve_sglang"]

RESTART_BACKOFF_S: Final = (1.0, 5.0, 15.0, 30.0)
"""Waits before restart attempts 1, 2, 3, 4+: a crash loop (bad weights, port
taken) must not spin, and the first restart should be quick."""


class FleetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to run K servers of one engine (the ``[fleet]`` table of ``rstar2 serve``)."""

    model: str
    """Model directory (Hugging Face layout, safetensors)."""
    engine: Literal["vllm", "sglang"] = "vllm"
    num_servers: Annotated[int, msgspec.Meta(ge=1)] = 1
    """K: servers to run."""
    host: str = "127.0.0.1"
    """Address the servers bind to."""
    base_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    """Server ``i`` listens on ``base_port + i``; ``None``: free ports chosen at start
    (each kept across restarts)."""
    gpu_ids: list[list[int]] = []
    """GPUs of each server (``CUDA_VISIBLE_DEVICES``); empty: not set (CPU, or all)."""
    tensor_parallel_size: Annotated[int, msgspec.Meta(ge=1)] = 1
    """GPUs per server for tensor parallelism."""
    served_model_name: str | None = None
    """Name sent as ``"model"`` in requests; default: the model path."""
    max_model_len: Annotated[int, msgspec.Meta(ge=16)] = 4096
    """Longest prompt + completion in tokens."""
    kv_cache_gib: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """vLLM CPU KV-cache size (GiB); GPU builds size their cache themselves."""
    python: str | None = None
    """Interpreter with the engine installed; default: ``.venv-vllm`` for vLLM,
    ``python3`` for SGLang."""
    extra_args: list[str] = []
    """Further engine arguments, verbatim."""
    env: dict[str, str] = {}
    """Environment overrides for every server."""
    log_dir: str | None = None
    """Where server logs go (``server-<i>.log``); default: a new temp dir."""
    restart: bool = True
    """Restart a server that dies."""
    max_restarts: Annotated[int, msgspec.Meta(ge=0)] = 10
    """Restarts per server before the fleet gives up (and raises)."""
    startup_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """Budget of one start, warm-up included."""
    api_key_env: str = "RSTAR2_API_KEY"
    """``rstar2 serve``: environment variable holding the servers' shared secret
    (never the secret itself in a config file)."""
    api_key_file: str | None = None
    """``rstar2 serve``: file holding the shared secret; wins over ``api_key_env``."""

    def __post_init__(self) -> None:
        if self.gpu_ids and len(self.gpu_ids) != self.num_servers:
            raise ValueError(
                f"fleet.gpu_ids: expected one list per server ({self.num_servers}), got {len(self.gpu_ids)}; "
                "give each server its GPUs or leave gpu_ids empty"
            )
        if self.gpu_ids and any(len(g) != self.tensor_parallel_size for g in self.gpu_ids):
            raise ValueError(
                f"fleet.gpu_ids / fleet.tensor_parallel_size: each server needs {self.tensor_parallel_size} GPUs, "
                f"got {self.gpu_ids}; make them agree"
            )


class FleetServer(msgspec.Struct, frozen=True):
    """One server of a fleet as it runs now."""

    index: int
    url: str
    engine: str
    pid: int
    restarts: int
    log_path: str


class FleetStatistics(msgspec.Struct, frozen=True):
    servers: list[FleetServer]
    up: int
    restarts: int


@final
class Fleet:
    """K servers, supervised; see the module docstring.

    Args:
        config: the fleet.
        api_key: the shared secret clients must send (``authorization: Bearer``);
            ``None``: none (loopback only, unless ``insecure``).
        insecure: serve a non-loopback ``config.host`` without a secret.

    Raises:
        ValueError: a non-loopback ``host`` without ``api_key``, unless ``insecure``;
            with ``api_key``, an SGLang ``extra_args`` with ``--config`` or ``--api-key``.
        LaunchError (on entry): any server fails its first start (the others are
            stopped).  While running, a server that exhausts ``max_restarts``
            raises :class:`ServerDied` out of the block.
    """

    def __init__(self, config: FleetConfig, *, api_key: str | None = None, insecure: bool = False) -> None:
        check_bind(config.host, api_key, insecure)
        if api_key and config.engine == "sglang":
            _check_sglang_args(config.extra_args)
        self.config = config
        self._api_key = api_key
        self.model = config.model
        self._log_dir = Path(config.log_dir or tempfile.mkdtemp(prefix="rstar2-fleet-"))
        n = config.num_servers
        self._ports = [config.base_port + i for i in range(n)] if config.base_port else _new_ports(config.host, n)
        # Where each engine listens: behind the proxy (loopback, a port of its own) when there is a secret.
        self._engine_host = "127.0.0.1" if api_key else config.host
        self._engine_ports = _new_ports("127.0.0.1", n, self._ports) if api_key else self._ports
        self._servers: list[FleetServer | None] = [None] * config.num_servers
        self._up = [False] * config.num_servers
        self._stack = contextlib.AsyncExitStack()
        self._opened = False

    async def __aenter__(self) -> Self:
        if self._opened:
            raise RuntimeError("a Fleet can be entered once")
        self._opened = True
        self._log_dir.mkdir(parents=True, exist_ok=True)
        try:
            async with contextlib.AsyncExitStack() as stack:
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                async with anyio.create_task_group() as starters:
                    for i in range(self.config.num_servers):
                        starters.start_soon(tg.start, self._supervise, i)
                self._stack = stack.pop_all()
        except BaseExceptionGroup as group:
            _, rest = group.split(LaunchError)
            launch, _ = group.split(LaunchError)
            if launch is not None and rest is None:
                first = _leaves(launch)[0]
                raise LaunchError(f"{len(_leaves(launch))} server(s) failed to start; first: {first}") from group
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)

    @property
    def servers(self) -> list[FleetServer]:
        return [s for s in self._servers if s is not None]

    def specs(self) -> list[ServerSpec]:
        """The fleet's addresses, for :class:`backends.ServerPool`."""
        return [ServerSpec(url=f"http://{self.config.host}:{p}", engine=self.config.engine) for p in self._ports]

    def set_model(self, path: str) -> None:
        """Start restarted servers from ``path`` (the latest weights) from now on."""
        self.model = path

    async def restart(self, index: int) -> None:
        """Stop server ``index`` (SIGTERM to its tree); its supervisor starts it again."""
        server = self._servers[index]
        if server is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGTERM)

    def statistics(self) -> FleetStatistics:
        servers = self.servers
        return FleetStatistics(servers=servers, up=sum(self._up), restarts=sum(s.restarts for s in servers))

    async def _supervise(self, i: int, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        restarts = 0
        started = False
        while True:
            try:
                async with anyio.create_task_group() as tg:
                    if self.config.engine == "vllm":
                        info = await tg.start(serve_vllm, self._vllm_config(i))
                        pid, log = info.pid, info.log_path
                    else:
                        pid, log = await tg.start(serve_sglang, self._sglang_args(i))
                    if self._api_key:
                        upstream = f"http://{self._engine_host}:{self._engine_ports[i]}"
                        await tg.start(functools.partial(
                            serve_proxy, upstream, host=self.config.host, port=self._ports[i], secret=self._api_key
                        ))  # fmt: skip
                    self._servers[i] = FleetServer(i, f"http://{self.config.host}:{self._ports[i]}", self.config.engine, pid, restarts, log)
                    self._up[i] = True
                    if not started:
                        started = True
                        task_status.started()
            except* (ServerDied, LaunchError):
                self._up[i] = False
                if not started or not self.config.restart or restarts >= self.config.max_restarts:
                    raise
            restarts += 1
            await anyio.sleep(RESTART_BACKOFF_S[min(restarts, len(RESTART_BACKOFF_S)) - 1])

    def _env(self, i: int) -> dict[str, str]:
        env = dict(self.config.env)
        if self._api_key:  # vLLM's own check on /v1, for whoever reaches the loopback port
            env["VLLM_API_KEY"] = self._api_key
        if self.config.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.config.gpu_ids[i]))
        return env

    def _vllm_config(self, i: int) -> VLLMServerConfig:
        c = self.config
        extra = list(c.extra_args)
        if c.tensor_parallel_size > 1:
            extra = ["--tensor-parallel-size", str(c.tensor_parallel_size), *extra]
        return VLLMServerConfig(
            model=self.model,
            python=c.python,
            host=self._engine_host,
            port=self._engine_ports[i],
            served_model_name=c.served_model_name or c.model,
            max_model_len=c.max_model_len,
            kv_cache_gib=c.kv_cache_gib,
            extra_args=extra,
            env=self._env(i),
            log_path=str(self._log_dir / f"server-{i}.log"),
            startup_timeout_s=c.startup_timeout_s,
        )

    def _sglang_args(self, i: int) -> _SGLangArgs:
        c = self.config
        command = sglang_command(
            c.python or "python3", self.model, host=self._engine_host, port=self._engine_ports[i],
            tensor_parallel_size=c.tensor_parallel_size, served_model_name=c.served_model_name or c.model,
            max_model_len=c.max_model_len, extra_args=c.extra_args,
        )  # fmt: skip
        url = f"http://{self._engine_host}:{self._engine_ports[i]}"
        log = str(self._log_dir / f"server-{i}.log")
        return _SGLangArgs(command, url, self._env(i), log, c.startup_timeout_s, api_key=self._api_key)


def _new_ports(host: str, n: int, taken: Sequence[int] = ()) -> list[int]:
    """`n` ports free on `host`, none twice nor in `taken`: each is free when chosen, but
    none is held, so two choices could be one port."""
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port(host)) not in ports and port not in taken:
            ports.append(port)
    return ports


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


class _SGLangArgs(msgspec.Struct, frozen=True):
    command: list[str]
    url: str
    env: dict[str, str]
    log_path: str
    startup_timeout_s: float
    stop_grace_s: float = 15.0
    api_key: str | None = None
    """SGLang's ``--api-key`` (every route but ``/health`` and ``/metrics`` asks for
    it), given in a private ``--config`` file, never in the command line."""


async def serve_sglang(args: _SGLangArgs, *, task_status: TaskStatus[tuple[int, str]] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run one SGLang server until cancelled; ``started((pid, log_path))`` once
    ``/health`` and ``/get_server_info`` answer 200.

    Raises:
        LaunchError: it exited while starting or was not ready in time.
        ServerDied: it exited after it was ready.
    Resource handling: as :func:`backends.serve_vllm` (process tree stopped, shielded).
    """
    log_path = Path(args.log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**engine_environment(), **args.env}
    command, key_file = list(args.command), None
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else None
    try:
        if args.api_key is not None:  # ps shows the command line to every user: the key goes in a file only we can read
            fd, key_file = tempfile.mkstemp(prefix="rstar2-sglang-", suffix=".yaml")
            with os.fdopen(fd, "w") as f:
                f.write(f"api-key: {json.dumps(args.api_key)}\n")  # a JSON string is a YAML scalar
            command += ["--config", key_file]
        # SGLang logs its arguments at start-up, the key among them: its log is ours alone.
        with open(log_path, "ab", opener=_private if args.api_key is not None else None) as log:  # noqa: ASYNC230 - a local file, as before
            process = await anyio.open_process(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
    except BaseException:
        _remove(key_file)
        raise
    try:
        async with httpx.AsyncClient(
            base_url=args.url, transport=transport_for(args.url), timeout=10.0, trust_env=False, headers=headers
        ) as http:
            try:
                with anyio.fail_after(args.startup_timeout_s):
                    while True:
                        if process.returncode is not None:
                            raise LaunchError(launch_failure(f"SGLang server exited with status {process.returncode} while starting", log_path))
                        with contextlib.suppress(httpx.TransportError):
                            if (await http.get("/health")).status_code == 200 and (await http.get("/get_server_info")).status_code == 200:
                                break
                        await anyio.sleep(0.5)
            except TimeoutError:
                raise LaunchError(launch_failure(f"SGLang server not ready within {args.startup_timeout_s:g} s", log_path)) from None
        _remove(key_file)  # read when it parsed its arguments, long before it was ready
        task_status.started((process.pid, str(log_path)))
        code = await process.wait()
        raise ServerDied(launch_failure(f"SGLang server (pid {process.pid}) exited with status {code}", log_path))
    finally:
        _remove(key_file)
        with anyio.CancelScope(shield=True):
            await stop_tree(process, args.stop_grace_s)


def _check_sglang_args(extra_args: list[str]) -> None:
    """SGLang takes the secret from the ``--config`` file the fleet writes: a
    ``--config`` or ``--api-key`` of the user's would replace it, and leave the
    engine's loopback port open to anyone on its node (or with another key).

    Raises:
        ValueError: naming ``fleet.extra_args`` and the option (not its value).
    """
    for arg in extra_args:
        option = arg.split("=", 1)[0]
        if option in ("--config", "--api-key"):
            raise ValueError(
                f"fleet.extra_args: {option} would replace the key file the fleet gives SGLang (its secret); "
                "drop it, and give the secret with fleet.api_key_file or fleet.api_key_env"
            )


def _private(path: str, flags: int) -> int:
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # a log kept from an earlier run without a key may be open to others
    return fd


def _remove(path: str | None) -> None:
    if path is not None:
        Path(path).unlink(missing_ok=True)
