"""HTTP/1.1 for our services on a network, both ends.

The server (:class:`HTTPServer`): a shared secret on every route, caps on what a
client may send, timeouts, a connection cap and graceful shutdown.  Used by the
sandbox service (``sandbox.SandboxService``) and by the fleet's authenticating
proxy (``backends.serve_proxy``).

The client (:class:`Http11Transport`, an ``httpx`` transport): used by every
client of those services and of the inference servers, instead of httpx's
default transport, whose shielded close can hang past any cancellation.

:func:`serve_listeners`: ``anyio``'s ``listener.serve`` without the connection
that a cancelled accept loses on asyncio; the server accepts through it, and so
do the tests' server doubles.

``sandbox`` and ``backends`` never import each other, so this lives apart from
both.  It imports neither, nor ``rstar2_async``.
"""

from ._accept import serve_listeners
from ._client import Http11Transport, transport_for
from ._secret import check_bind, is_loopback, read_secret, resolve_secret
from ._server import HTTPError, HTTPLimits, HTTPRequest, HTTPResponse, HTTPServer

__all__ = [
    "HTTPError",
    "HTTPLimits",
    "HTTPRequest",
    "HTTPResponse",
    "HTTPServer",
    "Http11Transport",
    "check_bind",
    "is_loopback",
    "read_secret",
    "resolve_secret",
    "serve_listeners",
    "transport_for",
]
