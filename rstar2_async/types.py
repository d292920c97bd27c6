"""Data that crosses a boundary: problems in, trajectories and groups out.

A trajectory is token-in/token-out (DESIGN.md, Contracts): the learner trains on
exactly the token ids the server produced, never on re-tokenised text.

Direction of travel: ``Problem`` is read from JSONL; ``Trajectory`` and ``Group``
go from the rollout engine to the reward, GRPO-RoC and the learner, and to disk.
All are frozen msgspec structs; new fields go at the end, with defaults.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

FinishReason = Literal["answer", "turn_limit", "token_budget", "timeout", "error"]
"""Why a trajectory ended.

- ``answer``: the model ended a turn without calling a tool (normally with ``<answer>``).
- ``turn_limit``: ``rollout.max_turns`` assistant turns were used up.
- ``token_budget``: the response (model + tool tokens) reached ``rollout.max_response_tokens``.
- ``timeout``: the trajectory's wall-clock budget ran out.
- ``error``: the inference backend failed for good (after retries), or a tool call met an
  infrastructure failure (``Trajectory.infra_failure`` says which); kept for accounting.
"""

ToolStatus = Literal["ok", "error", "timeout", "killed", "output_limit", "internal", "invalid_call"]
"""Outcome of one tool call: the sandbox's statuses plus ``invalid_call`` for calls
that could not be decoded (bad JSON, unknown tool, missing arguments, ...).

Every status but one is the model's doing (its code failed, timed out, was killed or
printed too much; its call was malformed) and comes back to it as the tool's answer.
``internal`` is the infrastructure's (the sandbox queue was full, a worker died twice,
no sandbox service answered, the tool raised): the model never reads it; the
trajectory stops there and is marked (``Trajectory.infra_failure``)."""


class Problem(msgspec.Struct, frozen=True):
    """One math problem, as in ``../shared/data/*.jsonl``.  Unknown fields are ignored
    so that any JSONL with ``problem``/``answer`` loads."""

    id: str
    problem: str
    answer: str
    source: str = ""


class ToolCall(msgspec.Struct, frozen=True):
    """A decoded call: ``{"name": ..., "arguments": {...}}`` inside ``<tool_call>``."""

    name: str
    arguments: dict[str, Any]


class ToolResult(msgspec.Struct, frozen=True):
    """The single result of one tool call (decoded or not).

    ``output`` is the text the model sees inside ``<tool_response>``, already
    truncated in the middle to ``rollout.max_tool_output_chars``.
    """

    status: ToolStatus
    output: str
    duration_s: float = 0.0
    call: ToolCall | None = None  # None for a call that could not be decoded

    @property
    def is_error(self) -> bool:
        return self.status != "ok"


class Turn(msgspec.Struct, frozen=True):
    """One assistant turn and the tool turn that answered it.

    Offsets index ``Trajectory.response_ids``: the model's tokens are
    ``[start, start + num_generated)``, the appended tool-response/template tokens
    follow for ``num_appended`` tokens (loss mask 0).  ``text_span`` indexes
    ``Trajectory.response_text``: the model's text of this turn, without the text of
    its end-of-turn token; None in a record written before it was kept.
    """

    start: int
    num_generated: int
    num_appended: int
    weight_version: int
    finish: Literal["stop", "length", "abort"]
    tool_results: list[ToolResult] = []
    latency_s: float = 0.0
    num_answer_blocks: int = 0
    text_span: tuple[int, int] | None = None


class Trajectory(msgspec.Struct, frozen=True):
    """One sampled multi-turn solution of one problem.

    Invariants: ``len(response_ids) == len(loss_mask) == len(logprobs)``;
    ``loss_mask[i]`` is 1 for tokens the model generated and 0 for tool-response and
    chat-template tokens that were appended; ``logprobs[i]`` is the sampling logprob
    of a generated token and 0.0 where the mask is 0; ``weight_version`` is the oldest
    version among the turns (each turn records its own).

    ``infra_failure`` is empty unless the trajectory stopped at an infrastructure
    failure: then it is ``"<part>: <what happened>"``, the part being ``inference``
    (generation failed over too often, or kept being aborted) or ``tool <name>`` (the
    call's status was ``internal``: the sandbox, or the tool itself, failed).  Such a
    trajectory is never graded nor trained on (GRPO-RoC drops its group).
    ``infra_retries`` holds the same text for each earlier attempt of this sample that
    failed so and was rolled again from the start (``rollout.infra_rerolls``; their
    tokens are gone).
    """

    problem_id: str
    sample_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turns: list[Turn]
    finish_reason: FinishReason
    weight_version: int
    response_text: str = ""
    reward: float | None = None
    error: str = ""
    infra_failure: str = ""
    infra_retries: list[str] = []

    @property
    def infra_failed(self) -> bool:
        """Whether the trajectory stopped at an infrastructure failure (not the model's doing)."""
        return bool(self.infra_failure)

    @property
    def infra_attempts(self) -> tuple[int, int]:
        """``(attempts that met an infrastructure failure, attempts)`` of this sample,
        the rolled-again ones included."""
        failed = len(self.infra_retries)
        return failed + self.infra_failed, failed + 1

    @property
    def model_text(self) -> str:
        """The model's own text, its turns joined by newlines, without the tool turns
        and chat-template text between them: what the reward graded, and what a stored
        sample is regraded from (``score(t.model_text, gold)``; a tool's output is not
        the model's answer).  ``response_text`` for a record without turn spans."""
        if not self.turns or any(t.text_span is None for t in self.turns):
            return self.response_text
        return "\n".join(self.response_text[a:b] for a, b in (t.text_span for t in self.turns if t.text_span))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_tool_calls(self) -> int:
        return sum(len(t.tool_results) for t in self.turns)

    @property
    def num_tool_errors(self) -> int:
        return sum(r.is_error for t in self.turns for r in t.tool_results)

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.loss_mask)


class Group(msgspec.Struct, frozen=True):
    """All trajectories sampled for one problem; GRPO's unit of normalisation."""

    problem: Problem
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [0.0 if t.reward is None else t.reward for t in self.trajectories]
