"""Finding a pool's processes from outside, by the pool id on their command lines.

For tests, benchmarks and operators: whether a pool left anything running, and
which processes are its workers (to signal them in a chaos test).  Reads
``/proc`` (Linux); zombies count as gone (their parent reaps them).
"""

from __future__ import annotations

import os
from pathlib import Path


def pool_processes(pool_id: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, command line with spaces for NULs) of every live process whose
    command line names ``pool_id`` (``SandboxPool.id``): bubblewrap, its init, the
    workers and their calls' processes."""
    out = []
    needle = pool_id.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:  # gone while we looked
            continue
        if needle not in cmd:
            continue
        fields = stat_fields(entry.name)
        if fields and fields[0] != "Z":  # []: gone while we looked
            out.append((int(entry.name), int(fields[1]), cmd.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")))
    return out


def worker_pids(pool_id: str) -> list[int]:
    """Host pids of the pool's worker interpreters (spares included): the children of
    their bubblewrap init, or of this process when the pool runs without the jail."""
    procs = pool_processes(pool_id)
    bwraps = {pid for pid, _, cmd in procs if _argv0(cmd).endswith("bwrap")}
    me = os.getpid()
    return [pid for pid, ppid, cmd in procs if not _argv0(cmd).endswith("bwrap") and (ppid in bwraps or ppid == me)]


def _argv0(cmd: str) -> str:
    return cmd.split(" ", 1)[0]


def stat_fields(pid: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or []
    (gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []
