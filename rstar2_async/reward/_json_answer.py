"""The answer field of a JSON reply, as evaluations that ask for one get it
(ZeroEval's ``{"reasoning": "...", "answer": "369"}``): lenient mode reads it before
the reasoning, whose prose ("which is 369", "multiples of 12") is no answer."""

from __future__ import annotations

import json
import re

__all__ = ["json_answer"]

_JSON_ANSWER = re.compile(
    r"""(["'])(?:final[ _]?)?answer\1\s*:\s*(?:"((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'|([^\s,}"'][^,}\n]*))""",
    re.IGNORECASE,
)
"""The answer field of a JSON (or Python dict) reply, as evaluations that ask for one
get it (``{"reasoning": "...", "answer": "369"}``): a string, or a bare value."""


def json_answer(text: str) -> str | None:
    """The last JSON answer field's value, unescaped as JSON where its only escapes are
    ``\\\\``, ``\\"``, ``\\/`` and ``\\uXXXX`` (valid JSON's ``"10,\\\\!080"``,
    ``"\\u03c0"``); else only its quotes, since a model's raw LaTeX (``"\\frac12"``) would
    lose ``\\f`` to a form feed.  Without it, prose in the reasoning field ("which is 369",
    "multiples of 12") was read instead."""
    fields = list(_JSON_ANSWER.finditer(text))
    if not fields:
        return None
    m = fields[-1]
    value = _json_string(m[2]) if m[2] is not None else m[3] if m[3] is not None else m[4]
    return value.strip().removeprefix('"').removesuffix('"').strip()  # quoted twice: "\"€77\""


_JSON_ESCAPED = re.compile(r'(?:[^\\"]|\\(?:["\\/]|u[0-9a-fA-F]{4}))*')


def _json_string(raw: str) -> str:
    if _JSON_ESCAPED.fullmatch(raw):
        try:
            return json.loads(f'"{raw}"')
        except ValueError:  # a raw line break or control character
            pass
    return raw.replace('\\"', '"')
