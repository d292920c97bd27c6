"""One trajectory: generate -> parse tool calls -> run them -> append -> repeat.

Budgets, owned here as cancel scopes and counters:
- the trajectory's wall clock (``rollout.trajectory_timeout_s``): a ``move_on_after``
  around the whole loop; when it fires the trajectory ends as ``timeout`` with what
  it has so far;
- turns (``rollout.max_turns``);
- response tokens (``rollout.max_response_tokens``): each generation may produce only
  what is left, and a tool turn that would not fit ends the trajectory;
- each tool call's time, enforced by the sandbox.

Server failures that outlast the client's retries end the trajectory as ``error``;
they never raise out of :func:`run_trajectory`, so one bad request cannot take down
a batch.  Cancellation from outside propagates.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Hashable
from typing import Protocol

import anyio
import msgspec

from backends import BackendClosed, BackendError, ChatCompletion, Completion, SamplingParams
from sandbox import Sandbox

from .chat import ChatTokenizer
from .config import RolloutConfig
from .toolcall import count_answer_blocks, parse_tool_calls, render_tool_turn
from .tools import TOOLS, execute, execute_all, system_prompt
from .types import FinishReason, Problem, ToolResult, Trajectory, Turn


class TokenBackend(Protocol):
    """``prompt_ids`` is lent for the call: read it, never keep or mutate it.
    ``session`` names the trajectory, so a server pool can keep its turns on one
    server (prefix-cache hits); single servers ignore it.  A backend may also have
    ``end_session(session)``, called when the trajectory has no more turns."""

    async def generate(
        self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion: ...


class ChatBackend(Protocol):
    async def chat(
        self, messages: list[dict[str, str]], *, max_tokens: int, sampling: SamplingParams
    ) -> ChatCompletion: ...


class _Generated(msgspec.Struct):
    text: str
    num_tokens: int
    finish: str
    weight_version: int


class _TokenConversation:
    """Token ids in and out; the training path.

    ``ids`` holds prompt and response in one list that only grows, so each turn
    sends it without copying; the backend must not keep or mutate it.  The loss
    mask and logprobs are kept as one piece per turn and joined once at the end:
    growing two more long lists on every turn of 10,000 trajectories costs more
    than the rest of the turn's bookkeeping.  The transcript is kept as text pieces
    too: decoding the whole response once more at the end cost ~15% of a turn.
    """

    def __init__(self, backend: TokenBackend, tokenizer: ChatTokenizer, prompt_ids: list[int], session: Hashable) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.session = session
        self.prompt = prompt_ids
        self.ids = list(prompt_ids)
        self.prompt_len = len(self.ids)
        self.pieces: list[list[float] | int] = []  # a generation's logprobs, or a tool turn's length
        self.texts: list[str] = []

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

    def record(self, c: Completion) -> _Generated:
        ids = c.token_ids
        self.ids += ids
        self.pieces.append(c.logprobs)
        eos = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        text = self.tokenizer.decode(ids[:-1] if eos else ids)
        self.texts.append(text + self.tokenizer.eos_text if eos else text)
        return _Generated(text, len(ids), c.finish_reason, c.weight_version)

    def tool_turn_size(self, content: str) -> tuple[int, tuple[list[int], str]]:
        ids = self.tokenizer.encode_tool_turn(content)
        return len(ids), (ids, content)

    def append_tool_turn(self, turn: tuple[list[int], str]) -> None:
        ids, content = turn
        self.ids += ids
        self.pieces.append(len(ids))
        self.texts.append(self.tokenizer.tool_turn_text(content))

    def transcript(self) -> str:
        return "".join(self.texts)


class _ChatConversation:
    """Text messages in and out; evaluation of chat-only endpoints.  Lengths are
    the server's completion-token counts plus a character estimate of tool turns."""

    def __init__(self, backend: ChatBackend, messages: list[dict[str, str]]) -> None:
        self.backend = backend
        self.messages = list(messages)
        self.parts: list[str] = []
        self.length = 0

    def request(self, max_tokens: int, sampling: SamplingParams) -> Awaitable[ChatCompletion]:
        return self.backend.chat(self.messages, max_tokens=max_tokens, sampling=sampling)

    def record(self, c: ChatCompletion) -> _Generated:
        self.messages.append({"role": "assistant", "content": c.text})
        self.parts.append(c.text)
        self.length += c.completion_tokens
        return _Generated(c.text, c.completion_tokens, c.finish_reason, 0)

    def tool_turn_size(self, content: str) -> tuple[int, str]:
        return len(content) // 4 + 8, content  # ~4 characters per token, plus the template

    def append_tool_turn(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        self.parts.append(content)

    def transcript(self) -> str:
        return "\n".join(self.parts)


def _turn(start: int, gen: _Generated, latency_s: float, results: list[ToolResult] | None = None, appended: int = 0) -> Turn:
    return Turn(
        start=start,
        num_generated=gen.num_tokens,
        num_appended=appended,
        weight_version=gen.weight_version,
        finish=gen.finish,  # type: ignore[arg-type]
        tool_results=results or [],
        latency_s=latency_s,
        num_answer_blocks=count_answer_blocks(gen.text),
    )


def problem_messages(problem: Problem, config: RolloutConfig) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt(config.system_prompt) if config.list_tools else config.system_prompt or ""},
        {"role": "user", "content": problem.problem},
    ]


