"""rStar2-Agent's tool-call format: parsing the model's calls, rendering the results.

The model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (any
number per turn); the results come back in one user turn, each inside
``<tool_response>...</tool_response>`` (in token mode as ``tool`` messages through the
model's own chat template, which for Qwen-style templates is this very format); the
final answer sits in ``<answer>...\\boxed{...}...</answer>``.

Parsing never raises: anything the model gets wrong becomes a :class:`CallError`
whose message goes back to the model as a tool error, so it can correct itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import msgspec

from ..types import ToolCall

if TYPE_CHECKING:
    from .tools import Tool

OPEN: Final = "<tool_call>"
CLOSE: Final = "</tool_call>"
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_JSON: Final = json.JSONDecoder()  # building one costs as much as decoding a call


class CallError(msgspec.Struct, frozen=True):
    """A call that could not be decoded; ``message`` is shown to the model."""

    message: str


def parse_tool_calls(text: str, tools: Mapping[str, Tool]) -> list[ToolCall | CallError]:
    """Every call in one assistant turn, in order, each decoded or explained.

    Errors (each becomes one tool error): text that is not valid UTF-8 (it decodes
    to U+FFFD), invalid JSON, more than one JSON value in a block, a value that is
    not ``{"name", "arguments"}``, an unknown tool, missing or mistyped arguments,
    and an opening tag with no closing tag.
    """
    # str.find rather than a regex: this runs on every turn of every trajectory.
    # Like a non-greedy regex, each block ends at the first closing tag after it.
    calls: list[ToolCall | CallError] = []
    start = text.find(OPEN)
    while start >= 0:
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            calls.append(CallError(f"unclosed {OPEN}: every call must end with {CLOSE}"))
            break
        calls.append(_decode(text[start + len(OPEN):end], tools))
        start = text.find(OPEN, end + len(CLOSE))
    return calls


def _decode(body: str, tools: Mapping[str, Tool]) -> ToolCall | CallError:
    if "\ufffd" in body:
        return CallError("the tool call contains bytes that are not valid UTF-8")
    body = body.strip()
    fenced = _FENCE_RE.match(body) if body.startswith("```") else None
    if fenced:
        body = fenced.group(1)
    try:
        value = msgspec.json.decode(body)  # the common, well-formed case, several times faster
    except (msgspec.DecodeError, UnicodeEncodeError):
        # The standard library decides the rest (it also takes NaN and lone surrogates),
        # and its error names the position in words the model can act on.
        try:
            value, end = _JSON.raw_decode(body)
        except json.JSONDecodeError as exc:
            return CallError(f"the tool call is not valid JSON ({exc.msg} at char {exc.pos})")
        if body[end:].strip():
            return CallError(f"put exactly one JSON object in each {OPEN} block")
    if not isinstance(value, dict):
        return CallError('a tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = value.get("name")
    if not isinstance(name, str):
        return CallError('the tool call has no "name" string')
    spec = tools.get(name)
    if spec is None:
        return CallError(f"unknown tool {name!r}; available: {', '.join(sorted(tools))}")
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models JSON-encode the arguments twice
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return CallError('"arguments" must be a JSON object')
    if not isinstance(arguments, dict):
        return CallError('"arguments" must be a JSON object')
    missing = [k for k in spec.parameters.get("required", ()) if k not in arguments]
    if missing:
        return CallError(f"{name}: missing argument(s) {', '.join(missing)}")
    properties = spec.parameters.get("properties", {})
    for key, arg in arguments.items():
        if key not in properties:
            return CallError(f"{name}: unknown argument {key!r}")
        if properties[key].get("type") == "string" and not isinstance(arg, str):
            return CallError(f"{name}: argument {key!r} must be a string")
    return ToolCall(name=name, arguments=arguments)


def truncate_middle(text: str, limit: int) -> str:
    """Cut ``text`` to at most about ``limit`` characters, keeping its head and tail.

    The end of a traceback and the start of a listing both matter, so the middle
    goes; the marker says how much.  Text within the limit is returned unchanged.
    """
    if len(text) <= limit:
        return text
    marker = f"\n...[{len(text) - limit} characters truncated]...\n"
    head = limit // 2
    return text[:head] + marker + text[len(text) - (limit - head):]


def render_tool_turn(outputs: list[str]) -> str:
    """The user turn carrying all results of one assistant turn, in call order, in
    rStar2's format (chat mode, and SFT transcripts; token mode renders the results
    as ``tool`` messages through the model's template)."""
    return "\n".join(f"<tool_response>\n{out}\n</tool_response>" for out in outputs)


def count_answer_blocks(text: str) -> int:
    return text.count("<answer>")
