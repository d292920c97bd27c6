"""Grading time on long responses: what reading a final answer costs as a response grows.

Reasoning models write tens of thousands of characters per response, and the grader
reads each one: it cuts the thinking, restores lost escapes, drops chat tokens, and
finds the answer (a box, or in lenient mode free text).  The check sets' responses are
short, so ``grader_agreement.py``'s times say little about this.

Responses are built from MATH training problems (``../shared/data/train_math.jsonl``,
as filler text full of LaTeX) to 2K, 20K and 60K characters, in four shapes: with or
without a ``<think>`` block before the answer, and with the answer boxed or written
out (``The final answer is $42$.``).  Per shape and size:

- ``ours_strict_ms``, ``ours_lenient_ms``: the median time of ``score`` (each built
  response is settled before math-verify would be asked, so this is the reading);
- ``math_verify_parse_ms``: the baseline, math-verify's ``parse`` of the same
  response (how math-verify alone reads a whole response), median;
- ``verdicts_ok``: every verdict is the built one (lenient 1; strict 1 for a box, 0
  without).

The last line adds the worst times and the ratio of math-verify's time to lenient
mode's, its minimum (our worst shape) and median over the twelve responses.

    PYTHONPATH=. python benchmarks/grader_long.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rstar2_async.reward import score

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "train_math.jsonl"
SIZES = (2_000, 20_000, 60_000)
GOLD = "42"


def build(problems: list[str], chars: int, *, think: bool, box: bool, rng: random.Random) -> str:
    """A response of about ``chars`` characters whose final answer is ``GOLD``."""
    parts, size = [], 0
    while size < chars:
        parts.append(rng.choice(problems))
        size += len(parts[-1]) + 2
    body = "\n\n".join(parts)[:chars]
    answer = f"\\boxed{{{GOLD}}}." if box else f"${GOLD}$."
    return (
        f"<think>{body}</think>\n\nThe final answer is {answer}" if think else f"{body}\n\nThe final answer is {answer}"
    )


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    from math_verify import parse

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its warning that no timeout is set
    problems = [json.loads(line)["problem"] for line in DATA.open()]
    rng = random.Random(0)
    parse("\\boxed{1}")  # import and warm math-verify before timing it
    rows = []
    for chars in SIZES:
        for think in (True, False):
            for box in (True, False):
                text = build(problems, chars, think=think, box=box, rng=rng)
                strict, lenient = score(text, GOLD, mode="strict"), score(text, GOLD, mode="lenient")
                row = {
                    "chars": chars,
                    "think": think,
                    "box": box,
                    "ours_strict_ms": median_ms(lambda: score(text, GOLD, mode="strict"), args.repeats),  # noqa: B023
                    "ours_lenient_ms": median_ms(lambda: score(text, GOLD, mode="lenient"), args.repeats),  # noqa: B023
                    "math_verify_parse_ms": median_ms(lambda: parse(text, parsing_timeout=None), args.repeats),  # noqa: B023
                    "verdicts_ok": lenient == 1.0 and strict == (1.0 if box else 0.0),
                }
                print(json.dumps(row))
                rows.append(row)
    ratios = [r["math_verify_parse_ms"] / r["ours_lenient_ms"] for r in rows]
    summary = {
        "responses": len(rows),
        "verdicts_ok": all(r["verdicts_ok"] for r in rows),
        "worst_ours_lenient_ms": max(r["ours_lenient_ms"] for r in rows),
        "worst_math_verify_parse_ms": max(r["math_verify_parse_ms"] for r in rows),
        "min_ratio_math_verify_to_ours_lenient": round(min(ratios), 2),
        "median_ratio_math_verify_to_ours_lenient": round(statistics.median(ratios), 2),
        "rows": rows,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
