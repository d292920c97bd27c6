"""How a model's chat template frames tool results, found once by rendering probes.

The agent appends a tool turn as new token ids after the model's own tokens; it never
renders and re-tokenises the conversation.  For that it needs three pieces of the
template's text: what comes between the assistant's end-of-turn token and the first
result (``pre``), between two results of one turn (``mid``), and after the last one,
up to and including the next generation prompt (``post``).  A ChatML/Qwen2.5 template
groups one turn's results into one user turn::

    pre  = <|im_end|>\\n<|im_start|>user\\n<tool_response>\\n
    mid  = \\n</tool_response>\\n<tool_response>\\n
    post = \\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n

and a Llama 3.1 template gives each result its own ``ipython`` turn (``mid`` = ``post``'s
end of turn + ``pre``'s header).  The pieces are read off renders of a conversation whose
contents are placeholders, then checked by predicting a longer, two-round render with
other placeholders: a template whose framing depends on anything else is refused.  How
a result's text enters the template is found the same way: as is, through ``tojson``
(Llama 3.1 and 3.2 pass a string result through ``tojson``: it arrives as a JSON
string), or ``trim``-med.

Token ids: the template's added tokens (``<|im_start|>``, ``<tool_response>``...) are
placed as ids, and every stretch of text between two of them, frame text and results
together, is encoded in one piece.  That is what a tokenizer does to the whole
rendered conversation (it splits at added tokens first), so a tool turn's ids are the
ids the conversation's own tokenisation gives them; a check at construction compares
the two on probe results and refuses the tokenizer if they differ.  Results are encoded with special tokens read as plain
text, so a program that prints ``<|im_end|>`` cannot end the turn or forge a message:
there, and only there, the ids differ from re-tokenising the rendered text, by design.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Final, final

import msgspec
from jinja2 import TemplateError
from tokenizers import Tokenizer

from ..errors import ConfigError

__all__ = ["ToolFrame"]

Render = Callable[[list[dict[str, str]]], str]
"""Renders messages, with the generation prompt."""

# Delimited by a private-use character: not whitespace (a template may trim), kept as
# is by tojson, and in no real text.
_ASSISTANT: Final = ("\ue000ASSISTANT-1\ue000", "\ue000ASSISTANT-2\ue000")
# Leading and trailing whitespace, a quote and a newline: as is, trimmed and
# JSON-encoded, each reads differently.  The check uses other whitespace again.
_PROBES: Final = (" \ue000TOOL-1\"\ue000\n", " \ue000TOOL-2\"\ue000\n")
_CHECKS: Final = ("\t\ue000CHECK-1\\\ue000  ", "\n\ue000CHECK-2\ue000", "\ue000CHECK-3\n\ue000 ")
_FIX: Final = (
    "set rollout.chat_template to a Jinja template file that renders role 'tool' messages "
    "(README: train your own model)"
)


def _as_is(text: str) -> str:
    return text


def _tojson(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # transformers' tojson


ENCODINGS: Final[dict[str, Callable[[str], str]]] = {"as is": _as_is, "tojson": _tojson, "trim": str.strip}
"""How a template may place a tool result's text (tried in this order)."""


class _Piece(msgspec.Struct, frozen=True):
    """Frame text cut at added tokens: ``lead`` text, then the ids from the first added
    token to the last (``None``: none, all of it is ``lead``), then ``trail`` text."""

    lead: str
    fixed: list[int] | None
    trail: str


