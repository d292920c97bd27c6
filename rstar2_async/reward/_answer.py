"""Where a response puts its final answer: rStar2's ``<answer>...\\boxed{...}...</answer>``.

We take the last ``\\boxed{}`` (or ``\\fbox{}``, or ``\\boxed 5``) inside the last
complete ``<answer>`` block, or, if that block has none, the last one anywhere.
`answer_format` also reports what GRPO-RoC's format penalty needs (missing or
malformed ``<answer>`` block, number of blocks).  Pure functions, linear time.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["AnswerFormat", "answer_format", "answer_region", "boxed_answers", "extract_answer", "last_answer_block"]


class AnswerFormat(msgspec.Struct, frozen=True):
    """How a response presents its final answer; what the format penalty reads.

    Invariants: ``boxed_in_answer`` implies ``answer_blocks >= 1`` and ``answer is not
    None``.  Travels from the reward to GRPO-RoC and the learner.
    """

    answer_blocks: int
    """Complete ``<answer>...</answer>`` pairs."""
    unmatched_tags: int
    """``<answer>`` never closed or reopened inside a block, and ``</answer>`` with no
    opening tag."""
    boxed_in_answer: bool
    """Whether the last complete block holds a readable ``\\boxed{}``."""
    answer: str | None
    """The extracted final answer (see `extract_answer`)."""

    @property
    def well_formed(self) -> bool:
        """Exactly one answer block, no stray tags, and a boxed answer inside it."""
        return self.answer_blocks == 1 and self.unmatched_tags == 0 and self.boxed_in_answer


_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_TAG = re.compile(r"<(/?)answer>")
_BARE_ARGUMENT = re.compile(r"[^\s$<]+")
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character, or a brace


def _brace_pairs(text: str) -> dict[int, int]:
    """Map each `{` that is closed to its `}`, in one pass.  `\\{` and `\\}` are set
    braces, but a `\\}` with no `\\{` open is a stray backslash before a closing brace
    (``\\boxed{185\\}``, as in ``185\\``), and closes the `{`.

    One pass for the whole text keeps extraction linear even in a degenerate
    response full of unclosed boxes."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    set_braces = 0
    for m in _BRACE.finditer(text):
        if m[0] == "{":
            stack.append(m.start())
        elif m[0] == "}" and stack:
            pairs[stack.pop()] = m.start()
        elif m[0] == "\\{":
            set_braces += 1
        elif m[0] == "\\}":
            if set_braces:
                set_braces -= 1
            elif stack:
                pairs[stack.pop()] = m.start() + 1
    return pairs


def boxed_answers(text: str) -> list[tuple[str, int, int]]:
    """(contents, start, end) of every readable box, in order; boxes nested in a taken
    box do not count.  Linear time."""
    pairs: dict[int, int] | None = None
    found = []
    resume = 0
    for m in _BOX.finditer(text):
        if m.start() < resume:
            continue
        i = m.end()
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("{", i):
            pairs = _brace_pairs(text) if pairs is None else pairs
            if i not in pairs:  # truncated mid-box
                continue
            content, resume = text[i + 1 : pairs[i]].strip(), pairs[i] + 1
        elif bare := _BARE_ARGUMENT.match(text, i):  # `\boxed 5`
            content, resume = bare[0], bare.end()
        else:
            continue
        if content:
            found.append((content, m.start(), resume))
    return found


def answer_region(text: str) -> tuple[int, int]:
    """Where the final answer is looked for: the last complete ``<answer>`` block if it
    holds a box, else the whole text (as `extract_answer` reads it)."""
    blocks = _answer_blocks(text)[0]
    if blocks and boxed_answers(text[blocks[-1][0] : blocks[-1][1]]):
        return blocks[-1]
    return 0, len(text)


def last_answer_block(text: str) -> str | None:
    """The contents of the last complete ``<answer>`` block, or None without one."""
    blocks = _answer_blocks(text)[0]
    return text[blocks[-1][0] : blocks[-1][1]] if blocks else None


def _answer_blocks(text: str) -> tuple[list[tuple[int, int]], int]:
    """The (start, end) of each complete ``<answer>`` block's contents, and the number
    of unmatched tags."""
    blocks: list[tuple[int, int]] = []
    unmatched = 0
    open_at: int | None = None
    for m in _TAG.finditer(text):
        if not m[1]:  # <answer>
            unmatched += open_at is not None
            open_at = m.end()
        elif open_at is None:  # </answer> with nothing open
            unmatched += 1
        else:
            blocks.append((open_at, m.start()))
            open_at = None
    return blocks, unmatched + (open_at is not None)


def _last_boxed(text: str) -> str | None:
    boxes = boxed_answers(text)
    return boxes[-1][0] if boxes else None


def answer_format(text: str) -> AnswerFormat:
    """Find the ``<answer>`` blocks and the final answer of one response.  Linear time."""
    blocks, unmatched = _answer_blocks(text)
    in_block = _last_boxed(text[blocks[-1][0] : blocks[-1][1]]) if blocks else None
    return AnswerFormat(
        answer_blocks=len(blocks),
        unmatched_tags=unmatched,
        boxed_in_answer=in_block is not None,
        answer=in_block if in_block is not None else _last_boxed(text),
    )


def extract_answer(text: str) -> str | None:
    """The final answer of a response, or None if it has no readable ``\\boxed{}``.

    The last box inside the last complete ``<answer>`` block wins; without one, the
    last box anywhere.  Nested braces and ``\\{``/``\\}`` are handled; a box cut off
    before its closing brace is skipped, and a stray backslash before it
    (``\\boxed{185\\}``) does not cut it off.
    """
    return answer_format(text).answer
