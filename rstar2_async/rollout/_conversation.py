"""A conversation as the agent loop grows it, token by token or message by message.

:class:`TokenConversation` is the training path: token ids in and out, the loss mask
and sampling logprobs kept beside them, nothing ever re-tokenised.
:class:`ChatConversation` is text in and out, for evaluating chat-only endpoints.
Both have the same surface: ``request`` a generation, ``record`` it, size and
``append_tool_turn`` a tool turn, and the ``transcript``.
"""

from __future__ import annotations

from array import array
from collections.abc import Awaitable, Hashable

import msgspec

from backends import (
    ChatBackend,
    ChatCompletion,
    Completion,
    SamplingParams,
    TokenBackend,
    TokenIds,
)

from ._chat_template import ChatTokenizer
from ._toolcall import render_tool_turn

__all__ = ["ChatConversation", "Generated", "TokenConversation"]


class Generated(msgspec.Struct):
    text: str
    num_tokens: int
    finish: str
    weight_version: int
    at: int
    """Where `text` starts in the transcript."""


class TokenConversation:
    """Token ids in and out; the training path.

    ``ids`` holds prompt and response in one :class:`~backends.TokenIds` that only
    grows, with its JSON, so each turn sends it without copying or encoding the
    context again; the backend must not keep or mutate it.  Until the first
    generation returns it is the prompt itself (the group's samples share one
    list): a trajectory's own ids are made when it has something to add, so 16,384
    trajectories admitted at once do not each copy and encode a 1K-4K-id prompt.  The loss
    mask and logprobs are kept as one piece per turn and joined once at the end:
    growing two more long lists on every turn of 10,000 trajectories costs more
    than the rest of the turn's bookkeeping.  A turn's logprobs are kept as an
    ``array("d")``, not the completion's list: 8 bytes a token instead of a float
    object and its pointer (32), and nothing the collector walks (each young pass
    walked the ~0.8M floats of the turns since the last one).  The transcript is kept as text pieces
    too: decoding the whole response once more at the end cost ~15% of a turn.
    """

    def __init__(self, backend: TokenBackend, tokenizer: ChatTokenizer, prompt_ids: list[int], session: Hashable) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.session = session
        self.prompt = prompt_ids
        self.ids = prompt_ids  # copied by the first record (see the class docstring)
        self.prompt_len = len(prompt_ids)
        self.pieces: list[array[float] | int] = []  # a generation's logprobs, or a tool turn's length
        self.texts: list[str] = []
        self.chars = 0  # the transcript's length

    @property
    def response_ids(self) -> list[int]:
        return self.ids[self.prompt_len:]

    @property
    def loss_mask(self) -> list[int]:
        mask: list[int] = []
        for piece in self.pieces:
            mask += [0] * piece if isinstance(piece, int) else [1] * len(piece)
        return mask

    @property
    def logprobs(self) -> list[float]:
        logprobs: list[float] = []
        for piece in self.pieces:
            logprobs += [0.0] * piece if isinstance(piece, int) else piece
        return logprobs

    @property
    def length(self) -> int:
        return len(self.ids) - self.prompt_len

    def request(self, max_tokens: int, sampling: SamplingParams) -> Awaitable[Completion]:
        return self.backend.generate(self.ids, max_tokens=max_tokens, sampling=sampling, session=self.session)

    def record(self, c: Completion) -> Generated:
        ids = c.token_ids
        self._extend(ids)
        self.pieces.append(array("d", c.logprobs))
        eos = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        text = self.tokenizer.decode(ids[:-1] if eos else ids)
        at = self.chars
        self._add_text(text + self.tokenizer.eos_text if eos else text)
        return Generated(text, len(ids), c.finish_reason, c.weight_version, at)

    def tool_turn_size(self, outputs: list[str]) -> tuple[int, tuple[list[int], list[str]]]:
        ids = self.tokenizer.encode_tool_turn(outputs)
        return len(ids), (ids, outputs)

    def append_tool_turn(self, turn: tuple[list[int], list[str]]) -> None:
        ids, outputs = turn
        self._extend(ids)
        self.pieces.append(len(ids))
        self._add_text(self.tokenizer.tool_turn_text(outputs))

    def transcript(self) -> str:
        return "".join(self.texts)

    def _add_text(self, text: str) -> None:
        self.texts.append(text)
        self.chars += len(text)

    def _extend(self, ids: list[int]) -> None:
        if self.ids is self.prompt:  # the first tokens of its own: the copy
            self.ids = TokenIds(self.prompt)
        self.ids.extend(ids)


class ChatConversation:
    """Text messages in and out; evaluation of chat-only endpoints.  Lengths are
    the server's completion-token counts plus a character estimate of tool turns."""

    def __init__(self, backend: ChatBackend, messages: list[dict[str, str]]) -> None:
        self.backend = backend
        self.messages = list(messages)
        self.parts: list[str] = []
        self.chars = 0  # the transcript's length
        self.length = 0

    def request(self, max_tokens: int, sampling: SamplingParams) -> Awaitable[ChatCompletion]:
        return self.backend.chat(self.messages, max_tokens=max_tokens, sampling=sampling)

    def record(self, c: ChatCompletion) -> Generated:
        self.messages.append({"role": "assistant", "content": c.text})
        at = self._add_part(c.text)
        self.length += c.completion_tokens
        return Generated(c.text, c.completion_tokens, c.finish_reason, 0, at)

    def tool_turn_size(self, outputs: list[str]) -> tuple[int, str]:
        # One user message in rStar2's format: the server's template sees no tool role.
        content = render_tool_turn(outputs)
        return len(content) // 4 + 8, content  # ~4 characters per token, plus the template

    def append_tool_turn(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        self._add_part(content)

    def transcript(self) -> str:
        return "\n".join(self.parts)

    def _add_part(self, part: str) -> int:
        """Append `part`; where it starts in the transcript (after a newline, unless first)."""
        at = self.chars + bool(self.parts)
        self.parts.append(part)
        self.chars = at + len(part)
        return at
