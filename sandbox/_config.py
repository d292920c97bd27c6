"""``SandboxConfig``: the ``[sandbox]`` section of a run's TOML config.

Self-contained (the core embeds it as is).  Every field has bounds; a value out
of bounds raises ``ValueError`` (``msgspec.ValidationError`` when decoded) naming
the dotted field, e.g. ``sandbox.workers: expected int >= 1, got 0``.
"""

from __future__ import annotations

import os
from typing import Any, final

import msgspec

_DEFAULT_WARMUP = """\
import sympy
sympy.factorint(2**64 - 1)
sympy.simplify(sympy.sin(sympy.Symbol("x")) ** 2 + sympy.cos(sympy.Symbol("x")) ** 2)
sympy.Rational(1, 3) + sympy.sqrt(2)
"""


@final
class SandboxConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How the sandbox runs code: a local pool, or remote services (``urls``).
    Travels: TOML -> core -> pool (and service) or client."""

    urls: list[str] = []
    """Remote sandbox services (``rstar2 sandbox serve``) to run the code on instead of
    a local pool, e.g. ``["http://cpu-node-1:8089", "http://cpu-node-2:8089"]``: calls
    are batched and the batches go to the services in turn, skipping one that failed
    for a few seconds and retrying a failed batch on the others
    (:class:`sandbox.SandboxClient`).  The pool's own fields below then apply to the
    services' command line, not here.  Empty: a local pool."""

    api_key_file: str | None = None
    """With ``urls``: a file holding the services' shared secret (the one they were
    started with); unset: ``$RSTAR2_SANDBOX_SECRET``, else no secret.  A missing or
    empty file is an error, never a run without the secret."""

    workers: int | None = None
    """Warm workers (one call at a time each).  None: two per usable CPU core (a worker
    and its call's process take turns, so one per core leaves cores idle: on 2 cores
    the soak's mix ran ~40% more calls/s with 4 workers than with 2, and no more with 6)."""

    spares: int = 1
    """Started workers kept waiting beside the ``workers``: one that dies or hangs is
    replaced by a spare at once, and a new spare starts in the background, so a
    replacement costs its slot nothing (starting one, with numpy and sympy, takes
    about a second of CPU).  Each costs a worker's memory.  0: start replacements
    on demand, the slot waiting."""

    recycle_after: int = 2000
    """Calls a worker serves before it is replaced by a fresh one (bounds any slow
    leak in the warm interpreter; fork isolates calls from each other anyway)."""

    max_queue: int = 10_000
    """Calls that may wait for a worker; one more is answered at once with
    ``internal`` ("queue full") instead of waiting without bound."""

    max_timeout_s: float = 60.0
    """Largest per-call ``timeout`` accepted by ``run``."""

    hang_grace_s: float = 5.0
    """How long past a call's timeout the pool waits for its worker to answer
    before declaring the worker hung, killing it and retrying the call once."""

    start_timeout_s: float = 120.0
    """Time a worker has to start and import ``preload`` (sympy takes ~1 s alone;
    many workers starting on few cores take longer)."""

    memory_mb: int = 2048
    """Address-space limit of a call (RLIMIT_AS), MiB.  Includes the ~400 MiB of
    mappings the warm interpreter already holds with numpy and sympy loaded."""

    max_output_bytes: int = 65536
    """Cap on stdout + stderr of a call; past it the call is killed with status
    ``output_limit`` and each stream is truncated to the cap."""

    max_file_mb: int = 16
    """Largest file a call may write (RLIMIT_FSIZE), MiB."""

    max_open_files: int = 64
    """Open descriptors a call may hold (RLIMIT_NOFILE)."""

    scratch_mb: int = 64
    """Size of each worker's private scratch tmpfs, MiB: bounds what a call can
    write in total ("fill the disk")."""

    max_code_bytes: int = 1 << 20
    """Largest ``code`` accepted; larger is answered with status ``error``."""

    max_stdin_bytes: int = 1 << 20
    """Largest ``stdin`` accepted; larger is answered with status ``error``."""

    preload: list[str] = msgspec.field(
        default_factory=lambda: ["math", "fractions", "itertools", "collections", "numpy", "sympy"]
    )
    """Modules each worker imports once, before it forks calls."""

    packages: list[str] = msgspec.field(default_factory=lambda: ["numpy", "sympy", "mpmath"])
    """Third-party top-level packages visible (read-only) in the jail; everything
    else of the host's site-packages is hidden.  ``<name>.libs`` comes along."""

    warmup: str = _DEFAULT_WARMUP
    """Code each worker runs once after ``preload`` so that lazy caches (sympy's
    prime sieve, ...) are filled before forking instead of in every call."""

    python: str = ""
    """Interpreter of the workers; empty: the one running the pool."""

    insecure: bool = False
    """Run even where the machine cannot jail: missing layers (bubblewrap, user
    namespaces, Landlock, seccomp) are skipped with a logged warning instead of
    refusing to start.  Never set this where the code is untrusted."""

    def __post_init__(self) -> None:
        for name, lo, kind in _BOUNDS:
            value = getattr(self, name)
            if value is None and name == "workers":
                continue
            if value < lo or (kind == "float>" and value <= 0):
                op = "> 0" if kind == "float>" else f">= {lo}"
                raise ValueError(f"sandbox.{name}: expected {kind.rstrip('>')} {op}, got {value!r}")
        if self.hang_grace_s > 3600:
            raise ValueError(f"sandbox.hang_grace_s: expected float <= 3600, got {self.hang_grace_s!r}")
        for i, url in enumerate(self.urls):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"sandbox.urls[{i}]: expected an http:// or https:// address, got {url!r}")
        for name in self.preload + self.packages:
            if not name.replace("_", "a").replace(".", "a").isalnum():
                raise ValueError(f"sandbox.preload/packages: not a module name: {name!r}")

    @property
    def resolved_workers(self) -> int:
        """``workers``, with None resolved to two per usable core."""
        if self.workers is not None:
            return self.workers
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        return 2 * max(cores, 1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SandboxConfig:
        """Build from a TOML table.

        Raises:
            msgspec.ValidationError: unknown field, wrong type or out of bounds.
        """
        return msgspec.convert(data, cls)


# (field, lowest allowed value, kind for the message)
_BOUNDS: tuple[tuple[str, float, str], ...] = (
    ("workers", 1, "int"),
    ("spares", 0, "int"),
    ("recycle_after", 1, "int"),
    ("max_queue", 1, "int"),
    ("max_timeout_s", 0, "float>"),
    ("hang_grace_s", 0, "float>"),
    ("start_timeout_s", 0, "float>"),
    ("memory_mb", 256, "int"),
    ("max_output_bytes", 1024, "int"),
    ("max_file_mb", 1, "int"),
    ("max_open_files", 16, "int"),
    ("scratch_mb", 1, "int"),
    ("max_code_bytes", 1, "int"),
    ("max_stdin_bytes", 0, "int"),
)
