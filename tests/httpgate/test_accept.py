"""``httpgate.serve_listeners``: a server out of file descriptors waits and accepts
again, where ``listener.serve`` would end it.  (The cancelled-accept race it exists
for: ``test_server.py``'s ``test_a_server_stopped_as_a_connection_arrives_drops_it_cleanly``.)"""

from __future__ import annotations

import errno
import logging
import socket

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from httpgate import serve_listeners

pytestmark = pytest.mark.anyio


class FakeFullSocket:
    """Test double: a real listening socket whose first ``failures`` accepts fail as
    the kernel's do when the process is out of file descriptors."""

    def __init__(self, real: socket.socket, failures: int) -> None:
        self.real, self.failures = real, failures

    def fileno(self) -> int:
        return self.real.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.real.accept()


class FakeFullListener:
    """Test double: one listener whose raw socket is a :class:`FakeFullSocket`."""

    def __init__(self, raw: FakeFullSocket) -> None:
        self.raw, self.listeners = raw, [self]

    def extra(self, attribute: object) -> object:
        assert attribute is SocketAttribute.raw_socket
        return self.raw


async def test_out_of_file_descriptors_waits_and_accepts_again(caplog: pytest.LogCaptureFixture) -> None:
    async def hello(stream: SocketStream) -> None:
        async with stream:
            await stream.send(b"hello")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener:
        port = listener.extra(SocketAttribute.local_port)
        full = FakeFullSocket(listener.extra(SocketAttribute.raw_socket), failures=2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_listeners, FakeFullListener(full), hello)
            with anyio.fail_after(10):
                async with await anyio.connect_tcp("127.0.0.1", port) as client:
                    assert await client.receive() == b"hello"
            tg.cancel_scope.cancel()
    assert full.failures == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "httpgate"]
    assert len(warnings) == 2 and "Too many open files" in warnings[0].getMessage()
