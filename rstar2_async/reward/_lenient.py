"""Where a response that ignores rStar2's format puts its final answer: the lenient mode.

Training grades rStar2's format strictly (`extract_answer`: the last ``\\boxed{}`` of
the last ``<answer>`` block, or the last box anywhere; no box, no reward).  Outside
models asked through a chat endpoint often write no box at all, so evaluation can
grade leniently (`final_answer` with ``mode="lenient"``):

1. With boxes: the same box strict mode takes; but when the gold answer is a list of
   ``k`` parts and the response ends with ``k`` boxes in a row (``\\boxed{3}`` and
   ``\\boxed{5}``), those boxes, joined as a list; for a gold tuple of ``k`` parts,
   joined as a tuple in their order (``x = \\boxed{2}``, ``y = \\boxed{3}`` is ``(2, 3)``);
   and a final answer stated after the last box ("Final Answer: The final answer is
   $42$") is the answer, the boxes before it steps on the way.
2. Without a box, the answer is read from free text (``_free_text``): that of the
   last ``<answer>`` block first, or of a JSON reply's answer field, then of the
   whole response.

A response that gives an answer and then writes the next prompt itself (a few-shot
``Question:``, a chat's ``User:``, the evaluation's template again) is read up to that
prompt in lenient mode; strict mode keeps rStar2's format, the last box.

In both modes only the text after a reasoning model's last ``</think>`` is read (a
box written while thinking is no answer, and a response cut off while thinking has
none), a box holding prose (``\\boxed{The answer is 8}``) is read as free
text, and a response's chat end-of-turn tokens (``<|im_end|>``, ``<|eot_id|>``,
``</s>``...) are dropped first: the engine grades text without them, and a stored
sample's ``response_text`` keeps them, so regrading it gives the score the run gave.
"""

from __future__ import annotations

import itertools
import re

from ._answer import answer_region, boxed_answers, extract_answer, last_answer_block
from ._compare import GradingMode, answer_parts
from ._free_text import TAIL_CHARS, anchored_answer, free_text_answer
from ._json_answer import json_answer
from ._spans import LEADING_VAR, has_prose, stated_gold, statement_value, whole_span

__all__ = ["answer_box", "answer_in", "final_answer", "gold_answer", "readable"]

# Chat templates' special tokens as a stored transcript spells them: ChatML and
# Llama 3's `<|...|>`, DeepSeek's `<｜...｜>`, and the SentencePiece and Gemma ends.
_END_TOKENS = re.compile(r"<\|[A-Za-z0-9_.\-]{1,40}\|>|<｜[^｜<>\n]{1,40}｜>|</s>|<eos>|<(?:end|start)_of_turn>")
# Between two boxes of one multi-part answer: punctuation, "and", labels such as
# "(b)" or `\text{ for part (a) and }`, math delimiters (`\) and \(`), never a digit
# or another sentence.
_BOX_GAP = re.compile(
    r"(?:[\s$,;.&]|\\[,;! ()\[\]]|\\quad|\\text\{[a-zA-Z\s(),]*\}|\b(?:and|or|for|part|in)\b|\(\s*[a-z]\s*\)"
    r"|\b[a-zA-Z](?:_\{?\w+\}?)?\s*=|\*\*)*"
)
_DIGIT = re.compile(r"\d")
_BOLD = re.compile(r"\*\*(.+)\*\*")  # markdown bold inside a box: `\boxed{**3**}`
_LETTER = re.compile(r"[^\W\d_]")
_GOLD_GAP_WORDS = re.compile(r"\\text\s*\{\s*(?:and|or)?\s*\}|\b(?:and|or)\b|\\[a-zA-Z]+")
_MAX_BOX_GAP = 40
"""Longest text (characters) between two boxes read as parts of one answer."""


def strip_end_tokens(text: str) -> str:
    """`text` without chat templates' special tokens (each becomes a line break, as
    the engine joins the turns it grades)."""
    return _END_TOKENS.sub("\n", text) if "<" in text else text


def final_answer(text: str, gold: str | None = None, *, mode: GradingMode = "strict") -> str | None:
    """The final answer of a response under a grading mode, or None if it has none.

    ``"strict"`` is `extract_answer` (``gold`` is not read).  ``"lenient"`` reads the
    boxes first and free text only when there is no box (see the module docstring);
    ``gold`` tells how many parts a multi-part answer has.  Chat end-of-turn
    tokens are dropped first in both modes (`strip_end_tokens`).

    Raises:
        ValueError: an unknown `mode`.
    """
    return answer_in(readable(text), gold, mode=mode)


