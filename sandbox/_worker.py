"""The warm worker: runs inside the outer jail, forks one child per call.

Standard library only (plus whatever ``preload`` names): the pool copies this
file and its siblings ``_child.py`` (what runs in the call's process),
``_frames.py``, ``_seccomp.py`` and ``_landlock.py`` into the jail and starts
``python -I -S -X utf8 _worker.py``.  It is never imported by the pool.

Protocol on fds 0/1 (moved to private fds at start), frames (see ``_frames``):

    pool -> worker  setup  {"preload", "warmup", "site", "scratch", "read_only", ...}
    worker -> pool  ready  {"ready": true, "pid"} | {"ready": false, "error"}
    pool -> worker  call   {"id", "code", "stdin", "timeout"}
    worker -> pool  reply  {"id", "status", "stdout", "stderr", "exit_code", "duration_s"}

End of input ends the worker.  One call at a time.  After each reply the worker
forks the child for the next call and lets it finish its confinement (process
group, rlimits, Landlock, seccomp) so that fork and set-up are off the request
path; the child then blocks on its control pipe until the call arrives.
"""

from __future__ import annotations

import gc
import math
import os
import select
import shutil
import signal
import sys
import time
import traceback

# -I leaves the script's own directory off the path; the modules copied beside it are needed.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _child
from _frames import read_frame, write_frame

_CHILD_SETUP_FAILED = "[sandbox] the call's process failed to start; see stderr"


def _with_note(text: str, note: str, cap: int) -> str:
    """Append the sandbox's own note, keeping the whole within ``cap`` characters."""
    sep = "\n" if text and not text.endswith("\n") else ""
    room = max(cap - len(note) - len(sep), 0)
    return text[:room] + sep + note


class Child:
    """One pre-forked, confined process waiting for its call."""

    def __init__(self, pid: int, ctrl_w: int, out_r: int, err_r: int, st_r: int, scratch: str):
        self.pid, self.ctrl_w, self.out_r, self.err_r, self.st_r = pid, ctrl_w, out_r, err_r, st_r
        self.scratch = scratch


