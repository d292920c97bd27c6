"""The Python tool of rStar2-Agent, the system prompt that lists it, and the bridge
from a decoded call to the sandbox."""

from __future__ import annotations

import functools
import json
import time
from typing import Final

import anyio

from sandbox import ExecResult, Sandbox

from .toolcall import CallError, ToolSpec, truncate_middle
from .types import ToolCall, ToolResult

PYTHON_TOOL: Final = ToolSpec(
    name="execute_python_code_with_standard_io",
    description=(
        "Execute Python code with standard input and capture standard output. "
        "Print what you need to see; the last expression is not echoed."
    ),
    parameters={
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python code to run."},
            "input": {"type": "string", "description": "Text passed to the program on standard input."},
        },
        "required": ["code"],
    },
)
TOOLS: Final = {PYTHON_TOOL.name: PYTHON_TOOL}

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


@functools.cache
def system_prompt(base: str | None = None) -> str:
    """The system prompt with the tool list appended inside ``<tools>``."""
    listing = "\n".join(json.dumps(t.to_openai()) for t in TOOLS.values())
    return f"{base or DEFAULT_SYSTEM_PROMPT}\n\n# Tools\n\n<tools>\n{listing}\n</tools>"


def render_exec_result(result: ExecResult) -> str:
    """What the model reads for one sandbox result: stdout, then stderr, then why it
    stopped if it did not finish normally."""
    parts = [result.stdout] if result.stdout else []
    if result.stderr:
        parts.append(result.stderr)
    if result.status == "timeout":
        parts.append("Error: execution timed out")
    elif result.status == "killed":
        parts.append("Error: the process was killed (resource limit)")
    elif result.status == "output_limit":
        parts.append("Error: output limit exceeded")
    elif result.status == "internal":
        parts.append("Error: the sandbox failed; try again")
    elif not parts:
        parts.append("(no output)" if result.ok else f"Error: exit code {result.exit_code}")
    return "\n".join(p.rstrip("\n") for p in parts)


async def execute(call: ToolCall | CallError, sandbox: Sandbox, *, timeout: float, max_chars: int) -> ToolResult:
    """Run one call and return its single result.  Never raises for anything the
    call or the code does; cancellation of the caller propagates."""
    if isinstance(call, CallError):
        return ToolResult(status="invalid_call", output=f"Error: {call.message}")
    start = time.monotonic()
    result = await sandbox.run(call.arguments["code"], stdin=call.arguments.get("input", ""), timeout=timeout)
    return ToolResult(
        status=result.status,
        output=truncate_middle(render_exec_result(result), max_chars),
        duration_s=time.monotonic() - start,
        call=call,
    )


async def execute_all(
    calls: list[ToolCall | CallError], sandbox: Sandbox, *, timeout: float, max_chars: int, max_calls: int
) -> list[ToolResult]:
    """Run a turn's calls concurrently; results keep the calls' order.  Calls past
    ``max_calls`` are answered with an error without running."""
    results: list[ToolResult | None] = [None] * len(calls)

    async def one(i: int) -> None:
        if i >= max_calls:
            results[i] = ToolResult(status="invalid_call", output=f"Error: at most {max_calls} tool calls per turn")
        else:
            results[i] = await execute(calls[i], sandbox, timeout=timeout, max_chars=max_chars)

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return results  # type: ignore[return-value]
