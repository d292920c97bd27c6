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

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

_ASSISTANT: Final = "\x1fASSISTANT-PLACEHOLDER\x1f"
_TOOL: Final = "\x1fTOOL-PLACEHOLDER\x1f"


class ChatTokenizer(Protocol):
    """What the agent loop needs from a tokenizer."""

    eos_token_id: int

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the conversation so far, ending with the generation prompt."""
        ...

    def encode_tool_turn(self, content: str) -> list[int]:
        """Token ids that follow an assistant turn ended by EOS: the rest of the
        template, one user message holding ``content``, and the next generation
        prompt.  All of them are masked out of the loss."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...


@final
class HFChatTokenizer:
    """A :class:`ChatTokenizer` over a transformers tokenizer and its chat template.

    Raises ``ValueError`` at construction when the template does not place message
    contents verbatim (the bridge cannot be found), rather than mis-tokenising later.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token_id; the chat template needs one to end turns")
        self.eos_token_id: int = int(eos)
        base = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _ASSISTANT}]
        text = tokenizer.apply_chat_template(
            [*base, {"role": "user", "content": _TOOL}], tokenize=False, add_generation_prompt=True
        )
        if _ASSISTANT not in text or _TOOL not in text:
            raise ValueError("the chat template does not render message contents verbatim")
        bridge = text[text.index(_ASSISTANT) + len(_ASSISTANT):]
        eos_text = tokenizer.convert_ids_to_tokens(self.eos_token_id)
        # The model's own EOS token ends its turn and is already in the response.
        before, after = bridge.split(_TOOL)
        before = before.removeprefix(eos_text)
        self._before: list[int] = self._encode(before, split_special=False)
        self._after: list[int] = self._encode(after, split_special=False)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> HFChatTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)))

    @property
    def hf_tokenizer(self) -> Any:
        return self._tok

    def _encode(self, text: str, *, split_special: bool) -> list[int]:
        return list(self._tok(text, add_special_tokens=False, split_special_tokens=split_special)["input_ids"])

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        text = self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self._encode(text, split_special=False)

    def encode_tool_turn(self, content: str) -> list[int]:
        return self._before + self._encode(content, split_special=True) + self._after

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)
