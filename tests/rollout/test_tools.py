"""Tools: loading them by import path, the system prompt, a turn's calls through the
toolbox, and the notebook-style tool against the real jailed sandbox pool."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from rstar2_async.errors import PluginError
from rstar2_async.rollout import CallError, JupyterTool, Tool, Toolbox, ToolContext, ToolOutput, load_tools
from rstar2_async.rollout.tools import jupyter, python
from rstar2_async.testing import FakeSandbox
from rstar2_async.types import ToolCall
from sandbox import SandboxConfig, SandboxPool


class EchoTool:
    """A tool of a user's: echoes its argument, and what came before it."""

    name = "echo"
    description = "Echo the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput(f"{arguments['text']} after {len(context.history)}")


class BrokenTool(EchoTool):
    name = "broken"

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        raise ZeroDivisionError("a bug in the tool")


def make_echo() -> EchoTool:
    return EchoTool()


echo = EchoTool()
not_a_tool = 42


def test_load_tools_takes_an_instance_a_class_or_a_factory() -> None:
    tools = load_tools([
        "rstar2_async.rollout.tools:python", "tests.rollout.test_tools:echo",
        "tests.rollout.test_tools:BrokenTool", "tests.rollout.test_tools:make_echo",
    ])  # fmt: skip
    assert [t.name for t in tools] == [python.name, "echo", "broken", "echo"]
    assert all(isinstance(t, Tool) for t in tools)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("no_colon", 'expected "package.module:name"'),
        ("tests.rollout.no_such_module:x", "cannot import 'tests.rollout.no_such_module'"),
        ("tests.rollout.test_tools:missing", "has no 'missing'"),
        ("tests.rollout.test_tools:not_a_tool", "is not a tool"),
    ],
)
def test_a_bad_tool_path_is_a_plugin_error_naming_the_field(path: str, fragment: str) -> None:
    with pytest.raises(PluginError, match="rollout.tools\\[1\\]") as info:
        load_tools(["rstar2_async.rollout.tools:python", path])
    assert fragment in str(info.value)


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(PluginError, match="two tools are named 'echo'"):
        Toolbox([echo, make_echo()], FakeSandbox())


def test_the_system_prompt_lists_the_tools_in_order() -> None:
    prompt = Toolbox([python, jupyter, echo], FakeSandbox()).system_prompt()
    assert "<tools>" in prompt and "<answer>" in prompt
    listed = [json.loads(line)["function"]["name"] for line in prompt.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert listed == [python.name, jupyter.name, "echo"]
    assert Toolbox([echo], FakeSandbox()).system_prompt("Be brief.").startswith("Be brief.\n\n# Tools")


@pytest.mark.anyio
async def test_a_turn_keeps_the_calls_order_and_each_call_sees_the_ones_before() -> None:
    box = Toolbox([echo, BrokenTool()], FakeSandbox())
    history: list[ToolCall] = [ToolCall("echo", {"text": "earlier"})]
    calls = [
        ToolCall("echo", {"text": "a"}), CallError("bad json"), ToolCall("broken", {"text": "b"}),
        ToolCall("echo", {"text": "c"}), ToolCall("echo", {"text": "d"}),
    ]  # fmt: skip
    results = await box.run(calls, history, trajectory=("p", 0), timeout=1.0, max_chars=100, max_calls=4)
    assert [r.status for r in results] == ["ok", "invalid_call", "internal", "ok", "invalid_call"]
    assert results[0].output == "a after 1" and results[3].output == "c after 3"
    assert "ZeroDivisionError: a bug in the tool" in results[2].output
    assert "at most 4 tool calls" in results[4].output
    assert [c.arguments["text"] for c in history] == ["earlier", "a", "b", "c"]  # decoded and run, in order


def test_the_notebook_program_replays_only_its_own_cells() -> None:
    history = [ToolCall(jupyter.name, {"code": "x = 1"}), ToolCall(python.name, {"code": "y = 2"})]
    program = JupyterTool().program("print(x)", history)
    assert "'x = 1'" in program and "y = 2" not in program


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one real pool for the module; the engine's own tests cover trio


@pytest.fixture(scope="module")
async def pool() -> Any:
    async with SandboxPool(SandboxConfig(workers=1)) as pool:
        yield pool


async def notebook(pool: SandboxPool, cells: list[str]) -> list[ToolOutput]:
    history: list[ToolCall] = []
    outputs = []
    for cell in cells:
        outputs.append(await jupyter.call({"code": cell}, ToolContext(pool, 4.0, tuple(history))))
        history.append(ToolCall(jupyter.name, {"code": cell}))
    return outputs


@pytest.mark.anyio
async def test_the_notebook_sees_earlier_cells_in_the_real_sandbox(pool: SandboxPool) -> None:
    out = await notebook(pool, [
        "import math\nx = 6 * 7\nprint('defined')", "def f(n):\n    return n + x", "1 / 0", "f(math.floor(0.5))",
        "y = [x] * 2\ny", "print(undefined)",
    ])  # fmt: skip
    assert [o.status for o in out] == ["ok", "ok", "error", "ok", "ok", "error"]
    assert out[0].text == "defined" and out[1].text == "(no output)"
    assert "ZeroDivisionError: division by zero" in out[2].text and "_notebook" not in out[2].text
    assert out[3].text == "42"  # the replayed cells print nothing; the failed one is skipped
    assert out[4].text == "[42, 42]"  # the last expression's value is shown
    assert "NameError" in out[5].text and 'File "<cell>"' in out[5].text


@pytest.mark.anyio
async def test_a_slow_earlier_cell_counts_against_the_budget(pool: SandboxPool) -> None:
    history = (ToolCall(jupyter.name, {"code": "while True: pass"}),)
    with anyio.fail_after(30):
        out = await jupyter.call({"code": "print(1)"}, ToolContext(pool, 1.0, history))
    assert out.status == "timeout"
