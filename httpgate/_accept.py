"""Accepting connections without losing one to a cancelled accept.

``anyio``'s ``SocketListener.serve`` accepts through ``loop.sock_accept`` on
asyncio.  When a connection arrives in the same loop pass that cancels that
accept (a server stopping, a chaos test's server going down), the cancelled
accept takes the connection anyway, raises ``InvalidStateError`` in the loop and
drops the socket without closing it: the client hangs on a connection nobody
serves (CPython gh-153761, fixed upstream in July 2026, not in the 3.11 we run).  Here
a task waits until a listener is readable and accepts without waiting, so a
cancellation lands only in the wait: a connection that arrives then stays in
the backlog and is refused when the listener closes.  The same code runs on trio.
Like trio's ``serve_listeners``, running out of file descriptors waits and
retries rather than ending the server.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

log = logging.getLogger("httpgate")
_GONE = {errno.ECONNABORTED, errno.EPROTO}  # the client left between readable and accept
_FULL = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_FULL_RETRY_S = 0.1


async def serve_listeners(
    listener: MultiListener[SocketStream],
    handler: Callable[[SocketStream], Awaitable[None]],
    task_group: TaskGroup | None = None,
) -> None:
    """Run ``handler`` on each connection of each of ``listener``'s sockets, in
    ``task_group`` (else in one of its own), until cancelled: ``listener.serve``
    without the lost connection."""
    async with anyio.create_task_group() as tg:
        for one in listener.listeners:
            tg.start_soon(_accept_forever, one, handler, task_group or tg)


async def _accept_forever(
    listener: SocketListener, handler: Callable[[SocketStream], Awaitable[None]], task_group: TaskGroup
) -> None:
    raw = listener.extra(SocketAttribute.raw_socket)
    while True:
        await anyio.wait_readable(raw)
        try:
            sock, _ = raw.accept()
        except (BlockingIOError, InterruptedError):  # the client gave up before we got to it
            continue
        except OSError as exc:
            if exc.errno in _GONE:
                continue
            if exc.errno not in _FULL:
                raise
            # out of descriptors or buffers: the connection waits in the backlog until
            # ours close, where listener.serve would end the server
            log.warning("cannot accept a connection (%s): retrying in %.1f s", exc, _FULL_RETRY_S)
            await anyio.sleep(_FULL_RETRY_S)
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small answers go out at once
        with anyio.CancelScope(shield=True):  # accepted: it becomes a stream that the handler closes
            stream = await SocketStream.from_socket(sock)
        task_group.start_soon(handler, stream)
