"""The shared secret of a service: where it comes from, and when one is required.

A secret is read from a file or an environment variable, never taken from the
command line (``ps`` shows every process's arguments to every user).  A service
bound to an address other machines can reach needs one: :func:`resolve_secret`
generates it when none is given (and announces it once), and :func:`check_bind`
refuses to serve without one unless the operator says ``insecure``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Callable
from pathlib import Path


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the port on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, secret: str | None, insecure: bool) -> None:
    """Refuse a non-loopback address without a secret unless ``insecure``.

    Raises:
        ValueError: ``host`` is reachable from other machines and there is no secret.
    """
    if secret is None and not insecure and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host} without a secret: anyone who reaches the port could use it; "
            "give a secret (a file or an environment variable) or pass --insecure"
        )


def read_secret(*, file: str | None = None, env: str | None = None) -> str | None:
    """The secret in ``file`` (surrounding whitespace dropped), else in ``$env``; None if neither is given or set.

    Raises:
        ValueError: ``file`` is an empty path, cannot be read or holds no secret.
    """
    if file is not None:
        if not file:  # a path left blank: falling back to ``$env`` would hide the mistake
            raise ValueError("secret file: the path is empty")
        try:
            text = Path(file).read_text().strip()
        except OSError as e:
            raise ValueError(f"secret file {file}: {e.strerror or e}") from e
        if not text:
            raise ValueError(f"secret file {file} is empty")
        return text
    value = os.environ.get(env, "").strip() if env else ""
    return value or None


def resolve_secret(
    host: str, *, file: str | None, env: str | None, insecure: bool, announce: Callable[[str], None]
) -> str | None:
    """The secret a service on ``host`` uses: the given one; else, off loopback and not
    ``insecure``, a new random one passed to ``announce`` (printed once, for the clients).

    Raises:
        ValueError: ``file`` cannot be read or is empty.
    """
    secret = read_secret(file=file, env=env)
    if secret is None and not insecure and not is_loopback(host):
        secret = secrets.token_urlsafe(32)
        announce(secret)
    return secret
