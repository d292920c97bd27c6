"""Grader agreement: our grader in both modes, and math-verify alone, against the
labelled pairs of tests/reward/data/grader_pairs.jsonl, in the same run.

Each case is a gold answer, a response and the right verdict for each grading mode it
applies to (``{"strict": false, "lenient": true}``), labelled by hand or by
construction (tests/reward/data/build_grader_pairs.py), never by a grader.

- ours, per mode: ``rstar2_async.reward.score(response, gold, mode=...)``, the
  normaliser and math-verify in a worker process, as training (strict) and
  ``rstar2 eval`` (lenient for chat endpoints) grade;
- the baseline: math-verify on its own, as its README uses it:
  ``verify(parse("\\boxed{gold}"), parse(response))``, its own extraction of the
  response's final answer (in this process's main thread, so its alarms work),
  scored against the lenient labels (it reads free text as the lenient mode does).

Prints every case a grader gets wrong, then one JSON line: agreement per mode,
false positives (a wrong answer accepted), of them on adversarial cases, and the
median grading time per case.

    PYTHONPATH=. python benchmarks/grader_agreement.py
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path

from rstar2_async.reward import score

PAIRS = Path(__file__).resolve().parents[1] / "tests" / "reward" / "data" / "grader_pairs.jsonl"
MODES = ("strict", "lenient")


def load_pairs(path: Path = PAIRS) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def math_verify_verdict(response: str, gold: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(
            verify(
                parse("\\boxed{" + gold + "}", parsing_timeout=5), parse(response, parsing_timeout=5), timeout_seconds=5
            )
        )
    except Exception:  # math-verify swallows most errors itself; one left is a "no"
        return False


def tally(name: str, results: list[tuple[dict, bool, bool]], times: list[float], out: dict) -> None:
    """Agreement, false positives and the failing cases of one grader (printed)."""
    wrong = [(case, expected, got) for case, expected, got in results if expected != got]
    false_pos = [case for case, expected, got in wrong if got]
    out[f"agreement_{name}"] = round(1 - len(wrong) / len(results), 4)
    out[f"false_positives_{name}"] = len(false_pos)
    out[f"adversarial_false_positives_{name}"] = sum(case["adversarial"] for case in false_pos)
    out[f"median_ms_{name}"] = round(1000 * statistics.median(times), 3)
    print(f"\n{name}: {len(results) - len(wrong)}/{len(results)} agree, {len(false_pos)} false positives")
    for case, expected, got in wrong:
        kind = "FALSE POSITIVE" if got else "false negative"
        print(f"  {kind}: gold={case['gold']!r} response={case['response'][:90]!r} ({case['note']})")


def main() -> None:
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    pairs = load_pairs()
    out: dict = {
        "benchmark": "grader_agreement",
        "cases": len(pairs),
        "adversarial_cases": sum(c["adversarial"] for c in pairs),
    }
    score("\\boxed{\\pi/2}", "\\frac{\\pi}{2}")  # start the worker outside the timing
    for mode in MODES:
        results, times = [], []
        for case in pairs:
            if mode not in case["expected"]:
                continue
            t0 = time.perf_counter()
            got = score(case["response"], case["gold"], mode=mode) == 1.0
            times.append(time.perf_counter() - t0)
            results.append((case, case["expected"][mode], got))
        out[f"cases_{mode}"] = len(results)
        tally(mode, results, times, out)
    verdicts, times = [], []
    for case in pairs:
        t0 = time.perf_counter()
        verdicts.append(math_verify_verdict(case["response"], case["gold"]))
        times.append(time.perf_counter() - t0)
    results = [(c, c["expected"]["lenient"], v) for c, v in zip(pairs, verdicts) if "lenient" in c["expected"]]
    tally("math_verify", results, times, out)
    sys.stdout.flush()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
