"""Security probes: each really tries the attack, must fail, and the pool must still serve."""

from __future__ import annotations

import socket

import anyio
import pytest

from sandbox import SandboxPool, pool_processes

from ._helpers import config, home_file, project_file, wait_until

pytestmark = pytest.mark.anyio

RAW_SYSCALLS = """
import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {
    'socket': (41, 2, 1, 0),          # socket(AF_INET, SOCK_STREAM, 0)
    'unshare': (272, 0x10000000),     # unshare(CLONE_NEWUSER)
    'mount': (165, b'none', b'/scratch', b'tmpfs', 0, 0),
    'ptrace': (101, 16, 1, 0, 0),     # PTRACE_ATTACH to pid 1
    'io_uring_setup': (425, 8, ctypes.create_string_buffer(120)),
    'bpf': (321, 0, ctypes.create_string_buffer(64), 64),
    'clone_newpid': (56, 0x20000000 | 17, 0, 0, 0, 0),
    'kill_init': (62, 1, 9),
    'setsid': (112,),
}
out = []
for name, (nr, *args) in calls.items():
    r = libc.syscall(nr, *args)
    out.append(f"{name}={r}")
print(' '.join(out))
"""


async def test_probes_are_contained_and_pool_keeps_serving(tmp_path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    host_tmp = tmp_path / "host_secret.txt"
    host_tmp.write_text("secret")
    home = home_file()
    probes = {
        "network": f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=1); print('CONNECTED')",
        "dns": "import socket; print(socket.getaddrinfo('example.com', 80))",
        "shadow": "print(open('/etc/shadow').read())",
        "passwd": "print(open('/etc/passwd').read())",
        "project": f"print(open({project_file()!r}).read())",
        "host_tmp": f"print(open({str(host_tmp)!r}).read())",
        "home": f"print(open({home!r}).read())" if home else "print(open('/root/.bashrc').read())",
        "list_root_home": "import os; print(os.listdir('/root'))",
        "write_usr": "open('/usr/pwned', 'w').write('x')",
        "write_root": "open('/pwned', 'w').write('x')",
        "write_scratch_root": "open('/scratch/pwned', 'w').write('x')",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "subprocess": "import subprocess; print(subprocess.run(['/bin/sh', '-c', 'echo PWNED'], capture_output=True).stdout)",
        "alloc_10gb": "x = bytearray(10 * 1024**3); print('ALLOCATED')",
        "numpy_10gb": "import numpy as np; x = np.ones(10 * 1024**3 // 8); print('ALLOCATED')",
        "kill_parent": "import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('KILLED')",
        "kill_all": "import os, signal; os.kill(-1, signal.SIGKILL); print('KILLED')",
        "kill_init": "import os, signal; os.kill(1, signal.SIGKILL); print('KILLED')",
        "raw_syscalls": RAW_SYSCALLS,
        "proc_mem": "print(open('/proc/1/mem', 'rb').read(1))",
        "thread_left_behind": "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); print('started')",
    }
    async with SandboxPool(config(memory_mb=1024)) as pool:
        steady = 2 * 4  # per worker: bwrap, its init, the worker, the child forked for the next call
        await wait_until(lambda: len(pool_processes(pool.id)) == steady)
        results = {}

        async def probe(name: str, code: str) -> None:
            results[name] = await pool.run(code, timeout=5)

        async with anyio.create_task_group() as tg:
            for name, code in probes.items():
                tg.start_soon(probe, name, code)
        after = await pool.run("print(6 * 7)")
        await wait_until(lambda: len(pool_processes(pool.id)) == steady, timeout=10)  # nothing left running
    listener.close()

    def failed(name: str, exc: str) -> None:
        r = results[name]
        assert r.status == "error", (name, r)
        assert exc in r.stderr, (name, r)

    failed("network", "PermissionError")
    failed("dns", "gaierror")
    for name in ("shadow", "passwd", "project", "host_tmp", "home"):
        failed(name, "FileNotFoundError")
    failed("list_root_home", "PermissionError")  # the interpreter lives under /root; the rest is not shown
    failed("write_usr", "OSError")
    failed("write_root", "OSError")
    failed("write_scratch_root", "PermissionError")
    failed("fork_bomb", "PermissionError")
    failed("subprocess", "PermissionError")
    failed("alloc_10gb", "MemoryError")
    failed("numpy_10gb", "MemoryError")
    for name in ("kill_parent", "kill_all", "kill_init"):
        failed(name, "PermissionError")
    failed("proc_mem", "FileNotFoundError")
    raw = results["raw_syscalls"]
    assert raw.status == "ok", raw
    assert all(part.endswith("=-1") for part in raw.stdout.split()), raw.stdout
    assert results["thread_left_behind"].status == "ok"
    assert after.status == "ok" and after.stdout == "42\n"
    stats = pool.statistics()
    assert stats.worker_failures == 0 and stats.retries == 0


async def test_disk_fill_is_bounded_and_cleaned() -> None:
    fill = (
        "i = 0\ntry:\n    while True:\n        with open(f'f{i}', 'wb') as f:\n            f.write(b'x' * (1 << 20))\n"
        "        i += 1\nexcept OSError as e:\n    print('stopped', i, e.errno)"
    )
    async with SandboxPool(config(workers=1, scratch_mb=16)) as pool:
        first = await pool.run(fill, timeout=20)
        again = await pool.run(fill, timeout=20)
        big = await pool.run("open('big', 'wb').write(b'x' * (20 << 20))", timeout=20)
    assert first.status == "ok" and first.stdout.startswith("stopped"), first
    n1 = int(first.stdout.split()[1])
    assert n1 <= 16
    assert again.stdout.split()[1] == str(n1)  # the first call's files were removed
    assert big.status in ("killed", "error"), big  # file size limit (SIGXFSZ) or ENOSPC


async def test_cannot_read_other_calls_scratch() -> None:
    async with SandboxPool(config(workers=1)) as pool:
        writer = await pool.run("import os; open('secret', 'w').write('s3cret'); print(os.getcwd())")
        cwd = writer.stdout.strip()
        # Ahead-forked next call's directory exists while a call runs: try both neighbours.
        n = int(cwd.rsplit("-", 1)[1])
        reader = await pool.run(
            "import os\nfor p in [%r, '/scratch/call-%d', '/scratch']:\n"
            "    try:\n        print(p, os.listdir(p))\n    except OSError as e:\n        print(p, type(e).__name__)\n"
            "try:\n    print(open(%r).read())\nexcept OSError as e:\n    print(type(e).__name__)"
            % (cwd, n + 2, cwd + "/secret")
        )
    assert "s3cret" not in reader.stdout
    assert reader.stdout.count("Error") == 4, reader.stdout
