"""The CPU demo's task: exact products of large numbers, which a tiny model can only
get right by calling the Python tool and copying its output into ``\\boxed{}``.

A problem reads ``What is 48213 * 9981?``; the ideal trajectory is

    assistant: <tool_call>{"name": ..., "arguments": {"code": "print(48213 * 9981)"}}</tool_call>
    user:      <tool_response>\\n481213953\\n</tool_response>
    assistant: <answer>\\boxed{481213953}</answer>

:func:`write_sft_transcripts` writes such conversations for the cold-start SFT
stage.  Like a real cold-start set, it can be imperfect: with ``guess_fraction`` of
the transcripts the teacher skips the tool and answers with a mental estimate (the
product rounded to two significant digits, almost always wrong).  Imitation learns
to guess that often; only the reward, which needs the real sandbox, teaches the
policy that calling the tool pays, which is what RL is for.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..rollout import render_tool_turn
from ..rollout.tools import python
from ..types import Problem

__all__ = [
    "SYSTEM_PROMPT", "answer_text", "estimate", "guess_conversation", "ideal_conversation", "make_problems",
    "tool_call_text", "write_problems", "write_sft_transcripts",
]  # fmt: skip

SYSTEM_PROMPT = "Use the Python tool to compute exactly, then answer in <answer>\\boxed{}</answer>."
"""The demo's system prompt when its config sets none (``configs/cpu-demo.toml`` does,
and lists no tools: the model learns its one tool in SFT).  Short, because a tiny
model attends over a short context best."""


def make_problems(count: int, *, seed: int, digits: tuple[int, int] = (3, 5), prefix: str = "mul") -> list[Problem]:
    """``count`` distinct multiplication problems with operands of ``digits`` digits."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    problems: list[Problem] = []
    while len(problems) < count:
        a, b = (_number(rng, rng.randint(*digits)) for _ in range(2))
        if (a, b) in seen:
            continue
        seen.add((a, b))
        problems.append(Problem(id=f"{prefix}-{seed}-{len(problems)}", problem=f"What is {a} * {b}?", answer=str(a * b)))
    return problems


def _number(rng: random.Random, digits: int) -> int:
    return rng.randrange(10 ** (digits - 1), 10**digits)


def tool_call_text(problem: Problem) -> str:
    expression = problem.problem.removeprefix("What is ").removesuffix("?")
    call = {"name": python.name, "arguments": {"code": f"print({expression})"}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def answer_text(value: str) -> str:
    return f"<answer>\\boxed{{{value}}}</answer>"


def _question(problem: Problem, system: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": problem.problem}]


def ideal_conversation(problem: Problem, system: str) -> list[dict[str, str]]:
    """The conversation a perfect policy has for ``problem`` (tool output included)."""
    return _question(problem, system) + [
        {"role": "assistant", "content": tool_call_text(problem)},
        {"role": "user", "content": render_tool_turn([problem.answer])},
        {"role": "assistant", "content": answer_text(problem.answer)},
    ]


def estimate(answer: str) -> str:
    """``answer`` rounded to two significant digits: what a guess from memory gets."""
    return str(round(int(answer), 2 - len(answer.lstrip("-"))))


def guess_conversation(problem: Problem, system: str) -> list[dict[str, str]]:
    """The teacher answers without the tool, with an estimate."""
    return _question(problem, system) + [{"role": "assistant", "content": answer_text(estimate(problem.answer))}]


def write_sft_transcripts(
    problems: list[Problem], path: Path, *, system: str, guess_fraction: float = 0.0, seed: int = 0
) -> Path:
    """One ``{"messages": [...]}`` JSON line per problem, for the SFT stage: the ideal
    conversation, or with probability ``guess_fraction`` a guess without the tool."""
    if not 0.0 <= guess_fraction <= 1.0:
        raise ValueError(f"guess_fraction: expected a fraction in [0, 1], got {guess_fraction}")
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in problems:
            guess = rng.random() < guess_fraction
            messages = guess_conversation(p, system) if guess else ideal_conversation(p, system)
            f.write(json.dumps({"messages": messages}) + "\n")
    return path


def write_problems(problems: list[Problem], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in problems:
            f.write(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer}) + "\n")
    return path
