from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstar2_async.rollout import CallError, parse_tool_calls, render_exec_result, render_tool_turn, truncate_middle
from rstar2_async.rollout.tools import python
from rstar2_async.types import ToolCall
from sandbox import ExecResult

NAME = python.name
TOOLS = {NAME: python}


def call(arguments: object, name: str = NAME) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_one_valid_call() -> None:
    [c] = parse_tool_calls("think\n" + call({"code": "print(1)"}) + "\n", TOOLS)
    assert c == ToolCall(NAME, {"code": "print(1)"})


def test_several_blocks_are_several_calls_in_order() -> None:
    text = call({"code": "a"}) + " and " + call({"code": "b", "input": "x"})
    assert [c.arguments["code"] for c in parse_tool_calls(text, TOOLS)] == ["a", "b"]


def test_no_call() -> None:
    assert parse_tool_calls("<answer>\\boxed{3}</answer>", TOOLS) == []


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"name": "a"} {"name": "b"}</tool_call>', "exactly one JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        (call({"code": "x"}, name="shell"), "unknown tool 'shell'"),
        (call({}), "missing argument(s) code"),
        (call({"code": 5}), "must be a string"),
        (call({"code": "x", "cwd": "/"}), "unknown argument 'cwd'"),
        (call("not an object"), "must be a JSON object"),
        ("<tool_call>" + json.dumps({"name": NAME, "arguments": {"code": "x"}}), "unclosed"),
        ('<tool_call>{"name": "\ufffd"}</tool_call>', "not valid UTF-8"),
    ],
)
def test_malformed_calls_become_errors(text: str, fragment: str) -> None:
    [c] = parse_tool_calls(text, TOOLS)
    assert isinstance(c, CallError)
    assert fragment in c.message


def test_unclosed_call_after_a_good_one() -> None:
    text = call({"code": "a"}) + "<tool_call>{"
    good, bad = parse_tool_calls(text, TOOLS)
    assert isinstance(good, ToolCall) and isinstance(bad, CallError)


def test_string_encoded_arguments_and_code_fences_are_accepted() -> None:
    args = json.dumps({"code": "print(2)"})
    text = f'<tool_call>```json\n{{"name": "{NAME}", "arguments": {json.dumps(args)}}}\n```</tool_call>'
    [c] = parse_tool_calls(text, TOOLS)
    assert c == ToolCall(NAME, {"code": "print(2)"})


@given(st.text(max_size=300))
def test_parser_never_raises(text: str) -> None:
    for c in parse_tool_calls(text, TOOLS):
        assert isinstance(c, (ToolCall, CallError))


@given(st.text(max_size=500), st.integers(min_value=20, max_value=400))
def test_truncate_middle_keeps_head_and_tail(text: str, limit: int) -> None:
    out = truncate_middle(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        head = limit // 2
        assert out.startswith(text[:head]) and out.endswith(text[len(text) - (limit - head):])
        assert f"[{len(text) - limit} characters truncated]" in out


def test_render_tool_turn_wraps_each_result() -> None:
    assert render_tool_turn(["1", "2"]) == "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"


def test_render_exec_result() -> None:
    assert render_exec_result(ExecResult("ok", "42\n")) == "42"
    assert render_exec_result(ExecResult("ok")) == "(no output)"
    assert "timed out" in render_exec_result(ExecResult("timeout", "partial"))
    assert "ZeroDivisionError" in render_exec_result(ExecResult("error", "", "ZeroDivisionError: x", 1))