def readable(text: str) -> str:
    """The part of a response its final answer is read from: after its thinking
    (`after_thinking`), with LaTeX escapes a string literal turned into control
    characters restored (`restore_escapes`), without chat templates' special tokens
    (`strip_end_tokens`).  Thinking goes first: its tags may look like special tokens,
    and a long thinking is not searched."""
    return strip_end_tokens(restore_escapes(after_thinking(text)))


# LaTeX written in a Python or JSON string without escaping its backslashes loses some
# of them to control characters: `\frac` becomes a form feed and "rac", `\boxed` a
# backspace and "oxed".  Those four never stand in math text; a tab, carriage return
# or line feed is taken back only before the rest of a command's name that is no word
# (a line may start with `e^x` or `u = 3`, and a tab with "an").
_LOST_ESCAPE = re.compile(
    r"[\x07\x08\x0b\x0c](?=[a-zA-Z])"
    r"|\r(?=(?:ight|ho|angle|floor|ceil)(?![a-zA-Z]))"
    r"|\t(?=(?:ext|imes|heta|frac|riangle|ilde)(?![a-zA-Z]))"
    r"|\n(?=(?:eq|ot|abla)(?![a-zA-Z]))"
)
_LOST_MARKS = ("\x07", "\x08", "\x0b", "\x0c", "\r", "\t", "\neq", "\not", "\nabla")
_ESCAPED = {"\x07": "\\a", "\x08": "\\b", "\x0b": "\\v", "\x0c": "\\f", "\r": "\\r", "\t": "\\t", "\n": "\\n"}


def restore_escapes(text: str) -> str:
    """`text` with the backslashes an unescaped string literal lost put back
    (``\\x0crac{1}{2}`` is ``\\frac{1}{2}``, ``\\text{13}`` after a tab is ``\\text{13}``)."""
    if not any(mark in text for mark in _LOST_MARKS):  # the usual case, at memchr speed
        return text
    return _LOST_ESCAPE.sub(lambda m: _ESCAPED[m[0]], text)


def answer_in(text: str, gold: str | None = None, *, mode: GradingMode = "strict") -> str | None:
    """`final_answer` of a text that is already `readable`."""
    if mode not in ("strict", "lenient"):
        raise ValueError(f"mode: expected 'strict' or 'lenient', got {mode!r}")
    if mode == "strict":
        boxed = extract_answer(text)
        return None if boxed is None else _inside_box(boxed)
    text = _BARE_FBOX.sub(r"\\\g<0>", _BARE_BOX.sub(r"\\\g<0>", text)).replace("\\beginboxed{", "\\boxed{")
    return _lenient_answer(_before_next_prompt(text, gold), gold)


# A model that does not stop may go on to write the next prompt itself, as few-shot
# prompts and chat transcripts taught it ("Question:", "Problem 2:", "User:", the same
# in other languages: "Frage:", "问题：", "ユーザー：", the instruction template's
# "## Instruction"), and answer that: its own answer comes
# before.  A colon is asked for: "## Problem 2" may head a part of one answer.  The
# line break opens the pattern, a literal the scan jumps to (3.6 times faster than
# `^` in multiline mode on 60,000 characters); a prompt on the first line has no answer
# before it anyway.
_NEXT_PROMPT = re.compile(
    r"\n(?:[ \t>*#]*(?:(?:question|problem|frage|aufgabe|pregunta|problema|domanda|quest[ãa]o|вопрос|задача"
    r"|问题|題目|题目|問題|質問|문제|질문)(?:[ \t]*\d+)?|human|user|用户|ユーザー|사용자)[ \t*]*[:：]"
    r"|[ \t]*#{1,6}[ \t]*instruction\b)",
    re.IGNORECASE,
)
_MAX_PROMPTS = 8
"""Prompt lines tried, from the first: a response that restates its question opens with one."""


def _before_next_prompt(text: str, gold: str | None) -> str:
    """`text` up to the first line that opens a new prompt after the response stated
    an answer (`_stated`), or all of it."""
    for m in itertools.islice(_NEXT_PROMPT.finditer(text), _MAX_PROMPTS):
        if _stated(head := text[: m.start()]) and _lenient_answer(head, gold) is not None:
            return head
    return text


def _stated(text: str) -> bool:
    """Whether `text` states an answer in so many words: a box, an ``<answer>`` block,
    a JSON answer field or an anchored sentence.  A value its reasoning ends on is
    not enough: a question restated mid-reasoning ("Question: what is asked?") is no
    new prompt."""
    return bool(
        boxed_answers(text)
        or last_answer_block(text) is not None
        or json_answer(text[-TAIL_CHARS:])
        or anchored_answer(text[-TAIL_CHARS:])
    )


def _lenient_answer(text: str, gold: str | None) -> str | None:
    region, boxes, stated = _boxes(text)
    if not boxes:
        return _free_text(text)
    return stated or _several_boxes(region, boxes, gold) or _inside_box(boxes[-1][0])


