"""The call's process: forked by the worker, confined, then runs one call's code.

Standard library only: copied into the jail with the worker (see ``_worker.py``).
Everything here runs in the forked child; what can be done once per worker
(loading libc, importing ``resource``, assembling the seccomp filter) is done at
import time, before any fork, so that each call pays only for its own set-up.

Descriptors on entry: 1 and 2 the call's stdout and stderr pipes, 3 the control
pipe the call arrives on, 4 the status pipe (``S`` once confined and started,
``E<rc>`` when the code is done).  Nothing else is open.
"""

from __future__ import annotations

import ctypes
import io
import math
import os
import resource
import signal
import sys
import traceback
import types
from typing import NoReturn

import _landlock
import _seccomp
from _frames import read_frame

_libc = ctypes.CDLL(None, use_errno=True)
_seccomp.prepare()
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def confine_and_run(cfg: dict, scratch: str) -> NoReturn:
    """Confine this process (group, rlimits, Landlock, seccomp), wait for its call on
    fd 3, run it and exit.  Never returns."""
    os.setpgid(0, 0)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the worker
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no /proc/pid/mem, no core
    os.chdir(scratch)
    for res, value in (
        (resource.RLIMIT_AS, cfg["memory_bytes"]),
        (resource.RLIMIT_FSIZE, cfg["file_bytes"]),
        (resource.RLIMIT_NOFILE, cfg["open_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))
    if cfg["landlock_abi"]:
        _landlock.restrict(cfg["read_only"], [scratch], cfg["devices"], cfg["landlock_abi"])
    if cfg["seccomp"]:
        _seccomp.install(os.getpid())
    req = read_frame(3)
    if req is None:
        os._exit(0)
    stdin = req["stdin"].encode("utf-8", "surrogatepass")
    fd = os.memfd_create("stdin")
    os.write(fd, stdin)  # memfd: never blocks, any size
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    cpu = math.ceil(req["timeout"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    os.environ.update({"HOME": scratch, "TMPDIR": scratch, "PWD": scratch})
    os.close(3)
    os.write(4, b"S")
    _exec(req["code"])


def _exec(code: str) -> NoReturn:
    """Run ``code`` the way ``python -c`` would, report its exit code on fd 4, leave.

    Reporting before ``_exit`` lets the worker answer without waiting for the
    kernel to tear down this process's (large, inherited) address space.
    """
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    rc = 0
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)  # noqa: S102 - the whole point
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException as e:  # noqa: BLE001
        # Hide this frame, as python -c shows only the code's own frames.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        rc = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken stream is the code's business
            pass
    try:
        os.close(1)
        os.close(2)
        os.write(4, b"E%03d" % rc)
    except OSError:
        pass  # the code closed our descriptors: the worker falls back to the wait status
    os._exit(rc)
