"""``open_sandbox``: the sandbox a ``[sandbox]`` section describes, a local pool or
remote services.

    async with open_sandbox(config) as sandbox:   # SandboxPool, or SandboxClient with urls
        result = await sandbox.run("print(1)")
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final

from httpgate import read_secret

from ._client import SandboxClient
from ._config import SandboxConfig
from ._errors import ServiceError
from ._pool import SandboxPool

log = logging.getLogger("sandbox")

SECRET_ENV: Final = "RSTAR2_SANDBOX_SECRET"
"""Where ``rstar2 sandbox serve`` and a client without ``sandbox.api_key_file`` read the secret."""


def open_sandbox(config: SandboxConfig) -> AbstractAsyncContextManager[SandboxPool | SandboxClient]:
    """What ``config`` asks for, to enter with ``async with``: a :class:`SandboxClient`
    over ``config.urls`` (on entering, every service's health is asked, with the
    secret), else a local :class:`SandboxPool`; closed when the block ends, however
    it ends.

    Raises:
        ValueError: (here) ``sandbox.api_key_file`` cannot be read or is empty (the
            message names the field).
        ServiceUnavailable: (entering) no service of ``sandbox.urls`` answers.
        ServiceError: (entering) a service refused the secret.
        SandboxUnavailable, SandboxBroken: (entering) the local pool cannot start.
    """
    if not config.urls:
        return SandboxPool(config)
    try:
        secret = read_secret(file=config.api_key_file, env=SECRET_ENV)
    except ValueError as e:
        raise ValueError(f"sandbox.api_key_file: {e}") from e
    return _checked(SandboxClient(config.urls, api_key=secret))


@asynccontextmanager
async def _checked(client: SandboxClient) -> AsyncIterator[SandboxClient]:
    failed: ServiceError | None = None
    async with client:
        try:
            down = await client.check()
        except ServiceError as e:
            failed = e  # raised once the client is closed: as itself, not in the client's task group's group
        else:
            if down:
                log.warning("sandbox services down at start (tried again after a cool-down): %s", ", ".join(down))
            yield client
    if failed is not None:
        raise failed
