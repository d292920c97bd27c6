"""The model's own chat template, applied locally, without re-tokenising the past.

The prompt is rendered once by the tokenizer's template.  Each tool turn is then
appended as *new* token ids: the template's framing of tool results (``tool``
messages, grouped as the template groups them) is found once by rendering
placeholders (:class:`~rstar2_async.rollout._tool_frame.ToolFrame`), and each turn's
results are placed into it.  Earlier tokens are never decoded and re-encoded (a known
cause of training collapse: BPE merges differ across the boundary and the learner
would train on tokens the server never sampled).

Token-exact: the ids a trajectory accumulates (prompt, generated ids ending in the eos
token, tool turns, generated ids...) are the ids transformers' ``apply_chat_template``
gives the whole conversation, with each assistant message's text as its content
(tool calls inline, as the model wrote them) and each tool result a ``tool`` message,
wherever the generated ids are the tokenizer's own encoding of their text.  By
design they differ where: the model sampled a non-canonical tokenisation (the
server's ids are kept, never re-encoded); a tool result contains special-token text
(kept as plain text, so output cannot forge a turn); or the template re-renders an
earlier assistant turn differently from how it was generated (Llama 3's ``trim`` of
the assistant's text; templates that drop earlier reasoning, as Qwen3's does before
the last user query: in a tool loop every assistant turn comes after it, so none is
dropped).  Tools are listed in the system prompt in rStar2's format, not through the
template's ``tools`` argument: the model is asked for ``<tool_call>`` blocks either way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol, final

from tokenizers import Tokenizer

from ..errors import ConfigError
from ._jinja import compile_chat_template
from ._tool_frame import ToolFrame


class ChatTokenizer(Protocol):
    """What the agent loop needs from a tokenizer."""

    eos_token_id: int
    eos_text: str
    """``decode([eos_token_id])``."""

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the conversation so far, ending with the generation prompt."""
        ...

    def encode_tool_turn(self, outputs: Sequence[str]) -> list[int]:
        """Token ids that follow an assistant turn ended by EOS: the rest of the
        template's turn, one ``tool`` message per output (grouped as the template
        groups them), and the next generation prompt.  All of them are masked out of
        the loss."""
        ...

    def tool_turn_text(self, outputs: Sequence[str]) -> str:
        """``decode(encode_tool_turn(outputs))``, without encoding or decoding."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...


@final
class HFChatTokenizer:
    """A :class:`ChatTokenizer` over a Hugging Face model directory.

    It reads ``tokenizer.json`` with the Rust ``tokenizers`` library and renders the
    chat template with jinja2 the way transformers does (:mod:`._jinja`), without
    importing transformers (which imports torch: seconds of start-up for
    evaluation-only users).

    Args:
        variables: the template's other variables (``bos_token``, ``pad_token``...).
        source: where the template came from, for messages.

    Raises:
        ConfigError: at construction, when the template cannot express tool results
            (see :class:`~rstar2_async.rollout._tool_frame.ToolFrame`; the message names
            ``rollout.chat_template``), rather than mis-tokenising later; or when the
            eos token is not in the vocabulary.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat_template: str,
        *,
        eos_token: str,
        variables: dict[str, str] | None = None,
        source: str = "the chat template",
    ) -> None:
        self._tok = tokenizer
        # A second instance that treats special-token text as plain text (for tool output).
        literal = Tokenizer.from_str(tokenizer.to_str())
        literal.encode_special_tokens = True
        eos = tokenizer.token_to_id(eos_token)
        if eos is None:
            raise ConfigError(f"{source}: the eos token {eos_token!r} is not in the vocabulary")
        self.eos_token_id: int = eos
        self.eos_text = self.decode([eos])
        self.source = source
        self._template = compile_chat_template(chat_template)
        self._variables = {"bos_token": "", **(variables or {}), "eos_token": eos_token}
        render = partial(self.render, add_generation_prompt=True)
        self.tool_frame = ToolFrame(render, eos_text=eos_token, where=source)
        self._encode_turn = self.tool_frame.compile(tokenizer, literal)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, chat_template: str | Path | None = None) -> HFChatTokenizer:
        """Load from a model directory: ``tokenizer.json``, ``tokenizer_config.json``,
        and the template from ``chat_template.jinja``, ``chat_template.json`` or the
        config's ``chat_template`` (transformers' order), or from the file
        ``chat_template`` (``rollout.chat_template``) instead.

        Raises:
            FileNotFoundError: ``tokenizer.json`` is missing.
            ConfigError: no chat template or no eos token is configured, the
                ``chat_template`` file is missing, or the template cannot express tool
                results (the messages name what to set).
        """
        path = Path(path)
        config = json.loads((path / "tokenizer_config.json").read_text()) if (path / "tokenizer_config.json").is_file() else {}
        template, source = _template_of(path, config, chat_template)
        eos = _token_text(config.get("eos_token"))
        if eos is None:
            raise ConfigError(f"{path}: tokenizer_config.json names no eos_token")
        variables = {k: t for k, v in config.items() if k.endswith("_token") and isinstance(t := _token_text(v), str)}
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        return cls(tokenizer, template, eos_token=eos, variables=variables, source=source)

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self._variables)

    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return self._encode(self.render(messages, add_generation_prompt=True))

    def encode_tool_turn(self, outputs: Sequence[str]) -> list[int]:
        return self._encode_turn(outputs)

    def tool_turn_text(self, outputs: Sequence[str]) -> str:
        # Exact for byte-level BPE (the literal encoding round-trips); tests check it.
        return self.tool_frame.text(outputs)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def describe(self) -> str:
        """One line for a run's start: the template's source and how a turn of two
        tool results continues after the model's eos token."""
        how = "" if self.tool_frame.encoding == "as is" else f", each result's text through {self.tool_frame.encoding}"
        return f"chat template: {self.source}{how}; two tool results render as {self.tool_turn_text(['…', '…'])!r}"


def _template_of(path: Path, config: dict[str, Any], override: str | Path | None) -> tuple[str, str]:
    """The template text and where it came from."""
    if override is not None:
        file = Path(override)
        if not file.is_file():
            raise ConfigError(f"rollout.chat_template: {file} is not a file (a Jinja chat template)")
        return file.read_text(), f"rollout.chat_template ({file})"
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(), str(path / "chat_template.jinja")
    template = None
    if (path / "chat_template.json").is_file():
        template = json.loads((path / "chat_template.json").read_text()).get("chat_template")
        where = "chat_template.json"
    if not template:
        template, where = config.get("chat_template"), "tokenizer_config.json"
    if isinstance(template, list):  # named templates: use the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if not template:
        raise ConfigError(
            f"{path}: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json); "
            "set rollout.chat_template to a Jinja template file"
        )
    return template, str(path / where)


def _token_text(token: str | dict[str, Any] | None) -> str | None:
    return token.get("content") if isinstance(token, dict) else token
