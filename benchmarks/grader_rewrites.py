"""Gold answers rewritten: the grader and math-verify on real golds, with no label needed.

Every distinct gold answer of ``../shared/data`` (MATH-500, MATH train, AIME, HMMT,
GSM8K) is rewritten by ``rstar2_async.testing``: in another notation of its own value
(``\\dfrac``, ``a/b``, a decimal, ``1{,}000``, ``π``, ``x = 5``, ``\\approx 268``, ...) and
with its value one step off (a number made one larger, the sign flipped, a list item
dropped, a pair swapped, an interval's bracket flipped).  Each rewrite is graded as a
reply would state it: boxed (``So the answer is $\\boxed{...}$.``) in both modes, and
in prose (``The final answer is $...$.``), as a JSON answer field and on GSM8K's
``####`` line (math as plain text) in lenient mode.

- ``same_value``: ``refused_strict``, ``refused_lenient``: rewrites of the gold's own
  value graded 0 (each a wrong verdict);
- ``changed_value``: ``paid_strict``, ``paid_lenient``: rewrites of another value
  graded 1 (each a wrong verdict; in strict mode, a wrong answer rewarded);
- ``..._math_verify``: the baseline, ``verify(parse(boxed gold), parse(reply))`` on
  the same replies;
- ``gold_formats``: ``wrong_strict``, ``wrong_lenient``: the gold written as data sets
  write it (``$g$``, ``\\(g\\)``, ``\\[g\\]``, ``\\boxed{g}``) against its own box (to be
  paid) and a value one step off (not), graded wrong;
- ``by_rewrite``: the same counts per rewrite (per gold format); ``examples``: the
  first of our wrong verdicts (gold, reply, mode).

    PYTHONPATH=. python benchmarks/grader_rewrites.py [--limit N]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter, defaultdict

from rstar2_async.recipe import data_dir
from rstar2_async.reward import score
from rstar2_async.testing import ANSWER_FORMATS, GOLD_FORMATS, changed_value_rewrites, same_value_rewrites

FILES = (
    "math500.jsonl",
    "train_math.jsonl",
    "aime24.jsonl",
    "aime25.jsonl",
    "hmmt_feb2024.jsonl",
    "hmmt_feb2025.jsonl",
    "train_aime_1983_2023.jsonl",
    "gsm8k_test.jsonl",
)
EXAMPLES = 20


def golds(limit: int | None) -> list[str]:
    seen: dict[str, None] = {}
    for name in FILES:
        for line in (data_dir() / name).open():
            seen.setdefault(str(json.loads(line)["answer"]).strip(), None)
    return [g for g in seen if g][:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="grade the first N distinct golds only")
    args = parser.parse_args()
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its warning that no timeout is set
    started = time.monotonic()
    answers = golds(args.limit)
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    by_name: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    examples: list[dict[str, str]] = []

    def tally(kind: str, name: str, gold: str, reply: str, right: float, modes: tuple[str, ...]) -> None:
        wrong = {1.0: "refused", 0.0: "paid"}[right] if kind != "gold_formats" else "wrong"
        verdicts = {mode: score(reply, gold, mode=mode) for mode in modes}
        verdicts["math_verify"] = 1.0 if verify(parse(f"\\boxed{{{gold}}}"), parse(reply)) else 0.0
        counts = Counter({"cases": 1})
        for grader, verdict in verdicts.items():
            counts[f"{wrong}_{grader}"] += verdict != right
            if verdict != right and grader != "math_verify" and len(examples) < EXAMPLES:
                examples.append({"gold": gold, "reply": reply, "mode": grader, "rewrite": name})
        totals[kind].update(counts)
        by_name[kind][name].update(counts)

    for gold in answers:
        for kind, rewrites, right in (
            ("same_value", same_value_rewrites, 1.0),
            ("changed_value", changed_value_rewrites, 0.0),
        ):
            for name, answer in rewrites(gold):
                for fmt, write in ANSWER_FORMATS.items():
                    tally(
                        kind,
                        name,
                        gold,
                        write(answer),
                        right,
                        ("strict", "lenient") if fmt == "boxed" else ("lenient",),
                    )
        for fmt, write in GOLD_FORMATS.items():
            for answer, right in [(gold, 1.0)] + [(value, 0.0) for _, value in changed_value_rewrites(gold)[:1]]:
                tally("gold_formats", fmt, write(gold), f"\\boxed{{{answer}}}", right, ("strict", "lenient"))
    summary = {
        "benchmark": "grader_rewrites",
        "golds": len(answers),
        **{
            kind: {**dict(totals[kind]), "by_rewrite": {k: dict(v) for k, v in sorted(by_name[kind].items())}}
            for kind in ("same_value", "changed_value", "gold_formats")
        },
        "examples": examples,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, ensure_ascii=False))


if __name__ == "__main__":
    main()
