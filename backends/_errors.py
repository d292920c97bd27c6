"""Every error the inference side raises, translated at the transport edge.

    BackendError
    ├── BackendClosed          the client or pool was closed by its owner
    ├── RequestRejected        the server answered 4xx: the request itself is wrong;
    │                          retrying cannot help
    ├── ServerError            the server broke underneath us (chained with ``from``)
    │   ├── ServerUnavailable  connection refused/reset, timeouts, 5xx, after retries
    │   ├── BadResponse        an answer that does not decode to what the API promises
    │   ├── ServerDied         a server process we launched exited after it was ready;
    │                          the message carries its exit status and log tail
    │   └── WeightSyncError    no server took the new weights (a weight sync that
    │                          reaches some servers returns and names the others)
    └── LaunchError            a server process failed to start or died while starting;
                               the message carries the tail of its log
"""

from __future__ import annotations


class BackendError(Exception):
    """Base of all inference-side errors."""


class BackendClosed(BackendError):
    """Used after close, by the code that closed it."""


class RequestRejected(BackendError):
    """The server refused the request (4xx).  ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerError(BackendError):
    """The server failed underneath the caller."""


class ServerUnavailable(ServerError):
    """No usable answer after all retries: connection errors, timeouts, or 5xx."""


class BadResponse(ServerError):
    """The answer did not decode to what the API promises."""


class LaunchError(BackendError):
    """A server process could not be started or died while starting."""


class ServerDied(ServerError):
    """A server process we launched exited after it was ready (status and log tail in the message)."""


class WeightSyncError(ServerError):
    """A weight sync could not move any server to the new weights, or was misused."""
