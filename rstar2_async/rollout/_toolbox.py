"""The tools of a run: loaded by import path, listed in the system prompt, and run
for one turn's calls with exactly one result each, in the calls' order."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any, Final, final

import anyio

from sandbox import Sandbox

from .._plugins import load_object
from ..errors import PluginError
from ..types import ToolCall, ToolResult
from ._toolcall import CallError, truncate_middle
from .tools import Tool, ToolContext

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Toolbox", "load_tools"]

_log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a helpful assistant that solves math problems by reasoning step by step. "
    "You may run Python code to compute or check intermediate results.\n\n"
    "For each tool call, return a JSON object with the function name and arguments "
    "within <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
    "The results come back inside <tool_response></tool_response> tags.\n\n"
    "When you are done, give the final answer inside <answer></answer> tags, with the "
    "final result in \\boxed{}."
)


def _is_tool(obj: Any) -> bool:
    return not isinstance(obj, type) and isinstance(obj, Tool)


def load_tools(paths: Sequence[str], *, field: str = "rollout.tools") -> list[Tool]:
    """The tools named by import paths: each a :class:`Tool`, or a class or function
    that returns one when called without arguments.

    Raises:
        PluginError: a path does not load, does not give a tool, or two tools share a name.
    """
    tools: list[Tool] = []
    for i, path in enumerate(paths):
        where = f"{field}[{i}]"
        obj = load_object(path, field=where)
        if not _is_tool(obj) and callable(obj):
            obj = obj()
        if not _is_tool(obj):
            raise PluginError(
                f"{where}: {path!r} is not a tool: expected name, description, parameters and async call(arguments, context)"
            )
        tools.append(obj)
    return tools


@final
class Toolbox:
    """The tools one engine offers, and how a turn's calls reach them.

    Args:
        tools: the tools, in the order the system prompt lists them (names unique).
        sandbox: where code runs; lent to each call through its :class:`ToolContext`.

    Raises:
        PluginError: two tools share a name.
    """

    def __init__(self, tools: Sequence[Tool], sandbox: Sandbox) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise PluginError(f"rollout.tools: two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        self.sandbox = sandbox
        self._listing = "\n".join(
            json.dumps({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}})
            for t in tools
        )
        self._prompts: dict[str | None, str] = {}

    def system_prompt(self, base: str | None = None) -> str:
        """``base`` (or the rStar2-style default) with the tools listed inside ``<tools>``."""
        prompt = self._prompts.get(base)
        if prompt is None:
            prompt = self._prompts[base] = f"{base or DEFAULT_SYSTEM_PROMPT}\n\n# Tools\n\n<tools>\n{self._listing}\n</tools>"
        return prompt

    async def run(
        self,
        calls: Sequence[ToolCall | CallError],
        history: list[ToolCall],
        *,
        trajectory: tuple[str, int],
        timeout: float,
        max_chars: int,
        max_calls: int,
    ) -> list[ToolResult]:
        """Run one turn's calls concurrently; results keep the calls' order.

        Each call sees ``history`` plus the decoded calls before it in this turn;
        ``history`` is extended with this turn's decoded calls (the agent loop keeps it
        for the trajectory).  Calls past ``max_calls`` and calls that could not be
        decoded are answered with an error without running.  A tool that raises is
        answered ``internal`` with the exception as the text (an infrastructure
        failure: the agent loop stops the trajectory rather than show it).  Never
        raises for anything a call or its tool does; cancellation propagates.
        """
        contexts: list[ToolContext | None] = []
        for i, call in enumerate(calls):
            if isinstance(call, CallError) or i >= max_calls:
                contexts.append(None)
                continue
            contexts.append(ToolContext(self.sandbox, timeout, tuple(history), trajectory))
            history.append(call)
        if len(calls) == 1:  # the common case: no task group, and one frame fewer per wakeup
            return [await self._one(calls[0], contexts[0], max_chars, max_calls)]
        results: list[ToolResult | None] = [None] * len(calls)

        async def one(i: int) -> None:
            results[i] = await self._one(calls[i], contexts[i], max_chars, max_calls)

        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(one, i)
        return results  # type: ignore[return-value]

    async def _one(self, call: ToolCall | CallError, context: ToolContext | None, max_chars: int, max_calls: int) -> ToolResult:
        if isinstance(call, CallError):
            return ToolResult(status="invalid_call", output=f"Error: {call.message}")
        if context is None:
            return ToolResult(status="invalid_call", output=f"Error: at most {max_calls} tool calls per turn")
        start = time.monotonic()
        try:
            out = await self.tools[call.name].call(call.arguments, context)
            status, text = out.status, out.text
        except Exception as exc:  # the tool's failure, not the model's: the trajectory stops, marked
            _log.warning("tool %s failed: %s: %s", call.name, type(exc).__name__, exc, exc_info=True)
            status, text = "internal", f"the tool raised {type(exc).__name__}: {exc}"
        return ToolResult(status=status, output=truncate_middle(text, max_chars), duration_s=time.monotonic() - start, call=call)
