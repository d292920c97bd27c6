"""The model's own chat template, applied locally, without re-tokenising the past.

The prompt is rendered once by the tokenizer's template.  Each tool turn is then
appended as *new* token ids: the template's bridge between an assistant message and
the next user message (for ChatML ``<|im_end|>\\n<|im_start|>user\\n`` ...
``<|im_end|>\\n<|im_start|>assistant\\n``) is found once, by rendering a conversation
with placeholders, and tokenised once.  Earlier tokens are never decoded and
re-encoded (a known cause of training collapse: BPE merges differ across the
boundary and the learner would train on tokens the server never sampled).

Tool output is tokenised with special tokens split, so a program that prints
``<|im_end|>`` cannot end the turn or forge a message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

_ASSISTANT: Final = "\x1fASSISTANT-PLACEHOLDER\x1f"
_TOOL: Final = "\x1fTOOL-PLACEHOLDER\x1f"


class ChatTokenizer(Protocol):
    """What the agent loop needs from a tokenizer."""

    eos_token_id: int
    eos_text: str
    """``decode([eos_token_id])``."""

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the conversation so far, ending with the generation prompt."""
        ...

    def encode_tool_turn(self, content: str) -> list[int]:
        """Token ids that follow an assistant turn ended by EOS: the rest of the
        template, one user message holding ``content``, and the next generation
        prompt.  All of them are masked out of the loss."""
        ...

    def tool_turn_text(self, content: str) -> str:
        """``decode(encode_tool_turn(content))``, without encoding or decoding."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...


@final
class HFChatTokenizer:
    """A :class:`ChatTokenizer` over a Hugging Face model directory.

    It reads ``tokenizer.json`` with the Rust ``tokenizers`` library and renders the
    chat template with jinja2 the way transformers does, without importing
    transformers (which imports torch: seconds of start-up for evaluation-only users).

    Raises ``ValueError`` at construction when the template does not place message
    contents verbatim (the bridge cannot be found), rather than mis-tokenising later.
    """

    def __init__(self, tokenizer: Tokenizer, chat_template: str, *, eos_token: str, bos_token: str | None = None) -> None:
        self._tok = tokenizer
        # A second instance that treats special-token text as plain text (for tool output).
        self._literal = Tokenizer.from_str(tokenizer.to_str())
        self._literal.encode_special_tokens = True
        eos = tokenizer.token_to_id(eos_token)
        if eos is None:
            raise ValueError(f"eos token {eos_token!r} is not in the vocabulary")
        self.eos_token_id: int = eos
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = _raise_template_error
        self._template = env.from_string(chat_template)
        self._template_vars = {"eos_token": eos_token, "bos_token": bos_token or ""}
        base = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _ASSISTANT}]
        text = self.render([*base, {"role": "user", "content": _TOOL}], add_generation_prompt=True)
        if _ASSISTANT not in text or _TOOL not in text:
            raise ValueError("the chat template does not render message contents verbatim")
        bridge = text[text.index(_ASSISTANT) + len(_ASSISTANT):]
        # The model's own EOS token ends its turn and is already in the response.
        before, after = bridge.split(_TOOL)
        self._before = self._encode(before.removeprefix(eos_token))
        self._after = self._encode(after)
        self.eos_text = self.decode([eos])
        self._before_text, self._after_text = self.decode(self._before), self.decode(self._after)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> HFChatTokenizer:
        """Load from a model directory: ``tokenizer.json``, ``tokenizer_config.json``,
        and the template from ``chat_template.jinja`` or the config's ``chat_template``.

        Raises:
            FileNotFoundError: ``tokenizer.json`` is missing.
            ValueError: no chat template or no eos token is configured.
        """
        path = Path(path)
        config = json.loads((path / "tokenizer_config.json").read_text()) if (path / "tokenizer_config.json").is_file() else {}
        template_file = path / "chat_template.jinja"
        template = template_file.read_text() if template_file.is_file() else config.get("chat_template")
        if isinstance(template, list):  # named templates: use the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if not template:
            raise ValueError(f"{path}: no chat template (chat_template.jinja or tokenizer_config.json)")
        eos = _token_text(config.get("eos_token"))
        if eos is None:
            raise ValueError(f"{path}: tokenizer_config.json names no eos_token")
        return cls(
            Tokenizer.from_file(str(path / "tokenizer.json")), template, eos_token=eos, bos_token=_token_text(config.get("bos_token"))
        )

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self._template_vars)

    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return self._encode(self.render(messages, add_generation_prompt=True))

    def encode_tool_turn(self, content: str) -> list[int]:
        return self._before + self._literal.encode(content, add_special_tokens=False).ids + self._after

    def tool_turn_text(self, content: str) -> str:
        # Exact for byte-level BPE (the literal encoding round-trips); tests check it.
        return self._before_text + content + self._after_text

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)


def _token_text(token: str | dict[str, Any] | None) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _raise_template_error(message: str) -> None:
    raise TemplateError(message)
