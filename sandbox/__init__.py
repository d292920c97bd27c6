"""Code execution for the model's tool calls: a warm, jailed worker pool.

The rollout core depends only on :class:`Sandbox` (the protocol) and
:class:`ExecResult`; :class:`SandboxPool` runs code in-process, and
:class:`SandboxClient` runs it on remote ``rstar2 sandbox serve`` services;
:func:`open_sandbox` opens the one a :class:`SandboxConfig` asks for.

Covered (each call, with the default configuration on a machine that has all layers):

- An outer jail per warm worker (bubblewrap): new user (mapped to nobody), pid,
  net, mount, ipc, uts and cgroup namespaces; a read-only view of ``/usr``, the
  interpreter's prefix (its own site-packages hidden) and the allowed packages
  only; no ``/etc``, no ``/proc``, no home or project directories; a private
  ``scratch_mb`` tmpfs; the root remounted read-only.  No network at all.
- A fresh forked process per call: its own process group, stdin from the call,
  every other descriptor closed, not dumpable, killed if its worker dies.
- Hard (= soft) rlimits: CPU seconds (timeout + 1), address space
  (``memory_mb``), file size (``max_file_mb``), open files, no core dumps.
- Landlock: read only the trees above, write only the call's own scratch
  directory; no TCP bind/connect; no signals or abstract sockets beyond its
  own domain (as far as the kernel's ABI reaches).
- seccomp: no sockets (but ``AF_UNIX`` pairs), no fork/vfork/exec or non-thread
  clone, no namespaces, mounts, ptrace, bpf, io_uring, perf, keyrings, module
  loading, no signals outside its own process group (see ``_seccomp``).
- The worker enforces the wall-clock timeout and the stdout+stderr cap, kills
  the group, kills whatever else is left in the jail's pid namespace, and
  removes the scratch directory, before the next call.
- The pool replaces dead or hung workers, retries their call once, and leaves
  no process behind on exit or cancellation.

Not covered:

- Kernel vulnerabilities in the syscalls that remain allowed (seccomp is a deny
  list, not an allow list) and side channels (timing, cache, CPU load).
- CPU and memory *fairness* between calls: each call is bounded, but N calls can
  use N cores and N x ``memory_mb``; there is no cgroup.  Memory is limited as
  address space (RLIMIT_AS), not resident memory.
- The pool's own process: it is trusted, runs unjailed, and must not be given
  output of the code to evaluate.
- Reading what the jail shows: the interpreter, the standard library and the
  allowed packages are readable (and so are their file names and versions).
- When the pool runs as root, the jail's "nobody" maps to host root (kuid 0):
  bubblewrap's read-only mounts still prevent writes, but run the pool as an
  unprivileged user in production.
- nsjail is not used even where installed (bubblewrap only).
- ``insecure = true`` drops whichever layers are missing: without the outer
  jail, calls run on the host with only the in-process layers, and a call
  running while its worker is killed outlives it for a moment (until its
  parent-death signal lands) instead of dying with a pid namespace.
"""

from ._bench import benchmark
from ._client import ClientState, ClientStatistics, SandboxClient
from ._config import SandboxConfig
from ._errors import (
    SandboxBroken,
    SandboxClosed,
    SandboxError,
    SandboxUnavailable,
    ServiceError,
    ServiceUnavailable,
)
from ._jail import HostSupport, check_host
from ._open import SECRET_ENV, open_sandbox
from ._pool import PoolState, PoolStatistics, SandboxPool
from ._procs import pool_processes, worker_pids
from ._protocol import Sandbox
from ._service import SandboxService
from ._types import ExecResult, Status

__all__ = [
    "ClientState",
    "ClientStatistics",
    "ExecResult",
    "HostSupport",
    "PoolState",
    "PoolStatistics",
    "SECRET_ENV",
    "Sandbox",
    "SandboxBroken",
    "SandboxClient",
    "SandboxClosed",
    "SandboxConfig",
    "SandboxError",
    "SandboxPool",
    "SandboxService",
    "SandboxUnavailable",
    "ServiceError",
    "ServiceUnavailable",
    "Status",
    "benchmark",
    "check_host",
    "open_sandbox",
    "pool_processes",
    "worker_pids",
]
