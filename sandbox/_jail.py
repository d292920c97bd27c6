"""The outer jail: what this machine supports, and the command that starts a worker.

Synchronous and side-effect free except for the probes (a few short
subprocesses, cached per process).  The pool calls these from a worker thread.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import _landlock, _seccomp
from ._config import SandboxConfig
from ._errors import SandboxUnavailable

log = logging.getLogger("sandbox")

_HERE = Path(__file__).resolve().parent
WORKER_FILES = ("_worker.py", "_child.py", "_frames.py", "_seccomp.py", "_landlock.py")
"""Copied (bind-mounted) into the jail; standard library only."""

_JAIL_OPT = "/opt/sandbox"
_JAIL_SCRATCH = "/scratch"
_NOBODY = "65534"
_DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"]


@dataclass(frozen=True)
class HostSupport:
    """Which isolation layers this machine offers.  ``None`` reasons mean "available"."""

    bwrap: str | None
    """Path of bubblewrap, or None."""
    userns_error: str | None
    """Why bubblewrap cannot create user/pid/net namespaces, or None."""
    landlock_abi: int
    """Landlock ABI version, 0 when unavailable."""
    seccomp_error: str | None
    """Why the seccomp filter cannot be installed, or None."""

    def missing(self) -> list[str]:
        """One line per missing layer, each with its fix."""
        out = []
        if self.bwrap is None:
            out.append("bubblewrap is not installed (apt-get install bubblewrap, or `make system`)")
        elif self.userns_error:
            out.append(
                "bubblewrap cannot create namespaces: "
                f"{self.userns_error} (enable unprivileged user namespaces: "
                "sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0, "
                "or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
            )
        if self.landlock_abi == 0:
            out.append("Landlock is unavailable (kernel >= 5.13 booted with lsm=...,landlock)")
        if self.seccomp_error:
            out.append(f"seccomp: {self.seccomp_error}")
        return out


@functools.lru_cache(maxsize=4)
def check_host(bwrap: str | None = None) -> HostSupport:
    """Probe the machine once per process (runs bubblewrap for ~20 ms)."""
    path = bwrap or shutil.which("bwrap")
    userns_error = None
    if path:
        try:
            r = subprocess.run(
                [path, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                 "--unshare-uts", "--ro-bind", "/", "/", "--", "/bin/true"],
                capture_output=True, timeout=30, check=False,
            )
            if r.returncode != 0:
                userns_error = r.stderr.decode(errors="replace").strip() or f"exit {r.returncode}"
        except (OSError, subprocess.TimeoutExpired) as e:
            userns_error = str(e)
    return HostSupport(path, userns_error, _landlock.abi_version(), _seccomp.supported())


@dataclass(frozen=True)
class Interpreter:
    """Where the workers' interpreter and the allowed packages live on the host."""

    executable: str
    """Real path of the interpreter binary (symlinks resolved)."""
    prefix: str
    """Its installation prefix (``sys.base_prefix``): stdlib and libpython."""
    site_packages: list[str]
    """The prefix's own site-packages directories (hidden in the jail)."""
    packages: dict[str, str] = field(default_factory=dict)
    """Allowed package name -> file or directory on the host (``*.libs`` included)."""