async def run_trajectory(
    problem: Problem,
    sample_index: int,
    *,
    backend: TokenBackend | ChatBackend,
    sandbox: Sandbox,
    config: RolloutConfig,
    tokenizer: ChatTokenizer | None,
    sampling: SamplingParams,
    prompt_ids: list[int] | None = None,
) -> tuple[Trajectory, str]:
    """Run one trajectory to its end.

    Returns the trajectory (reward unset) and the text the model generated across
    its turns (without tool responses), which is what gets graded.

    Args:
        prompt_ids: the problem's prompt, already encoded by ``tokenizer`` (the engine
            encodes each problem once for all its samples); never mutated, and it
            becomes the trajectory's ``prompt_ids``: the samples of a group share it.

    Raises:
        BackendClosed: the backend was closed under the trajectory (shutdown).
    """
    conv: _TokenConversation | _ChatConversation
    if tokenizer is None:
        conv = _ChatConversation(backend, problem_messages(problem, config))  # type: ignore[arg-type]
    else:
        if prompt_ids is None:
            prompt_ids = tokenizer.encode_prompt(problem_messages(problem, config))
        conv = _TokenConversation(backend, tokenizer, prompt_ids, (problem.id, sample_index))  # type: ignore[arg-type]
    turns: list[Turn] = []
    model_text: list[str] = []
    finish: FinishReason = "turn_limit"
    error = ""
    in_tools: tuple[int, _Generated, float] | None = None
    with anyio.move_on_after(config.trajectory_timeout_s) as budget:
        for turn_index in range(config.max_turns):
            remaining = config.max_response_tokens - conv.length
            if remaining <= 0:
                finish = "token_budget"
                break
            start, t0 = conv.length, time.monotonic()
            try:
                # request, then record: one coroutine frame fewer to cross on every wakeup
                gen = conv.record(await conv.request(remaining, sampling))  # type: ignore[arg-type]
            except BackendClosed:
                raise
            except BackendError as exc:
                finish, error = "error", f"{type(exc).__name__}: {exc}"
                break
            model_text.append(gen.text)
            calls = parse_tool_calls(gen.text, TOOLS)
            if gen.finish != "stop" or not calls or turn_index == config.max_turns - 1:
                turns.append(_turn(start, gen, time.monotonic() - t0))
                if gen.finish == "length":
                    finish = "token_budget"
                elif gen.finish == "abort":
                    finish, error = "error", "the server aborted the generation repeatedly"
                elif not calls:
                    finish = "answer"
                # else: a call on the last allowed turn could never be answered
                break
            # Kept aside while the tools run, so a timeout during them still records the turn.
            in_tools = (start, gen, time.monotonic() - t0)
            if len(calls) == 1:  # the common case: no task group, and one frame fewer per wakeup
                results = [await execute(calls[0], sandbox, timeout=config.tool_timeout_s, max_chars=config.max_tool_output_chars)]
            else:
                results = await execute_all(
                    calls,
                    sandbox,
                    timeout=config.tool_timeout_s,
                    max_chars=config.max_tool_output_chars,
                    max_calls=config.max_tool_calls_per_turn,
                )
            in_tools = None
            size, payload = conv.tool_turn_size(render_tool_turn([r.output for r in results]))
            fits = conv.length + size < config.max_response_tokens
            if fits:
                conv.append_tool_turn(payload)  # type: ignore[arg-type]
            turns.append(_turn(start, gen, time.monotonic() - t0, results, size if fits else 0))
            if not fits:
                finish = "token_budget"
                break
    if budget.cancelled_caught:
        finish = "timeout"
        if in_tools is not None:
            turns.append(_turn(*in_tools))  # its tokens count; its calls were never answered
    tokens = isinstance(conv, _TokenConversation)
    end_session = getattr(backend, "end_session", None)  # a pool frees the KV it holds for a next turn
    if end_session is not None and tokens:
        end_session(conv.session)  # type: ignore[union-attr]
    trajectory = Trajectory(
        problem_id=problem.id,
        sample_index=sample_index,
        prompt_ids=conv.prompt if tokens else [],  # type: ignore[union-attr]
        response_ids=conv.response_ids if tokens else [],  # type: ignore[union-attr]
        loss_mask=conv.loss_mask if tokens else [],  # type: ignore[union-attr]
        logprobs=conv.logprobs if tokens else [],  # type: ignore[union-attr]
        turns=turns,
        finish_reason=finish,
        weight_version=min((t.weight_version for t in turns), default=0),
        response_text=conv.transcript(),
        error=error,
    )
    return trajectory, "\n".join(model_text)
