"""Tools the model can call: the :class:`Tool` protocol and the two rStar2 ships.

A tool is any object with a ``name``, a ``description``, JSON-schema ``parameters``
and ``async call(arguments, context) -> ToolOutput``.  Tools are chosen in config by
import path, ``[rollout] tools = ["rstar2_async.rollout.tools:python", "mypkg.tools:wolfram"]``
(the object, or a class or function that makes one); the system prompt lists them,
the model calls them as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Shipped (rStar2-Agent's two tools):

- :data:`python`: stateless Python with standard input (``code``, ``input``); every
  call is a fresh process in the jailed sandbox pool.
- :data:`jupyter`: notebook-style Python (``code``); each call sees the variables,
  functions and imports of the trajectory's earlier calls of this tool.  As in
  rStar2's released code, the earlier cells are replayed with their output
  suppressed (and their errors ignored) before the new cell runs, and the value of
  the new cell's last expression is shown.  The replay keeps every guarantee of the
  stateless pool (a fresh jailed process per call, nothing left between calls); its
  cost is that a cell's time budget covers the replay too, and code with side effects
  (random numbers, clocks) is re-run rather than remembered.

Guarantees the agent loop adds around every tool: arguments were checked against
``parameters`` (required keys present, no unknown keys, strings where the schema says
``string``) before ``call``; the output is truncated in the middle; cancellation of
the trajectory propagates into ``call``.

What the model did wrong, a tool answers with a status the model reads (``error``,
``timeout``, ...).  What failed underneath it, a tool answers with status
``internal`` or raises: that is an infrastructure failure, never shown to the model
(it would learn from the cluster's weather); the trajectory stops there, marked
(``Trajectory.infra_failure``, with the text as the reason), and is rolled again or
left out of training.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, final, runtime_checkable

import msgspec

from sandbox import ExecResult, Sandbox

from ..types import ToolCall, ToolStatus

__all__ = ["JupyterTool", "PythonTool", "Tool", "ToolContext", "ToolOutput", "jupyter", "python", "render_exec_result"]


class ToolOutput(msgspec.Struct, frozen=True):
    """What a tool returns: the text the model reads and how the call ended
    (``ok``; or ``error``, ``timeout``, ``killed``, ... which count as tool errors for
    GRPO-RoC's penalty).  ``internal``: the infrastructure failed, not the model; the
    text is then the reason, for the run's records (the model never reads it)."""

    text: str
    status: ToolStatus = "ok"


@final
@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a call may use besides its arguments.

    ``history`` holds the trajectory's earlier decoded calls, in the order the model
    made them (calls earlier in the same turn included), so a stateful tool can
    rebuild its state; ``timeout_s`` is the call's time budget (``rollout.tool_timeout_s``),
    which the tool must keep to (the sandbox does so for code).
    """

    sandbox: Sandbox
    timeout_s: float
    history: Sequence[ToolCall] = ()
    trajectory: tuple[str, int] = ("", 0)
    """``(problem id, sample index)``."""


@runtime_checkable
class Tool(Protocol):
    """A tool the model may call.  ``parameters`` is a JSON schema of an object
    (``properties``, ``required``).  ``call`` runs one call; many run at once, from
    many trajectories, so a tool keeps no per-call state on itself (use ``context``)."""

    name: str
    description: str
    parameters: dict[str, Any]

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput: ...


def render_exec_result(result: ExecResult) -> str:
    """What the model reads for one sandbox result: stdout, then stderr, then why it
    stopped if it did not finish normally.  For ``internal`` (the sandbox failed, which
    the model never reads): the sandbox's reason alone."""
    if result.status == "internal":
        return result.stderr.strip() or "[sandbox] failed without a reason"
    parts = [result.stdout] if result.stdout else []
    if result.stderr:
        parts.append(result.stderr)
    if result.status == "timeout":
        parts.append("Error: execution timed out")
    elif result.status == "killed":
        parts.append("Error: the process was killed (resource limit)")
    elif result.status == "output_limit":
        parts.append("Error: output limit exceeded")
    elif not parts:
        parts.append("(no output)" if result.ok else f"Error: exit code {result.exit_code}")
    return "\n".join(p.rstrip("\n") for p in parts)


@final
class PythonTool:
    """rStar2's stateless Python: run ``code`` with ``input`` on standard input."""

    name: Final = "execute_python_code_with_standard_io"
    description: Final = (
        "Execute Python code with standard input and capture standard output. "
        "Print what you need to see; the last expression is not echoed."
    )
    parameters: Final = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python code to run."},
            "input": {"type": "string", "description": "Text passed to the program on standard input."},
        },
        "required": ["code"],
    }

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        result = await context.sandbox.run(arguments["code"], stdin=arguments.get("input", ""), timeout=context.timeout_s)
        return ToolOutput(render_exec_result(result), result.status)


_NOTEBOOK: Final = textwrap.dedent(
    '''
    def _notebook(earlier, cell):
        import ast, contextlib, io, sys, traceback
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        for code in earlier:  # the state of earlier calls, rebuilt silently
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(code, "<cell>", "exec"), namespace)
            except BaseException:
                pass
        try:
            tree = ast.parse(cell, "<cell>")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
        except SystemExit as exc:
            sys.exit(exc.code)
        except BaseException:
            kind, error, tb = sys.exc_info()
            while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
                tb = tb.tb_next  # the model's frames only, not the replay machinery
            traceback.print_exception(kind, error, tb, file=sys.stderr)
            sys.exit(1)

    '''
)
"""The program each notebook call runs; the cells follow as literals (``repr`` of a
string is a Python literal of it, whatever it contains)."""


@final
class JupyterTool:
    """rStar2's notebook-style Python: each call sees the state of the trajectory's
    earlier calls of this tool (see the module docstring for how)."""

    name: Final = "jupyter_code"
    description: Final = (
        "Run Python code in a notebook: each call sees the variables, functions and imports "
        "of your earlier calls of this tool, and the value of the last expression is shown."
    )
    parameters: Final = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python code of the next notebook cell."}},
        "required": ["code"],
    }

    def program(self, cell: str, history: Sequence[ToolCall]) -> str:
        """The program that replays ``history``'s cells of this tool, then runs ``cell``."""
        earlier = [c.arguments["code"] for c in history if c.name == self.name]
        return f"{_NOTEBOOK}_notebook({earlier!r}, {cell!r})\n"

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        result = await context.sandbox.run(self.program(arguments["code"], context.history), timeout=context.timeout_s)
        return ToolOutput(render_exec_result(result), result.status)


python: Final = PythonTool()
"""The stateless Python tool, as ``rstar2_async.rollout.tools:python``."""
jupyter: Final = JupyterTool()
"""The notebook-style Python tool, as ``rstar2_async.rollout.tools:jupyter``."""
