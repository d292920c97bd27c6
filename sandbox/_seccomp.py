"""A seccomp-BPF filter assembled by hand, installed in each call's child.

Standard library only: this module is copied into the jail and imported by the
worker, so it cannot import the rest of the package.

The filter is a deny list in front of "allow": syscalls it names fail with
``EPERM`` (so Python raises ``PermissionError`` and the code can report it), a
wrong architecture (32-bit ``int 0x80`` entry, x32) kills the process.  Denied:

- networking: ``socket`` (all families), ``connect``/``bind``/``listen``/
  ``accept``, ``socketpair`` except ``AF_UNIX`` (asyncio's self-pipe needs it);
- new processes: ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD`` or with
  any namespace flag, ``clone3`` (``ENOSYS``, so glibc falls back to ``clone``),
  ``execve``/``execveat``;
- leaving the process group: ``setsid``, ``setpgid``;
- signals outside the call: ``kill`` unless the target is 0, our pid or our
  group, ``tgkill``/``rt_sigqueueinfo``/``rt_tgsigqueueinfo`` unless our pid,
  ``tkill``, ``pidfd_*``;
- debugging and memory of others: ``ptrace``, ``process_vm_readv``/``writev``,
  ``prctl(PR_SET_DUMPABLE)``, ``prctl(PR_SET_PTRACER)``;
- mounts and namespaces: ``mount`` and the new mount API, ``umount2``,
  ``pivot_root``, ``chroot``, ``unshare``, ``setns``;
- kernel attack surface: ``bpf``, ``perf_event_open``, ``io_uring_*``,
  ``userfaultfd``, ``keyctl``/``add_key``/``request_key``, module and kexec
  loading, ``reboot``, swap, ``personality``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import platform
import struct

# BPF opcodes (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16  # args[0], low 32 bits on little-endian machines

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_SET_DUMPABLE = 4
_PR_SET_PTRACER = 0x59616D61

_CLONE_THREAD = 0x00010000
_CLONE_NS_FLAGS = (
    0x00020000  # NEWNS
    | 0x02000000  # NEWCGROUP
    | 0x04000000  # NEWUTS
    | 0x08000000  # NEWIPC
    | 0x10000000  # NEWUSER
    | 0x20000000  # NEWPID
    | 0x40000000  # NEWNET
)
_AF_UNIX = 1

# name -> number, per architecture.  Only the calls the filter names.
_X86_64 = {
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50,
    "socketpair": 53, "accept4": 288, "clone": 56, "fork": 57, "vfork": 58,
    "execve": 59, "execveat": 322, "clone3": 435, "kill": 62, "tkill": 200,
    "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "prctl": 157, "setsid": 112, "setpgid": 109, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "bpf": 321,
    "perf_event_open": 298, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "reboot": 169, "swapon": 167, "swapoff": 168, "personality": 135,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pidfd_open": 434,
    "pidfd_send_signal": 424, "pidfd_getfd": 438,
}
_AARCH64 = {
    "socket": 198, "connect": 203, "accept": 202, "bind": 200, "listen": 201,
    "socketpair": 199, "accept4": 242, "clone": 220, "execve": 221,
    "execveat": 281, "clone3": 435, "kill": 129, "tkill": 130, "tgkill": 131,
    "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "ptrace": 117,
    "process_vm_readv": 270, "process_vm_writev": 271, "prctl": 167,
    "setsid": 157, "setpgid": 154, "mount": 40, "umount2": 39, "pivot_root": 41,
    "chroot": 51, "unshare": 97, "setns": 268, "bpf": 280, "perf_event_open": 241,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218,
    "init_module": 105, "finit_module": 273, "delete_module": 106,
    "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224,
    "swapoff": 225, "personality": 92, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438,
}
# machine -> (AUDIT_ARCH value, syscall table, first number of a foreign ABI or None)
_ARCHES = {
    "x86_64": (0xC000003E, _X86_64, 0x40000000),  # x32 syscalls have bit 30 set
    "aarch64": (0xC00000B7, _AARCH64, None),
}

_DENY_ALWAYS = (
    "socket", "connect", "accept", "accept4", "bind", "listen", "fork", "vfork",
    "execve", "execveat", "tkill", "ptrace", "process_vm_readv",
    "process_vm_writev", "setsid", "setpgid", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "bpf", "perf_event_open", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "userfaultfd", "keyctl", "add_key",
    "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "personality", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
)


def supported() -> str | None:
    """None when this machine can install the filter, else why not."""
    if platform.machine() not in _ARCHES:
        return f"seccomp filter has no syscall table for {platform.machine()!r}"
    try:
        with open("/proc/self/status") as f:
            if "Seccomp:" not in f.read():
                return "kernel built without seccomp (no Seccomp: line in /proc/self/status)"
    except OSError:
        pass  # no /proc (inside the jail): trust the check the pool made outside
    return None


_PID_MARK = 0x3FFFFFF1
"""Stands for the pid while the filter is assembled: above any pid_max (2**22), and
neither it nor its negation is any other constant of the filter."""


def build(pid: int) -> bytes:
    """The filter for a process whose (namespace) pid is ``pid``.

    Returns the packed ``struct sock_filter`` array.  Pure: no syscalls.  The
    filter is assembled once per process (with a mark for the pid) and only its
    pid-dependent instructions are filled in per call: each call's process
    installs its own filter, so this is on the call path.
    """
    program, at_pid, at_neg_pid = _assembled()
    out = bytearray(program)
    for index in at_pid:
        struct.pack_into("=I", out, index * 8 + 4, pid & 0xFFFFFFFF)
    for index in at_neg_pid:
        struct.pack_into("=I", out, index * 8 + 4, -pid & 0xFFFFFFFF)
    return bytes(out)


@functools.lru_cache(maxsize=1)
def _assembled() -> tuple[bytes, tuple[int, ...], tuple[int, ...]]:
    """(filter with ``_PID_MARK`` for the pid, indices of instructions whose ``k`` is the
    pid, of those whose ``k`` is minus the pid)."""
    program = _assemble(_PID_MARK)
    ks = [struct.unpack_from("=I", program, i * 8 + 4)[0] for i in range(len(program) // 8)]
    return (
        program,
        tuple(i for i, k in enumerate(ks) if k == _PID_MARK),
        tuple(i for i, k in enumerate(ks) if k == -_PID_MARK & 0xFFFFFFFF),
    )


def _assemble(pid: int) -> bytes:
    """Assemble the filter for ``pid`` from scratch (see :func:`build`)."""
    audit_arch, table, foreign = _ARCHES[platform.machine()]
    deny = "deny"
    allow = "allow"
    prog: list[tuple] = []  # (code, jt_label|int, jf_label|int, k) or ("label", name)

    def label(name: str) -> None:
        prog.append(("label", name))

    def ins(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k & 0xFFFFFFFF))

    ins(_LD_W_ABS, _OFF_ARCH)
    ins(_JEQ_K, audit_arch, 1, 0)
    ins(_RET_K, _RET_KILL_PROCESS)
    ins(_LD_W_ABS, _OFF_NR)
    if foreign is not None:
        ins(_JGE_K, foreign, "kill_process", 0)
    for name in _DENY_ALWAYS:
        if name in table:
            ins(_JEQ_K, table[name], deny, 0)
    special = ("clone", "clone3", "kill", "tgkill", "rt_sigqueueinfo",
               "rt_tgsigqueueinfo", "prctl", "socketpair")
    for name in special:
        ins(_JEQ_K, table[name], name, 0)
    ins(_RET_K, _RET_ALLOW)

    label("clone")  # threads only, and no namespaces
    ins(_LD_W_ABS, _OFF_ARG0_LO)
    ins(_JSET_K, _CLONE_THREAD, 0, deny)
    ins(_JSET_K, _CLONE_NS_FLAGS, deny, allow)
    label("clone3")
    ins(_RET_K, _RET_ERRNO | errno.ENOSYS)
    label("kill")  # kill(0), kill(self), kill(-own group): pgid == pid after setpgid(0, 0)
    ins(_LD_W_ABS, _OFF_ARG0_LO)
    ins(_JEQ_K, 0, allow, 0)
    ins(_JEQ_K, pid, allow, 0)
    ins(_JEQ_K, -pid, allow, deny)
    for name in ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        label(name)
        ins(_LD_W_ABS, _OFF_ARG0_LO)
        ins(_JEQ_K, pid, allow, deny)
    label("prctl")
    ins(_LD_W_ABS, _OFF_ARG0_LO)
    ins(_JEQ_K, _PR_SET_DUMPABLE, deny, 0)
    ins(_JEQ_K, _PR_SET_PTRACER, deny, allow)
    label("socketpair")
    ins(_LD_W_ABS, _OFF_ARG0_LO)
    ins(_JEQ_K, _AF_UNIX, allow, deny)
    label(allow)
    ins(_RET_K, _RET_ALLOW)
    label(deny)
    ins(_RET_K, _RET_ERRNO | errno.EPERM)
    label("kill_process")
    ins(_RET_K, _RET_KILL_PROCESS)
    return _resolve(prog)


def _resolve(prog: list[tuple]) -> bytes:
    """Turn symbolic jump targets into relative offsets and pack the program."""
    positions: dict[str, int] = {}
    n = 0
    for item in prog:
        if item[0] == "label":
            positions[item[1]] = n
        else:
            n += 1
    out = []
    i = 0
    for item in prog:
        if item[0] == "label":
            continue
        code, jt, jf, k = item
        offs = []
        for target in (jt, jf):
            if isinstance(target, str):
                target = positions[target] - (i + 1)
            assert 0 <= target <= 255, f"seccomp jump out of range: {target}"
            offs.append(target)
        out.append(struct.pack("=HBBI", code, offs[0], offs[1], k))
        i += 1
    return b"".join(out)


def prepare() -> None:
    """Assemble the filter and load libc now, once, so that processes forked after
    this pay neither (the worker calls it before forking calls).  On a machine the
    filter has no syscall table for there is nothing to assemble: the pool runs
    without the filter there (:func:`supported`), and its workers must still start."""
    if platform.machine() in _ARCHES:
        _assembled()
    _libc()


def install(pid: int) -> None:
    """Install the filter on the calling thread (and what it creates after).

    Sets ``PR_SET_NO_NEW_PRIVS`` first, as the kernel requires.  Irreversible.

    Raises:
        OSError: the kernel refused (errno from prctl).
    """
    program = build(pid)
    count = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(count, ctypes.cast(buf, ctypes.c_void_p))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """libc with a typed ``prctl``, loaded once per process (a worker loads it before forking)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    return libc
