"""Code execution for the model's tool calls: a warm, jailed worker pool.

The rollout core depends only on :class:`Sandbox` (the protocol) and :class:`ExecResult`.
"""

from ._protocol import Sandbox
from ._types import ExecResult, Status

__all__ = ["ExecResult", "Sandbox", "Status"]