_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
out = {"executable": os.path.realpath(sys.executable), "prefix": sys.base_prefix,
       "site": [p for p in {sysconfig.get_path("purelib", vars={"base": sys.base_prefix}),
                            sysconfig.get_path("platlib", vars={"platbase": sys.base_prefix})}],
       "packages": {}, "missing": []}
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        out["missing"].append(name); continue
    path = os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin
    out["packages"][name] = path
    libs = path + ".libs"
    if os.path.isdir(libs):
        out["packages"][name + ".libs"] = libs
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=8)
def inspect_interpreter(python: str, packages: tuple[str, ...]) -> Interpreter:
    """Ask ``python`` where it lives and where ``packages`` are.

    Raises:
        SandboxUnavailable: the interpreter cannot run, or a package is missing.
    """
    try:
        r = subprocess.run([python, "-I", "-c", _PROBE, *packages], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxUnavailable(f"sandbox.python: cannot run {python!r}: {e}") from e
    info = json.loads(r.stdout)
    if info["missing"]:
        raise SandboxUnavailable(
            f"sandbox.packages: not installed for {python}: {', '.join(info['missing'])}"
        )
    return Interpreter(info["executable"], info["prefix"], sorted(info["site"]), info["packages"])


@dataclass(frozen=True)
class WorkerSpec:
    """How to start one worker: its command and the set-up frame it is sent first."""

    argv: list[str]
    setup: dict
    scratch_host: str | None
    """Host directory used as scratch when not jailed (removed by the pool)."""
    layers: dict[str, bool]
    """Which isolation layers are active (outer jail, landlock, seccomp)."""


def resolve_layers(config: SandboxConfig, host: HostSupport) -> dict[str, bool]:
    """Decide which layers to use; refuse if one is missing and ``insecure`` is off.

    Raises:
        SandboxUnavailable: naming every missing layer and its fix.
    """
    missing = host.missing()
    if missing and not config.insecure:
        raise SandboxUnavailable(
            "this machine cannot jail the sandbox:\n  - " + "\n  - ".join(missing)
            + "\nFix the above, or set sandbox.insecure = true to run with the layers that exist "
            "(never with untrusted code)."
        )
    for line in missing:
        log.warning("sandbox.insecure: running without a layer: %s", line)
    return {
        "jail": host.bwrap is not None and host.userns_error is None,
        "landlock": host.landlock_abi > 0,
        "seccomp": host.seccomp_error is None,
    }


def worker_spec(
    config: SandboxConfig, interp: Interpreter, host: HostSupport, layers: dict[str, bool], pool_id: str
) -> WorkerSpec:
    """The command and set-up frame for one worker of pool ``pool_id``.

    ``pool_id`` appears on every worker's command line, so that the processes of a
    pool can be found (and shown to be gone) from outside.
    """
    limits = {
        "memory_bytes": config.memory_mb << 20,
        "file_bytes": config.max_file_mb << 20,
        "open_files": config.max_open_files,
        "max_output_bytes": config.max_output_bytes,
        "landlock_abi": host.landlock_abi if layers["landlock"] else 0,
        "seccomp": layers["seccomp"],
        "preload": list(config.preload),
        "warmup": config.warmup,
    }
    py_flags = ["-I", "-S", "-X", "utf8"]
    if layers["jail"]:
        return _bwrap_spec(config, interp, host, limits, py_flags, pool_id)
    # No outer jail: the worker runs on the host, with a temporary site dir of symlinks.
    root = tempfile.mkdtemp(prefix=f"rstar2-sandbox-{pool_id}-")
    site = os.path.join(root, "site")
    scratch = os.path.join(root, "scratch")
    os.mkdir(site)
    os.mkdir(scratch)
    for name, src in interp.packages.items():
        os.symlink(src, os.path.join(site, os.path.basename(src)))
    setup = dict(
        limits, site=site, scratch=scratch, pid_namespace=False,
        read_only=[interp.prefix, "/usr", "/lib", "/lib64", "/etc", str(_HERE), site, *interp.packages.values()],
        devices=_DEVICES,
    )
    argv = [interp.executable, *py_flags, str(_HERE / "_worker.py"), pool_id]
    return WorkerSpec(argv, setup, root, layers)


def _bwrap_spec(
    config: SandboxConfig, interp: Interpreter, host: HostSupport, limits: dict, py_flags: list[str], pool_id: str
) -> WorkerSpec:
    assert host.bwrap is not None
    a = [
        host.bwrap,
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--uid", _NOBODY, "--gid", _NOBODY, "--hostname", "sandbox",
        "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv", "OMP_NUM_THREADS", "1",
        "--setenv", "MKL_NUM_THREADS", "1",
        "--ro-bind", "/usr", "/usr",
    ]
    read_only = ["/usr", f"{_JAIL_OPT}"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = "/" + name
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            a += ["--ro-bind", p, p]
            read_only.append(p)
    if not (interp.prefix + "/").startswith("/usr/"):
        a += ["--ro-bind", interp.prefix, interp.prefix]
        read_only.append(interp.prefix)
        for site in interp.site_packages:
            if site.startswith(interp.prefix + "/") and os.path.isdir(site):
                a += ["--tmpfs", site]  # the host interpreter's own packages stay hidden
    for src in interp.packages.values():
        a += ["--ro-bind", src, f"{_JAIL_OPT}/site/{os.path.basename(src)}"]
    for name in WORKER_FILES:
        a += ["--ro-bind", str(_HERE / name), f"{_JAIL_OPT}/worker/{name}"]
    a += [
        "--dev", "/dev",
        "--size", str(config.scratch_mb << 20), "--tmpfs", _JAIL_SCRATCH,
        "--remount-ro", "/",
        "--chdir", _JAIL_SCRATCH,
        "--", interp.executable, *py_flags, f"{_JAIL_OPT}/worker/_worker.py", pool_id,
    ]
    setup = dict(
        limits, site=f"{_JAIL_OPT}/site", scratch=_JAIL_SCRATCH, pid_namespace=True,
        read_only=read_only, devices=_DEVICES,
    )
    return WorkerSpec(a, setup, None, {"jail": True, "landlock": bool(limits["landlock_abi"]), "seccomp": limits["seccomp"]})


def default_python() -> str:
    return sys.executable
