"""Engine server processes, whatever the engine: the environment they start with,
a free port, the log tail a failed start reports, and stopping a whole process
tree for sure.  :mod:`backends._launcher` (vLLM) and :mod:`backends._fleet`
(SGLang, restarts) build on these.

Not covered: process trees on systems without Linux's ``/proc`` (only the process
group is signalled there).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import sys
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = ["descendants", "engine_environment", "free_port", "launch_failure", "stop_tree"]

LOG_TAIL_BYTES = 6000
"""How much of the server log goes into a `LaunchError` message: enough for
a Python traceback and the few lines before it."""


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
_TRIES = 64
_RANDOM = random.SystemRandom()
"""Not the `random` module's generator: training seeds it (`seed_everything`), and two
processes seeded alike chose the same ports."""


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now, chosen below the kernel's ephemeral range.

    A port from that range (what binding port 0 gives) may become the source port of
    any outgoing connection before the server binds it, and an engine binds tens of
    seconds after its port is chosen: a fleet's proxy failed so with "Address already
    in use" while the test suite's clients were busy.  Another process may still take
    the port first; where the range cannot be read, port 0's choice is the answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        for port in _below_ephemeral():
            with contextlib.suppress(OSError):
                s.bind((host, port))
                return port
        s.bind((host, 0))
        return s.getsockname()[1]


def _below_ephemeral() -> list[int]:
    """`_TRIES` random ports from `_LOWEST_PORT` up to the ephemeral range; none if it
    is unknown or starts lower."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    return _RANDOM.sample(range(_LOWEST_PORT, low), min(_TRIES, low - _LOWEST_PORT)) if low > _LOWEST_PORT else []


_RENDEZVOUS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT"
)


def engine_environment() -> dict[str, str]:
    """This process's environment less what must not reach an engine server: our
    virtualenv's paths (the engine has its own interpreter) and the learner's
    torch.distributed rendezvous (torchrun's, or the one a lone learner sets up):
    the engine's workers form their own group."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", *_RENDEZVOUS):
        env.pop(name, None)
    return env


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<log unreadable: {exc}>"


def launch_failure(what: str, log_path: Path) -> str:
    return f"{what}; log {log_path}, last lines:\n{_log_tail(log_path)}"


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may contain spaces.
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    if not sys.platform.startswith("linux"):
        return []
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"
    except OSError:
        return False


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def stop_tree(process: Process, grace_s: float) -> None:
    """SIGTERM the process group and all descendants, wait ``grace_s``, SIGKILL what is left.

    Descendants are collected before signalling, so engine processes that a
    dying parent orphans are still found. Must run shielded.
    """
    pids = descendants(process.pid)
    _signal_all(process.pid, pids, signal.SIGTERM)
    with anyio.move_on_after(grace_s):
        await process.wait()
        while any(_alive(p) for p in pids):
            await anyio.sleep(0.1)
    pids = [p for p in pids if _alive(p)] + descendants(process.pid)
    _signal_all(process.pid, pids, signal.SIGKILL)
    await process.wait()
    with anyio.move_on_after(5.0):
        while any(_alive(p) for p in pids):
            await anyio.sleep(0.05)
