"""Every error the core raises for something a user can act on, under one root.

    Rstar2Error
    ├── ConfigError            a config file or value is invalid; the message names the
    │   │                      dotted field, the expected type or bound, and the value
    │   └── PluginError        a ``"pkg.module:name"`` in the config (a tool, a reward)
    │                          cannot be imported or is not what that field needs
    ├── DatasetError           a data set is missing or has a bad line (file and line named)
    ├── GraderBrokenError      a grading worker could not be started (math-verify or the
    │                          interpreter is missing or broken); chained from the cause
    ├── ShardError             a rollout worker process could not start, or died more
    │                          often in a row than it may be restarted
    └── TrainError             a run cannot start or continue; the message says what to change
        └── CheckpointWriteError  a checkpoint could not be written (most often a full
                               disk); the previous complete checkpoints are untouched

The inference side has its own tree (``backends.BackendError``) and so has the sandbox
(``sandbox.SandboxError``); ``rstar2`` prints one line for any of the three roots and
keeps the traceback for everything else (a bug).

Each class also derives from the built-in exception that code written before this tree
caught (``ValueError`` for bad input, ``RuntimeError`` for a broken service, ``OSError``
for a failed write), so ``except ValueError`` around a config load keeps working.
"""

from __future__ import annotations

__all__ = [
    "CheckpointWriteError",
    "ConfigError",
    "DatasetError",
    "GraderBrokenError",
    "PluginError",
    "Rstar2Error",
    "ShardError",
    "TrainError",
]


class Rstar2Error(Exception):
    """Root of the core's errors: a problem with the input or the machine, not a bug."""


class ConfigError(Rstar2Error, ValueError):
    """A config file or value is invalid.  The message names the dotted field path,
    the expected type or bound, and the value that was given."""


class PluginError(ConfigError):
    """An import path in the config (``"pkg.module:name"``) cannot be loaded, or names
    an object that is not what the field needs (a tool, a reward function)."""


class DatasetError(Rstar2Error, ValueError):
    """A data set is missing or has a bad line; the message names file and line."""


class GraderBrokenError(Rstar2Error, RuntimeError):
    """A grading worker could not be started (the interpreter or math-verify is
    missing or broken, or start-up overran its limit).  Chained from the cause.  A
    worker that hangs or dies while grading is not this error: that grading is 0.0
    and the worker is replaced."""


class ShardError(Rstar2Error, RuntimeError):
    """A worker process of a sharded rollout could not start (its factory raised, or
    it exited before it was ready), or it died more times in a row than it may be
    restarted.  The message names the worker, its exit code and the end of its
    stderr; so do ``shard``, ``exit_code`` and ``stderr_tail``."""

    def __init__(self, message: str, *, shard: int, exit_code: int | None, stderr_tail: str) -> None:
        super().__init__(message)
        self.shard = shard
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class TrainError(Rstar2Error, RuntimeError):
    """The run cannot start or continue; the message says what to change."""


class CheckpointWriteError(TrainError, OSError):
    """A checkpoint could not be written (most often: the disk is full); the previous
    complete checkpoints are untouched."""