def answer_box(text: str, mode: GradingMode) -> str | None:
    """The box a mode takes the answer from, as written: `extract_answer`'s, but in
    lenient mode none when a final answer is stated after it (`_final_statement`)."""
    if mode == "strict":
        return extract_answer(text)
    _, boxes, stated = _boxes(text)
    return boxes[-1][0] if boxes and not stated else None


def _boxes(text: str) -> tuple[str, list[tuple[str, int, int]], str | None]:
    """Where lenient mode reads boxes (`answer_region`, as `extract_answer` does), the
    boxes there, and a final answer stated after the last of them, if any."""
    start, end = answer_region(text)
    region = text[start:end]
    boxes = boxed_answers(region)
    return region, boxes, _final_statement(region[boxes[-1][2] :]) if boxes else None


# A sentence that opens by stating the final answer: "Final Answer: ...", "Thus, the
# final answer is ...", "**Final Answer:**"; not "let me double-check the final answer: ...".
_FINAL = re.compile(
    r"(?:^|(?<=[.!:])|\*\*)[ \t*]*(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?final\s+answer\b",
    re.IGNORECASE | re.MULTILINE,
)


def _final_statement(tail: str) -> str | None:
    """The value a response states as its final answer after its last box, in a
    sentence of its own ("Final Answer: The final answer is $10,455$", Minerva's
    format): the boxes before it were steps (``\\boxed{200}`` of interest on the way).
    Prose there ("The final answer is above") leaves the box the answer."""
    tail = tail[-TAIL_CHARS:]
    finals = list(_FINAL.finditer(tail))
    answer = anchored_answer(tail[finals[-1].start() :]) if finals else None
    return answer if answer and not has_prose(answer) else None


_BARE_BOX = re.compile(r"boxed(?=\{)(?<![\\a-zA-Z]boxed)")
_BARE_FBOX = re.compile(r"fbox(?=\{)(?<![\\a-zA-Z]fbox)")
"""A box whose backslash a renderer or an unescaped string ate (``boxed{42}``,
``fbox{42}``), or whose name is glued to a `\\begin` (``\\beginboxed{42}``): lenient
mode reads it as a box; strict mode, rStar2's format, does not.  One pattern a name,
each opening with its literal, is a fast scan; one alternation of both scans 20 times
slower (0.3 ms on 60,000 characters)."""

