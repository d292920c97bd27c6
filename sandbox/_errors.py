"""The sandbox's exceptions, one tree.

    SandboxError
    ├── SandboxUnavailable      this machine cannot jail (no bubblewrap, user namespaces
    │                           off, no Landlock/seccomp) and ``insecure`` was not set
    ├── SandboxClosed           the pool or client was used after it closed (your doing)
    ├── SandboxBroken           it failed underneath you: workers cannot start, ...
    │                           (the cause is chained with ``from``)
    └── ServiceError            the HTTP service answered something we cannot use
        └── ServiceUnavailable  no service address could be reached (after retries)

Nothing the *code* does raises: a call that crashes, loops or attacks the jail is an
:class:`ExecResult` status.  ``ValueError`` is raised for bad arguments (a timeout
outside ``(0, sandbox.max_timeout_s]``), ``RuntimeError`` for lifecycle misuse
(entering a pool twice).
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every sandbox error."""


class SandboxUnavailable(SandboxError):
    """The machine cannot provide the jail the configuration asks for.

    The message names each missing piece and how to fix it (or to set
    ``sandbox.insecure = true`` knowingly).
    """


class SandboxClosed(SandboxError):
    """The pool or client was closed (by its owner) before or during the call."""


class SandboxBroken(SandboxError):
    """The sandbox failed underneath its user; ``__cause__`` says why."""


class ServiceError(SandboxError):
    """The sandbox HTTP service answered with something unusable (status, body)."""


class ServiceUnavailable(ServiceError):
    """No configured service address answered, after the configured retries."""
