"""maj@n's cost: grouping a problem's wrong answers by the grader's equivalence.

`majority_correct` puts every rewarded answer in one group, and groups the wrong ones
first by `answers_match` (the normaliser: no evaluation), then, where merging could
take the vote from the right group, by the grader itself (math-verify, in the grading
worker), at most ``budget`` comparisons a problem.  This times the three ways on
built groups of ``n`` samples over MATH-500's first problems, in the same run:

- ``normaliser``: ``budget=0``, the grouping before the grader was asked (baseline);
- ``ours``: the shipped budget (`EQUAL_BUDGET`);
- ``unbounded``: every comparison the vote needs.

Shapes (``n`` = 16): ``agree`` (12 right, 4 wrong in one spelling: nothing to ask),
``hidden`` (4 right; 6 wrong, one value in two spellings only math-verify equates:
the normaliser's vote is wrong), ``split`` (6 right, 10 wrong all different) and
``spread`` (2 right, 14 wrong all different: the worst case).  Per shape and way:
seconds per problem (median of the problems) and maj@n.  The last line is JSON.

    PYTHONPATH=. python benchmarks/majority_vote.py [--problems 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rstar2_async.recipe import majority_correct
from rstar2_async.types import Group, Problem, Trajectory

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "math500.jsonl"
UNBOUNDED = 10**9


def sample(i: int, answer: str, right: bool) -> Trajectory:
    return Trajectory("p", i, [], [], [], [], [], "answer", 0, response_text=f"\\boxed{{{answer}}}", reward=float(right))


def shape(name: str, gold: str) -> list[Trajectory]:
    """A group of 16 samples of `gold` in the named shape (wrong answers first, so that
    a tie goes to them)."""
    distinct = [f"{k + 2}x + {k + 3}" for k in range(14)]  # the normaliser cannot tell these apart from equal
    if name == "agree":
        wrong = ["7x + 1"] * 4
        rights = 12
    elif name == "hidden":
        wrong = ["\\sqrt{12}", "2\\sqrt{3}"] * 3
        rights = 4
    elif name == "split":
        wrong, rights = distinct[:10], 6
    else:
        wrong, rights = distinct, 2
    return [sample(i, a, False) for i, a in enumerate(wrong)] + [
        sample(len(wrong) + j, gold, True) for j in range(rights)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=20)
    args = parser.parse_args()
    golds = [json.loads(line)["answer"] for line in DATA.open()][: args.problems]
    majority_correct(Group(Problem("p", "", "1"), shape("hidden", "1")))  # start the grading worker
    ways = {"normaliser": 0, "ours": None, "unbounded": UNBOUNDED}
    result: dict = {"problems": len(golds), "n": 16, "shapes": {}}
    for name in ("agree", "hidden", "split", "spread"):
        row: dict = {}
        for way, budget in ways.items():
            times, right = [], 0
            for gold in golds:
                group = Group(Problem("p", "", gold), shape(name, gold))
                t0 = time.perf_counter()
                right += majority_correct(group, budget=budget)
                times.append(time.perf_counter() - t0)
            row[way] = {"s_per_problem": round(statistics.median(times), 4), "maj_at_n": round(right / len(golds), 3)}
        result["shapes"][name] = row
        print(name, json.dumps(row), flush=True)
    spread = result["shapes"]["spread"]
    result["worst_s_per_problem_ours"] = max(r["ours"]["s_per_problem"] for r in result["shapes"].values())
    result["spread_ratio_unbounded_to_ours"] = round(
        spread["unbounded"]["s_per_problem"] / max(spread["ours"]["s_per_problem"], 1e-9), 1
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