_THINKING = (
    ("<think>", "</think>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    ("<|channel|>analysis", "<|channel|>final<|message|>"),
    ("[THINK]", "[/THINK]"),
    ("<seed:think>", "</seed:think>"),
    ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<thought>", "</thought>"),
)
"""How reasoning models mark their thinking: DeepSeek-R1, Qwen3, GLM, MiniMax, Phi-4
and most others; Sky-T1 and OpenThinker (whose answer then stands in
``<|begin_of_solution|>``); gpt-oss's analysis channel, when its text keeps the
harmony format's tokens; Mistral's Magistral; ByteDance's Seed-OSS; Moonshot's Kimi
(``\u25c1think\u25b7``); Cohere's Command A; LG's EXAONE Deep."""

_THINKING_MARKS = ("hink", "hought", "HINK", "<|channel|>")
"""A part of one tag of each pair: a text with none of them has no thinking tags, and
four scans of a long response cost less than sixteen."""
_BARE_ANALYSIS = re.compile(r"\s*analysis(?=[A-Z]|.*assistantfinal)", re.DOTALL)
_BARE_FINAL = "assistantfinal"
"""gpt-oss decoded without its special tokens (vLLM's default ``skip_special_tokens``):
``analysisWe need ...assistantfinalThe answer is 5.``  Only a text that opens so is
read this way; the word "analysis" elsewhere is prose."""


def after_thinking(text: str) -> str:
    """The part of a response after its reasoning, which is where its final answer is:
    the text after the last ``</think>`` (or another family's closing tag, `_THINKING`);
    nothing when the last ``<think>`` is never closed (the response ended while
    thinking); the whole text when it has no such tags.  gpt-oss's text without its special tokens is read
    the same way (`_BARE_ANALYSIS`).  A box the model wrote while thinking and then
    took back is no answer."""
    if any(mark in text for mark in _THINKING_MARKS):
        text = _after_tags(text)
    if _BARE_ANALYSIS.match(text):
        final = text.rfind(_BARE_FINAL)
        return "" if final < 0 else text[final + len(_BARE_FINAL) :]
    return text


def _after_tags(text: str) -> str:
    for begin, end in _THINKING:
        opened, closed = text.rfind(begin), text.rfind(end)
        if opened > closed:
            return ""
        if closed >= 0:
            text = text[closed + len(end) :]
    return text


def _inside_box(content: str) -> str | None:
    """The answer a box holds: its contents (the value a statement states, as in
    free text: ``\\boxed{\\lim_{x \\to 0} f(x) = 1}`` holds 1), or, when they are
    prose, their answer as free text; a number in prose that free text does not take
    (``\\boxed{The answer is not 5.}``) is no answer."""
    if not has_prose(content):
        content = content.strip().strip("$").strip()
        return statement_value(m[1] if (m := _BOLD.fullmatch(content)) else content)
    return _free_text(content) or (None if _DIGIT.search(content) else content)


def _free_text(text: str) -> str | None:
    """The answer in free text: an ``<answer>`` block without a box holds it
    (``<answer>\\frac{1}{2}</answer>``), else a JSON answer field (``"answer": "42"``),
    even when it holds no value (an empty field: no answer); else (or when the block is
    empty) the whole text is read."""
    block = last_answer_block(text)
    if block is None and (block := json_answer(text[-TAIL_CHARS:])) == "":
        return None  # an empty field is a reply that gives no answer, not a cue to read the reasoning
    if block is None or not block.strip():
        return free_text_answer(text)
    # math alone (`AB=9, CD=4`, an interval union) is read whole, as a box's is; prose as free
    # text; words alone ("infinitely many") answer too
    return _inside_box(block) or block.strip()


def gold_answer(gold: str) -> str:
    """The gold answer itself.  A gold written with boxes (``\\boxed{24}``, a worked
    solution) is its last box, or all its boxes as one list when nothing but
    punctuation, "and" and "or" stands between them (``\\(\\boxed{1}\\) and
    \\(\\boxed{-2}\\)``), or when the gold is one short phrase that labels its boxes
    (``\\boxed{1} papers and \\boxed{2} bins``)."""
    gold = restore_escapes(gold)
    gold = whole_span(gold) or gold  # `\\(10,\\!080\\)`, `$\\text{(E)},$`: the math inside
    if "\\boxed" not in gold and "\\fbox" not in gold:
        return stated_gold(gold)
    boxes = boxed_answers(gold)
    if not boxes:
        return gold
    gaps = [gold[end:start] for (_, _, end), (_, start, _) in itertools.pairwise(boxes)]
    if len(boxes) > 1 and (
        not any(_LETTER.search(_GOLD_GAP_WORDS.sub(" ", gap)) for gap in gaps) or _labelled(gold, boxes, gaps)
    ):
        return ", ".join(content for content, _, _ in boxes)
    return stated_gold(boxes[-1][0])


_SENTENCE_END = re.compile(r"[.;:!?](?!\d)|\n")
_WORDS = re.compile(r"[^\W\d_]+")
_MAX_PHRASE = 80
"""Most characters of a gold outside its boxes for its words to label them: a worked
solution that boxes two values on its way is longer."""
_MAX_LABEL_WORDS = 3
"""Most words between two labelled boxes (``papers and``); Math-Verify's and lighteval's
tests label golds with five or six (``\\boxed{1} no no no no no \\boxed{2}``) as their
last box alone."""


def _labelled(gold: str, boxes: list[tuple[str, int, int]], gaps: list[str]) -> bool:
    """Whether a gold is one phrase whose words only label its boxes: short outside
    them, and a few words between each two with no number and no sentence's end."""
    outside = len(gold) - sum(end - start for _, start, end in boxes)
    return outside <= _MAX_PHRASE and all(
        len(_WORDS.findall(gap)) <= _MAX_LABEL_WORDS and not _DIGIT.search(gap) and not _SENTENCE_END.search(gap)
        for gap in gaps
    )


def _several_boxes(text: str, boxes: list[tuple[str, int, int]], gold: str | None) -> str | None:
    """The boxes ending the response as one list, when exactly ``k`` of them stand in
    a row (nothing but separators between them) and the gold answer has ``k`` > 1
    parts; as one tuple, in order, when the gold is a tuple of ``k`` (each box may
    name its part: ``\\boxed{x=2}``); else None.  ``\\boxed{2}, \\boxed{3},
    \\boxed{5}`` is no answer ``3, 5``."""
    if gold is None or len(boxes) < 2:
        return None
    kind, parts = answer_parts(gold)
    k = len(parts)
    if k < 2:
        return None
    run = 1
    for (_, later, _), (_, _, earlier) in itertools.pairwise(reversed(boxes)):
        gap = text[earlier:later]
        if len(gap) > _MAX_BOX_GAP or not _BOX_GAP.fullmatch(gap):
            break
        run += 1
    if run != k:
        return None
    if kind == "()":
        return "(" + ", ".join(LEADING_VAR.sub("", content) for content, _, _ in boxes[-k:]) + ")"
    return ", ".join(content for content, _, _ in boxes[-k:])