@final
class ToolFrame:
    """A template's framing of one tool turn, as text and as token ids.

    Raises:
        ConfigError: the template cannot express tool results (rendering them raises,
            drops or rewrites their text, frames them inconsistently, or ends an
            assistant turn with something other than the eos token); the message says
            why and names ``rollout.chat_template``.
    """

    def __init__(self, render: Render, *, eos_text: str, where: str) -> None:
        system, user = {"role": "system", "content": "S"}, {"role": "user", "content": "Q"}
        head = _render(render, [system, user], where)
        pre, mid, post, encoding = _find(render, head, [system, user], where)
        if not pre.startswith(eos_text):
            raise ConfigError(
                f"{where}: the chat template ends an assistant turn with {pre[:40]!r}, not with the eos token "
                f"{eos_text!r} the model stops on; {_FIX}"
            )
        self.pre, self.mid, self.post = pre.removeprefix(eos_text), mid, post
        self.encoding = encoding
        """How a result's text enters the template: a key of :data:`ENCODINGS`."""
        self._encode_content = ENCODINGS[encoding]
        self._where = where

    def text(self, contents: Sequence[str]) -> str:
        """The tool turn as the template renders it, after the eos token."""
        e = self._encode_content
        return self.pre + self.mid.join(e(c) for c in contents) + self.post

    def compile(self, tokenizer: Tokenizer, literal: Tokenizer) -> Callable[[Sequence[str]], list[int]]:
        """A function from a turn's results to its token ids.

        ``tokenizer`` reads special tokens as such, ``literal`` as plain text (the same
        vocabulary with ``encode_special_tokens``).  The frame is cut at the added
        tokens (special or not: a tokenizer matches them before anything else), so
        only the text between the two around each result is encoded per turn.

        Raises:
            ConfigError: the ids differ from the tokenizer's own encoding of the turn's
                text (an added token that takes the whitespace beside it, ``lstrip`` or
                ``rstrip``, cannot be placed that way).
        """
        cuts = [
            t.content for t in tokenizer.get_added_tokens_decoder().values()
            if not (t.lstrip or t.rstrip or t.single_word) and (t.special or not t.normalized)
        ]  # fmt: skip
        longest_first = sorted(cuts, key=len, reverse=True)
        split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if cuts else None

        def ids(text: str) -> list[int]:
            return literal.encode(text, add_special_tokens=False).ids if text else []

        def piece(text: str) -> _Piece:
            parts = split.split(text) if split else [text]
            if len(parts) == 1:
                return _Piece(text, None, "")
            fixed: list[int] = []
            for i, part in enumerate(parts[1:-1], 1):
                fixed += [tokenizer.token_to_id(part)] if i % 2 else ids(part)
            return _Piece(parts[0], fixed, parts[-1])

        pre, mid, post = piece(self.pre), piece(self.mid), piece(self.post)
        # pre follows the eos token (special) and post's trail the model's next tokens:
        # both stand alone; every other stretch of text runs into a result.
        head, start = ([], pre.lead) if pre.fixed is None else (ids(pre.lead) + pre.fixed, pre.trail)
        tail = [] if post.fixed is None else post.fixed + ids(post.trail)
        e = self._encode_content

        def encode(contents: Sequence[str]) -> list[int]:
            out, run = list(head), start
            for i, content in enumerate(contents):
                if i and mid.fixed is None:
                    run += mid.lead
                elif i:
                    out += ids(run + mid.lead) + mid.fixed  # type: ignore[operator]
                    run = mid.trail
                run += e(content)
            return out + ids(run + post.lead) + tail

        for probe in (["0"], ["a b\n", " (no output)"]):
            if encode(probe) != tokenizer.encode(self.text(probe), add_special_tokens=False).ids:
                raise ConfigError(
                    f"{self._where}: a tool turn's ids cannot be placed as the tokenizer encodes its text "
                    f"{self.text(probe)!r} (an added token that takes the whitespace beside it?); {_FIX}"
                )
        return encode


def _render(render: Render, messages: list[dict[str, str]], where: str) -> str:
    try:
        return render(messages)
    except (TemplateError, TypeError, KeyError, AttributeError, IndexError) as exc:
        roles = "/".join(m["role"] for m in messages)
        raise ConfigError(f"{where}: the chat template fails on a conversation of {roles} ({exc}); {_FIX}") from exc


def _find(render: Render, head: str, start: list[dict[str, str]], where: str) -> tuple[str, str, str, str]:
    """``pre``, ``mid``, ``post`` (``pre`` still with the eos) and the encoding."""
    a1, a2 = ({"role": "assistant", "content": a} for a in _ASSISTANT)
    tools = [{"role": "tool", "content": p} for p in _PROBES]
    one, two = (_bridge(_render(render, [*start, a1, *tools[:k]], where), head, where) for k in (1, 2))
    checks = [{"role": "tool", "content": c} for c in _CHECKS]
    check = _render(render, [*start, a1, checks[0], checks[1], a2, checks[2]], where)
    for name, e in ENCODINGS.items():
        p1, p2 = e(_PROBES[0]), e(_PROBES[1])
        at = one.find(p1)
        if at < 0 or not two.startswith(one[: at + len(p1)]) or not two.endswith(p2 + one[at + len(p1):]):
            continue
        pre, post = one[:at], one[at + len(p1):]
        mid = two[len(pre) + len(p1): len(two) - len(p2) - len(post)]
        c1, c2, c3 = (e(c) for c in _CHECKS)
        if check == head + _ASSISTANT[0] + pre + c1 + mid + c2 + post + _ASSISTANT[1] + pre + c3 + post:
            return pre, mid, post, name
    if not any(e(_PROBES[0]) in one for e in ENCODINGS.values()):
        why = "leaves a tool result's text out (or changes it beyond tojson or trim)"
    else:
        why = "frames tool results differently from turn to turn or by their number"
    raise ConfigError(
        f"{where}: the chat template {why}: after an assistant turn, one tool result renders as {one!r}; {_FIX}"
    )


def _bridge(text: str, head: str, where: str) -> str:
    """What follows the assistant's text in ``text``, a render that goes on from ``head``."""
    if not text.startswith(head + _ASSISTANT[0]):
        raise ConfigError(
            f"{where}: the chat template does not render a conversation as its prompt (with the generation "
            f"prompt) followed by the assistant's text; it renders {text[:300]!r}; {_FIX}"
        )
    return text[len(head) + len(_ASSISTANT[0]):]
