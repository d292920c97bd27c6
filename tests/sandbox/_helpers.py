"""Shared bits of the sandbox tests: small pools, and finding a pool's processes."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from sandbox import SandboxConfig

# Small and quick: two workers, tight limits, short grace; warm-up kept tiny.
FAST = dict(workers=2, hang_grace_s=1.0, start_timeout_s=60.0, warmup="", memory_mb=1024)


def config(**overrides: object) -> SandboxConfig:
    return SandboxConfig(**{**FAST, **overrides})  # type: ignore[arg-type]


def pool_processes(pool_id: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, cmdline) of every live process whose command line names the pool."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if pool_id not in cmd:
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":  # a zombie is already dead; its parent reaps it
            continue
        out.append((int(entry.name), int(fields[1]), cmd))
    return out


def worker_pids(pool_id: str) -> list[int]:
    """Host pids of the pool's worker interpreters (children of bubblewrap's init)."""
    procs = pool_processes(pool_id)
    by_pid = {pid: cmd for pid, _, cmd in procs}
    return [
        pid for pid, ppid, cmd in procs
        if "bwrap" not in cmd.split()[0] and "bwrap" in by_pid.get(ppid, " ").split()[0]
    ]


async def wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll a condition on outside state (processes) that no event can signal."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def project_file() -> str:
    return str(Path(__file__).resolve().parents[2] / "pyproject.toml")


def home_file() -> str | None:
    home = Path(os.path.expanduser("~"))
    try:
        for p in home.iterdir():
            if p.is_file():
                return str(p)
    except OSError:
        pass
    return None