class Worker:
    def __init__(self, setup: dict, proto_in: int, proto_out: int):
        self.cfg = setup
        self.proto_in, self.proto_out = proto_in, proto_out
        self.seq = 0

    # -- the child ---------------------------------------------------------
    def prefork(self) -> Child:
        self.seq += 1
        scratch = os.path.join(self.cfg["scratch"], f"call-{self.seq}")
        os.mkdir(scratch, 0o700)
        ctrl_r, ctrl_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns
            try:
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                os.dup2(ctrl_r, 3)
                os.dup2(st_w, 4)
                os.closerange(5, 1 << 20)
                _child.confine_and_run(self.cfg, scratch)
            except BaseException:  # noqa: BLE001 - report set-up failures as internal
                try:
                    traceback.print_exc()
                    sys.stderr.flush()
                finally:
                    os._exit(71)
        try:
            os.setpgid(pid, pid)  # also done in the child; whichever runs first wins
        except OSError:
            pass
        for fd in (ctrl_r, out_w, err_w, st_w):
            os.close(fd)
        for fd in (out_r, err_r, st_r):
            os.set_blocking(fd, False)
        return Child(pid, ctrl_w, out_r, err_r, st_r, scratch)

    # -- one call ------------------------------------------------------------
    def run_call(self, child: Child, req: dict) -> tuple[dict, bool]:
        """Run one call in ``child``; returns the reply and whether the child is reaped."""
        t0 = time.monotonic()
        timeout = float(req["timeout"])
        deadline = t0 + timeout
        cap = self.cfg["max_output_bytes"]
        bufs = {child.out_r: bytearray(), child.err_r: bytearray()}
        total = 0
        status = None
        st = bytearray()
        try:
            write_frame(child.ctrl_w, req)
        except OSError:
            pass  # child died during set-up; reported below as internal
        os.close(child.ctrl_w)
        pidfd = os.pidfd_open(child.pid)
        poller = select.poll()
        open_fds = {child.out_r, child.err_r, child.st_r}
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        exited = False
        reported = False  # the child wrote "E<rc>": its output is complete
        while not reported and (open_fds or not exited):
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            for fd, _ in poller.poll(left * 1000):
                if fd == pidfd:
                    exited = True
                    poller.unregister(pidfd)
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd == child.st_r:
                    st += data
                    reported = b"E" in st and len(st) >= st.index(b"E") + 4
                    continue
                total += len(data)
                buf = bufs[fd]
                if len(buf) < cap:
                    buf += data[: cap - len(buf)]
            if total > cap:
                status = "output_limit"
                break
        if reported and status is None:
            for fd in (child.out_r, child.err_r):  # closed before the report: drain what is left
                while fd in open_fds and total <= cap:
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    total += len(data)
                    bufs[fd] += data[: max(cap - len(bufs[fd]), 0)]
            if total > cap:
                status = "output_limit"
        os.close(pidfd)
        reaped = False
        wstatus, cpu = 0, 0.0
        if not reported or status is not None:
            self._kill(child.pid)
            _, wstatus, usage = os.wait4(child.pid, 0)
            cpu = usage.ru_utime + usage.ru_stime
            reaped = True
        duration = time.monotonic() - t0
        exit_code = None
        note = ""
        started = st.startswith(b"S")
        if status is None:
            if not started:
                status, note = "internal", _CHILD_SETUP_FAILED
            elif reported:
                i = st.index(b"E")
                exit_code = int(st[i + 1 : i + 4])
                status = "ok" if exit_code == 0 else "error"
            elif os.WIFEXITED(wstatus):
                exit_code = os.WEXITSTATUS(wstatus)
                status = "ok" if exit_code == 0 else "error"
            else:
                sig = os.WTERMSIG(wstatus)
                exit_code = -sig
                if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= math.ceil(timeout)):
                    status, note = "timeout", f"[sandbox] CPU time limit reached ({cpu:.1f} s)"
                else:
                    status = "killed"
                    note = f"[sandbox] killed by {signal.Signals(sig).name}"
                    if sig == signal.SIGXFSZ:
                        note += " (file size limit)"
        elif status == "timeout":
            note = f"[sandbox] timed out after {timeout:g} s"
        else:
            note = f"[sandbox] output limit of {cap} bytes exceeded"
        stderr = bufs[child.err_r].decode("utf-8", "replace")
        if note:
            stderr = _with_note(stderr, note, cap)
        reply = {
            "id": req["id"],
            "status": status,
            "stdout": bufs[child.out_r].decode("utf-8", "replace"),
            "stderr": stderr,
            "exit_code": exit_code,
            "duration_s": duration,
        }
        return reply, reaped

    def finish(self, child: Child, reaped: bool) -> None:
        """After the reply: make sure the child and anything it left are gone, clean its scratch."""
        if not reaped:
            self._kill(child.pid)
            os.waitpid(child.pid, 0)
        for fd in (child.out_r, child.err_r, child.st_r):
            os.close(fd)
        self._sweep()
        self._clean(child.scratch)

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _sweep(self) -> None:
        """In our own pid namespace, nothing but us may outlive a call."""
        if not self.cfg["pid_namespace"]:
            return
        try:
            os.kill(-1, signal.SIGKILL)  # every process we can signal except ourselves and init
        except ProcessLookupError:
            pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break

    @staticmethod
    def _clean(path: str) -> None:
        def fix(func, p, _exc):  # the code may have chmod-ed things away from us
            try:
                os.chmod(os.path.dirname(p), 0o700)
                os.chmod(p, 0o700)
            except OSError:
                pass
            try:
                func(p)
            except OSError:
                pass

        shutil.rmtree(path, onerror=fix)
        if os.path.exists(path):
            shutil.rmtree(path, onerror=fix)

    # -- main loop -----------------------------------------------------------
    def serve(self) -> None:
        while True:
            child = self.prefork()
            req = read_frame(self.proto_in)
            if req is None:  # the pool closed our input: leave nothing behind
                self._kill(child.pid)
                os.waitpid(child.pid, 0)
                return
            reply, reaped = self.run_call(child, req)
            write_frame(self.proto_out, reply)
            self.finish(child, reaped)


def _load(setup: dict) -> None:
    sys.path[:0] = [setup["site"]]
    for name in setup["preload"]:
        __import__(name)
    if setup["warmup"]:
        exec(compile(setup["warmup"], "<warmup>", "exec"), {"__name__": "__warmup__"})  # noqa: S102
    gc.collect()
    gc.freeze()  # forked children then do not touch (copy) the preloaded objects' pages in gc


def main() -> int:
    # Keep the protocol away from fds 0-2 so that nothing the preloads print corrupts it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for fd in (proto_in, proto_out):
        os.set_inheritable(fd, False)
    setup = read_frame(proto_in)
    if setup is None:
        return 0
    try:
        _load(setup)
        worker = Worker(setup, proto_in, proto_out)
    except BaseException as e:  # noqa: BLE001 - tell the pool why, then give up
        write_frame(proto_out, {"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    write_frame(proto_out, {"ready": True, "pid": os.getpid()})
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
