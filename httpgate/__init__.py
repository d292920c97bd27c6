"""A small HTTP/1.1 server for services on a network: a shared secret on every route,
caps on what a client may send, timeouts, a connection cap and graceful shutdown.

Used by the sandbox service (``sandbox.SandboxService``) and by the fleet's
authenticating proxy (``backends.serve_proxy``); those two packages never import
each other, so it lives apart from both.  It imports neither.
"""

from ._secret import check_bind, is_loopback, read_secret, resolve_secret
from ._server import HTTPError, HTTPLimits, HTTPRequest, HTTPResponse, HTTPServer

__all__ = [
    "HTTPError",
    "HTTPLimits",
    "HTTPRequest",
    "HTTPResponse",
    "HTTPServer",
    "check_bind",
    "is_loopback",
    "read_secret",
    "resolve_secret",
]
