"""Landlock: confine a process's file access to a few trees (three syscalls).

Standard library only: this module is copied into the jail and imported by the
worker.  The rules handle every filesystem right the running kernel's ABI knows,
so anything not granted below is denied:

- ``read_only`` trees: read files, list directories, execute (the interpreter,
  its libraries, the packages);
- ``read_write`` trees: everything (the call's scratch directory);
- ``devices``: read and write the named device files (``/dev/null`` ...).

With ABI >= 4 TCP bind/connect are denied too, and with ABI >= 6 the process may
not signal processes outside its own Landlock domain nor reach abstract unix
sockets: a second layer behind the seccomp filter.
"""

from __future__ import annotations

import ctypes
import errno
import os

_SYS_CREATE_RULESET = 444  # same numbers on x86_64 and aarch64 (generic table)
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV

_NET_ALL = (1 << 0) | (1 << 1)  # BIND_TCP | CONNECT_TCP, ABI 4
_SCOPE_ALL = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET | SIGNAL, ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fs_rights(abi: int) -> int:
    """All filesystem rights known to ``abi``: 13 bits in v1, then one per version up to v5."""
    bits = 13
    if abi >= 2:
        bits = 14  # REFER
    if abi >= 3:
        bits = 15  # TRUNCATE
    if abi >= 5:
        bits = 16  # IOCTL_DEV
    return (1 << bits) - 1


def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 when Landlock is unavailable (not built or not enabled)."""
    r = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(r) if r > 0 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(r: int, what: str) -> int:
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {errno.errorcode.get(err, err)}")
    return r


def restrict(
    read_only: list[str], read_write: list[str], devices: list[str], abi: int
) -> None:
    """Confine the calling thread (and its future threads) to the given trees.

    Paths that do not exist are skipped.  Irreversible.

    Raises:
        OSError: a Landlock syscall failed.
    """
    all_fs = _fs_rights(abi)
    attr = _RulesetAttr(all_fs, _NET_ALL if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    fd = _check(
        _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "create_ruleset",
    )
    try:
        ro = _EXECUTE | _READ_FILE | _READ_DIR
        for paths, rights in ((read_only, ro), (read_write, all_fs), (devices, _READ_FILE | _WRITE_FILE)):
            for path in paths:
                try:
                    pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    granted = rights if os.path.isdir(path) else rights & _FILE_RIGHTS
                    rule = _PathBeneath(granted & all_fs, pfd)
                    _check(
                        _libc.syscall(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)),
                        f"add_rule({path})",
                    )
                finally:
                    os.close(pfd)
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(_libc.syscall(_SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(fd)
