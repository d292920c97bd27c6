"""Chat templates compiled the way transformers compiles them, without transformers.

transformers (5.x, ``utils/chat_template_utils.py``) renders a model's template in a
sandboxed Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension, a ``{% generation %}`` tag (it marks assistant text for
masks; it renders its body unchanged), and these names: ``raise_exception``,
``strftime_now`` (Llama 3.2's template dates its system prompt with it), and a
``tojson`` filter that is plain ``json.dumps`` with ``ensure_ascii=False`` (Jinja's own
escapes ``<``, ``>``, ``&`` and ``'`` for HTML, which would change every tool listing
and every JSON-encoded tool result).  vLLM's chat endpoint renders through
transformers, so a prompt rendered here is the one a chat request would get.

Importing this does not import transformers (which imports torch: seconds of start-up
for evaluation-only users).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2.nodes
from jinja2 import Template, TemplateError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["compile_chat_template"]


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def compile_chat_template(source: str) -> Template:
    """The template ``source`` compiled as transformers compiles chat templates.

    Raises:
        jinja2.TemplateSyntaxError: ``source`` is not a valid Jinja template.
    """
    extensions = [_Generation, "jinja2.ext.loopcontrols"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)
