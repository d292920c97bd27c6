"""One trajectory: generate -> parse tool calls -> run them -> append -> repeat.

Budgets, owned here as cancel scopes and counters:
- the trajectory's wall clock (``rollout.trajectory_timeout_s``): a ``move_on_after``
  around the whole loop; when it fires the trajectory ends as ``timeout`` with what
  it has so far;
- turns (``rollout.max_turns``);
- response tokens (``rollout.max_response_tokens``): each generation may produce only
  what is left, and a tool turn that would not fit ends the trajectory;
- each tool call's time (``rollout.tool_timeout_s``), which each tool keeps (the
  sandbox enforces it for code).

Infrastructure failures end the trajectory as ``error`` with ``infra_failure`` set
(``Trajectory``): a generation that outlasts the pool's failovers (or keeps being
aborted), and a tool call answered ``internal`` (the sandbox queue full, a worker
dead twice, no sandbox service reachable, the tool raising).  The model is never
shown such a tool result: the turn is recorded with its calls, nothing is appended,
and the trajectory stops (the engine may roll the sample again).  They never raise
out of :func:`run_trajectory`, so one bad request cannot take down a batch.
Cancellation from outside propagates.
"""

from __future__ import annotations

import itertools
import time
from typing import Final

import anyio
import msgspec

from backends import (
    BackendClosed,
    BackendError,
    ChatBackend,
    SamplingParams,
    TokenBackend,
)

from ..config import RolloutConfig
from ..types import FinishReason, Problem, ToolCall, ToolResult, Trajectory, Turn
from ._chat_template import ChatTokenizer
from ._conversation import ChatConversation, Generated, TokenConversation
from ._seeds import derive_seed
from ._toolbox import Toolbox
from ._toolcall import count_answer_blocks, parse_tool_calls

_SESSIONS: Final = itertools.count()
"""Numbers a trajectory's pool session: one problem may run at two stream
positions at once (streaming, at an epoch's end), so its id and sample index alone
would name two trajectories' sessions alike."""

__all__ = ["problem_messages", "run_trajectory"]


def _turn(start: int, gen: Generated, latency_s: float, results: list[ToolResult] | None = None, appended: int = 0) -> Turn:
    return Turn(
        start=start,
        num_generated=gen.num_tokens,
        num_appended=appended,
        weight_version=gen.weight_version,
        finish=gen.finish,  # type: ignore[arg-type]
        tool_results=results or [],
        latency_s=latency_s,
        num_answer_blocks=count_answer_blocks(gen.text),
        text_span=(gen.at, gen.at + len(gen.text)),
    )


def problem_messages(problem: Problem, config: RolloutConfig, toolbox: Toolbox) -> list[dict[str, str]]:
    """The conversation a trajectory starts from: the system prompt (listing the
    toolbox's tools unless ``config.list_tools`` is off) and the problem."""
    system = toolbox.system_prompt(config.system_prompt) if config.list_tools else config.system_prompt or ""
    return [{"role": "system", "content": system}, {"role": "user", "content": problem.problem}]


async def run_trajectory(
    problem: Problem,
    sample_index: int,
    *,
    backend: TokenBackend | ChatBackend,
    toolbox: Toolbox,
    config: RolloutConfig,
    tokenizer: ChatTokenizer | None,
    sampling: SamplingParams,
    prompt_ids: list[int] | None = None,
) -> Trajectory:
    """Run one trajectory to its end; its reward unset.  What gets graded is its
    ``model_text``: the text the model generated across its turns, without tool
    responses.

    Args:
        sampling: the trajectory's; with a seed, each turn's request is seeded from
            it and the turn's index.
        prompt_ids: the problem's prompt, already encoded by ``tokenizer`` (the engine
            encodes each problem once for all its samples); never mutated, and it
            becomes the trajectory's ``prompt_ids``: the samples of a group share it.

    Raises:
        BackendClosed: the backend was closed under the trajectory (shutdown).
    """
    conv: TokenConversation | ChatConversation
    if tokenizer is None:
        conv = ChatConversation(backend, problem_messages(problem, config, toolbox))  # type: ignore[arg-type]
    else:
        if prompt_ids is None:
            prompt_ids = tokenizer.encode_prompt(problem_messages(problem, config, toolbox))
        session = (problem.id, sample_index, next(_SESSIONS))
        conv = TokenConversation(backend, tokenizer, prompt_ids, session)  # type: ignore[arg-type]
    turns: list[Turn] = []
    finish: FinishReason = "turn_limit"
    error = infra = ""
    in_tools: tuple[int, Generated, float] | None = None
    history: list[ToolCall] = []  # every decoded call so far: what a stateful tool rebuilds from
    with anyio.move_on_after(config.trajectory_timeout_s) as budget:
        for turn_index in range(config.max_turns):
            remaining = config.max_response_tokens - conv.length
            if remaining <= 0:
                finish = "token_budget"
                break
            start, t0 = conv.length, time.monotonic()
            try:
                # request, then record: one coroutine frame fewer to cross on every wakeup
                turn_sampling = sampling
                if sampling.seed is not None:
                    turn_sampling = msgspec.structs.replace(sampling, seed=derive_seed(sampling.seed, turn_index))
                gen = conv.record(await conv.request(remaining, turn_sampling))  # type: ignore[arg-type]
            except BackendClosed:
                raise
            except BackendError as exc:
                finish, error = "error", f"{type(exc).__name__}: {exc}"
                infra = f"inference: {error}"
                break
            calls = parse_tool_calls(gen.text, toolbox.tools)
            if gen.finish != "stop" or not calls or turn_index == config.max_turns - 1:
                turns.append(_turn(start, gen, time.monotonic() - t0))
                if gen.finish == "length":
                    finish = "token_budget"
                elif gen.finish == "abort":
                    finish, error = "error", "the server aborted the generation repeatedly"
                    infra = f"inference: {error}"
                elif not calls:
                    finish = "answer"
                # else: a call on the last allowed turn could never be answered
                break
            # Kept aside while the tools run, so a timeout during them still records the turn.
            in_tools = (start, gen, time.monotonic() - t0)
            results = await toolbox.run(
                calls,
                history,
                trajectory=(problem.id, sample_index),
                timeout=config.tool_timeout_s,
                max_chars=config.max_tool_output_chars,
                max_calls=config.max_tool_calls_per_turn,
            )
            in_tools = None
            failed = next((r for r in results if r.status == "internal"), None)
            if failed is not None:  # the infrastructure's doing: the model must not read it
                turns.append(_turn(start, gen, time.monotonic() - t0, results))
                finish = "error"
                error = infra = f"tool {failed.call.name if failed.call else '?'}: {failed.output}"
                break
            size, payload = conv.tool_turn_size([r.output for r in results])
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
    tokens = isinstance(conv, TokenConversation)
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
        infra_failure=infra,
    )
    return trajectory
