"""Gold answers rewritten: the grader and math-verify on real golds, with no label needed.

Every distinct gold answer of ``../shared/data`` (MATH-500, MATH train, AIME, HMMT,
GSM8K) is rewritten by ``rstar2_async.testing``: in another notation of its own value
(``\\dfrac``, ``a/b``, a decimal, ``1{,}000``, ``π``, ``x = 5``, ``\\approx 268``, ...) and
with its value one step off (a number made one larger, the sign flipped, a list item
dropped, a pair swapped, an interval's bracket flipped).  Each rewrite is graded as a
reply would state it: boxed (``So the answer is $\\boxed{...}$.``) in both modes, and
in prose (``The final answer is $...$.``) and as a JSON answer field in lenient mode.

- ``same_value``: ``refused_strict``, ``refused_lenient``: rewrites of the gold's own
  value graded 0 (each a wrong verdict);
- ``changed_value``: ``paid_strict``, ``paid_lenient``: rewrites of another value
  graded 1 (each a wrong verdict; in strict mode, a wrong answer rewarded);
- ``..._math_verify``: the baseline, ``verify(parse(boxed gold), parse(reply))`` on
  the same replies;
- ``by_rewrite``: the same counts per rewrite; ``examples``: the first of our wrong
  verdicts (gold, reply, mode).

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
from rstar2_async.testing import ANSWER_FORMATS, changed_value_rewrites, same_value_rewrites

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
    kinds = {
        "same_value": (same_value_rewrites, 1.0, "refused"),
        "changed_value": (changed_value_rewrites, 0.0, "paid"),
    }
    totals: dict[str, Counter[str]] = {kind: Counter() for kind in kinds}
    by_rewrite: dict[str, dict[str, Counter[str]]] = {kind: defaultdict(Counter) for kind in kinds}
    examples: list[dict[str, str]] = []
    for gold in answers:
        gold_parsed = parse(f"\\boxed{{{gold}}}")
        for kind, (rewrites, right, wrong) in kinds.items():
            for name, answer in rewrites(gold):
                for fmt, write in ANSWER_FORMATS.items():
                    reply = write(answer)
                    verdicts = {"lenient": score(reply, gold, mode="lenient")}
                    if fmt == "boxed":
                        verdicts["strict"] = score(reply, gold, mode="strict")
                    verdicts["math_verify"] = 1.0 if verify(gold_parsed, parse(reply)) else 0.0
                    counts = Counter({"cases": 1})
                    for grader, verdict in verdicts.items():
                        counts[f"{wrong}_{grader}"] += verdict != right
                        if verdict != right and grader != "math_verify" and len(examples) < EXAMPLES:
                            examples.append({"gold": gold, "reply": reply, "mode": grader, "rewrite": name})
                    totals[kind].update(counts)
                    by_rewrite[kind][name].update(counts)
    summary = {
        "benchmark": "grader_rewrites",
        "golds": len(answers),
        **{
            kind: {**dict(totals[kind]), "by_rewrite": {k: dict(v) for k, v in sorted(by_rewrite[kind].items())}}
            for kind in kinds
        },
        "examples": examples,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, ensure_ascii=False))


if __name__ == "__main__":
    main()
