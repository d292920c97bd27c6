"""One connection of :class:`httpgate.Http11Transport`: where it goes, how it is made
(TCP, and TLS for ``https``), and what it carries (its h11 state)."""

from __future__ import annotations

import functools
import ssl
from typing import Final, final

import anyio
import h11
import httpx
from anyio.abc import ByteStream

__all__ = ["Connection", "Origin", "connect", "host_header", "origin_of"]

Origin = tuple[str, str, int]
"""``(scheme, host, port)``: connections are kept per origin."""

_PORTS: Final = {"http": 80, "https": 443}


@final
class Connection:
    """A socket (TLS-wrapped for ``https``) and its HTTP/1.1 state; one request's
    at a time."""

    __slots__ = ("h11", "origin", "stream")

    def __init__(self, origin: Origin, stream: ByteStream) -> None:
        self.origin = origin
        self.stream = stream
        self.h11 = h11.Connection(our_role=h11.CLIENT)


def origin_of(url: httpx.URL) -> Origin:
    """Where ``url``'s connection goes.

    Raises:
        httpx.UnsupportedProtocol: neither ``http`` nor ``https``.
    """
    scheme = url.scheme
    default = _PORTS.get(scheme)
    if default is None:
        raise httpx.UnsupportedProtocol(f"Http11Transport speaks http and https, not {scheme!r}")
    return scheme, url.host, url.port or default


def host_header(origin: Origin) -> bytes:
    scheme, host, port = origin
    name = f"[{host}]" if ":" in host else host  # an IPv6 literal goes in brackets
    return name.encode() if port == _PORTS[scheme] else f"{name}:{port}".encode()


async def connect(origin: Origin, timeout_s: float | None, ssl_context: ssl.SSLContext | None) -> ByteStream:
    """A new connection to ``origin``, within ``timeout_s`` (the TLS handshake
    included); ``ssl_context`` for ``https`` (default :func:`default_ssl_context`).

    Not standard-compatible TLS: closing sends no ``close_notify`` and waits for
    nothing (a close must not wait on the server), and a server that ends without
    one reads as an end of stream (HTTP frames its messages itself).

    Raises:
        httpx.ConnectTimeout: not connected (or not through the handshake) in time.
        httpx.ConnectError: refused, unreachable, or the TLS handshake failed
            (a certificate that does not verify included).
    """
    scheme, host, port = origin
    try:
        with anyio.fail_after(timeout_s):
            if scheme == "https":
                context = ssl_context or default_ssl_context()
                return await anyio.connect_tcp(host, port, ssl_context=context, tls_standard_compatible=False)
            return await anyio.connect_tcp(host, port)
    except TimeoutError as exc:
        raise httpx.ConnectTimeout(f"connecting to {scheme}://{host}:{port} timed out") from exc
    except (OSError, anyio.BrokenResourceError) as exc:  # ssl.SSLError is an OSError
        raise httpx.ConnectError(f"{scheme}://{host}:{port}: {type(exc).__name__}: {exc}") from exc


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default context (its CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``),
    made once: loading the CA bundle takes tens of ms, and every client of every
    server would otherwise load it again."""
    return httpx.create_ssl_context()
