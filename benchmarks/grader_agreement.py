"""Grader agreement: our grader and math-verify, in the same run, on labelled sets and
on real models' replies.

- ``checks``: tests/reward/data/grader_checks.jsonl, (gold, prediction, label) triples
  taken mechanically from other projects' grader tests (build_grader_checks.py),
  split once into a ``tuning`` and a ``reporting`` half;
- ``project``: tests/reward/data/grader_pairs.jsonl, our own labelled responses;
- ``model_outputs``: tests/reward/data/model_outputs.jsonl.gz, 800 real model responses
  (Qwen2.5-Math's harness example, build_model_outputs.py) labelled by the verdict of
  the harness that graded them, its ``math_equal`` (math-verify reads their bare gold
  answers boxed); ``agreement_strict_raw`` too;
- ``zeroeval``: tests/reward/data/zeroeval_outputs.jsonl.gz, ZeroEval's stored JSON
  replies of three instruct models on MATH level 5, without a verdict per reply: per
  model, the accuracy (%) each grader gives them beside the accuracy ZeroEval published.

Per set (and per half of ``checks``):

- ``agreement_lenient_raw``: ``score(prediction, gold, mode="lenient")`` as written;
- ``agreement_lenient_boxed``: the same with short bare predictions wrapped in
  ``\\boxed{}`` (the case's ``boxed`` field);
- ``agreement_math_verify_raw``: the baseline, math-verify alone as its README uses
  it, ``verify(parse(gold), parse(prediction))`` (in this process's main thread, so
  its alarms work); the project's bare gold answers are parsed boxed;
- ``false_positives_strict``: wrong answers ``mode="strict"`` (training's reward)
  accepts, raw and boxed predictions together (for the project's set, also a right
  answer outside rStar2's format), but for the cases whose label our policy does not
  share (GRADER_CHECKS.md), listed apart in ``false_positives_strict_by_policy``;
- ``cases_math_verify_right_ours_wrong``: each case math-verify judges as labelled
  and lenient mode does not, with its policy reason (GRADER_CHECKS.md) or null;
- ``median_ms``, ``p99_ms``, ``worst_ms``: lenient grading time per case (the math-verify
  worker warm), against ``GRADING_TIMEOUT_S``;
- ``by_source`` (each half of ``checks``): lenient boxed and math-verify agreement per
  project a case was first taken from; a source added later is its own held-out set.

Prints each disagreement of the tuning half and the project set (never the reporting
half's cases), then one JSON line.  ``--update-verdicts`` also rewrites the expectation
files (grader_checks_verdicts.jsonl, model_outputs_verdicts.jsonl,
zeroeval_outputs_verdicts.jsonl) that tests/reward/test_grader_checks.py and
test_model_outputs.py hold the grader to.

    PYTHONPATH=. python benchmarks/grader_agreement.py [--update-verdicts]
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import statistics
import time
from pathlib import Path

from rstar2_async.reward import GRADING_TIMEOUT_S, score

DATA = Path(__file__).resolve().parents[1] / "tests" / "reward" / "data"
CHECKS = DATA / "grader_checks.jsonl"
VERDICTS = DATA / "grader_checks_verdicts.jsonl"
POLICY = DATA / "grader_checks_policy.json"
PAIRS = DATA / "grader_pairs.jsonl"
OUTPUTS = DATA / "model_outputs.jsonl.gz"
OUTPUT_VERDICTS = DATA / "model_outputs_verdicts.jsonl"
OUTPUT_POLICY = DATA / "model_outputs_policy.json"
REPLIES = DATA / "zeroeval_outputs.jsonl.gz"
REPLY_VERDICTS = DATA / "zeroeval_outputs_verdicts.jsonl"


def load(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        return [json.loads(line) for line in f]


def math_verify_verdict(prediction: str, gold: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(verify(parse(gold, parsing_timeout=5), parse(prediction, parsing_timeout=5), timeout_seconds=5))
    except Exception:  # math-verify swallows most errors itself; one left is a "no"
        return False


def grade(case: dict, math_verify_gold: str | None = None) -> dict:
    """Every verdict the report needs for one case, and lenient mode's time.
    `math_verify_gold`: the gold as math-verify is given it, where that is not the
    case's own (a bare answer, which it reads boxed)."""
    t0 = time.perf_counter()
    lenient = score(case["prediction"], case["gold"], mode="lenient") == 1.0
    elapsed = time.perf_counter() - t0
    strict = score(case["prediction"], case["gold"], mode="strict") == 1.0
    as_written = case["boxed"] == case["prediction"]  # a long prediction has no boxed variant
    return {
        "id": case["id"],
        "lenient_raw": lenient,
        "lenient_boxed": lenient if as_written else score(case["boxed"], case["gold"], mode="lenient") == 1.0,
        "strict_raw": strict,
        "strict_boxed": strict if as_written else score(case["boxed"], case["gold"], mode="strict") == 1.0,
        "math_verify_raw": math_verify_verdict(case["prediction"], math_verify_gold or case["gold"]),
        "_s": elapsed,
    }


CHECK_VERDICTS = ("lenient_raw", "lenient_boxed", "strict_raw", "strict_boxed", "math_verify_raw")
OUTPUT_VERDICTS_KEPT = ("lenient_raw", "strict_raw")


def write_verdicts(path: Path, cases: list[dict], verdicts: dict[str, dict], kept: tuple[str, ...]) -> None:
    """An expectation file: each case's verdicts under `kept`, a line a case."""
    with path.open("w") as f:
        for c in cases:
            f.write(json.dumps({"id": c["id"]} | {k: verdicts[c["id"]][k] for k in kept}) + "\n")


def project_cases() -> list[dict]:
    """The project's pairs that have a lenient label, in the checks' shape."""
    out = []
    for i, pair in enumerate(load(PAIRS)):
        if "lenient" not in pair["expected"]:
            continue
        response = pair["response"]
        out.append(
            {
                "id": f"project-{i}",
                "gold": "\\boxed{" + pair["gold"] + "}",  # a bare answer; math-verify reads it boxed
                "raw_gold": pair["gold"],
                "prediction": response,
                "boxed": response if "\\boxed" in response or len(response) > 40 else "\\boxed{" + response + "}",
                "label": pair["expected"]["lenient"],
                "strict_label": pair["expected"].get("strict", pair["expected"]["lenient"]),
                "note": pair["note"],
            }
        )
    return out


def agreement(cases: list[dict], verdicts: dict[str, dict], key: str) -> float:
    """The share of `cases` whose verdict under `key` is their label."""
    return round(sum(verdicts[c["id"]][key] == c["label"] for c in cases) / len(cases), 4)


def report(cases: list[dict], verdicts: dict[str, dict], policy: dict[str, str], show: bool) -> dict:
    n = len(cases)
    v = [verdicts[c["id"]] for c in cases]
    times = sorted(x["_s"] * 1000 for x in v)
    # A wrong answer strict mode accepts: raw (for the project, a right answer outside
    # rStar2's format too) or boxed.
    fp_strict = [
        c["id"]
        for c, x in zip(cases, v)
        if (x["strict_raw"] and not c.get("strict_label", c["label"])) or (x["strict_boxed"] and not c["label"])
    ]
    mv_right_ours_wrong = [
        {"id": c["id"], "policy": policy.get(c["id"])}
        for c, x in zip(cases, v)
        if x["math_verify_raw"] == c["label"] and x["lenient_raw"] != c["label"]
    ]
    if show:
        for c, x in zip(cases, v):
            for key in ("lenient_raw", "lenient_boxed", "math_verify_raw"):
                if x[key] != c["label"]:
                    print(
                        f"  {key} wrong (label {c['label']}): gold={c['gold']!r} pred={c['prediction'][:100]!r} [{c['id']}]"
                    )
    return {
        "cases": n,
        "agreement_lenient_raw": agreement(cases, verdicts, "lenient_raw"),
        "agreement_math_verify_raw": agreement(cases, verdicts, "math_verify_raw"),
        "agreement_lenient_boxed": agreement(cases, verdicts, "lenient_boxed"),
        "false_positives_strict": sum(i not in policy for i in fp_strict),
        "false_positives_strict_by_policy": [{"id": i, "policy": policy[i]} for i in fp_strict if i in policy],
        "cases_math_verify_right_ours_wrong": mv_right_ours_wrong,
        "median_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[min(n - 1, int(0.99 * n))], 3),
        "worst_ms": round(times[-1], 3),
    }


def by_source(cases: list[dict], verdicts: dict[str, dict]) -> dict[str, dict]:
    """Agreement per project a case was first taken from: a source added later is a
    held-out set of its own, unseen by the grader changes made before it."""
    out: dict[str, dict] = {}
    for repo in sorted({c["sources"][0]["repo"] for c in cases}):
        mine = [c for c in cases if c["sources"][0]["repo"] == repo]
        out[repo] = {
            "cases": len(mine),
            "agreement_lenient_boxed": agreement(mine, verdicts, "lenient_boxed"),
            "agreement_math_verify_raw": agreement(mine, verdicts, "math_verify_raw"),
        }
    return out


GRADERS = {
    "lenient_raw": "accuracy_lenient",
    "strict_raw": "accuracy_strict",
    "math_verify_raw": "accuracy_math_verify",
}


def accuracies(replies: list[dict], verdicts: dict[str, dict]) -> dict:
    """One model's accuracy (%) by each grader, beside the one its evaluation published."""
    n = len(replies)
    share = {name: round(100 * sum(verdicts[c["id"]][key] for c in replies) / n, 2) for key, name in GRADERS.items()}
    times = sorted(verdicts[c["id"]]["_s"] * 1000 for c in replies)
    return (
        {"replies": n, "published_accuracy": replies[0]["published_accuracy"]}
        | share
        | {
            "median_ms": round(statistics.median(times), 3),
            "worst_ms": round(times[-1], 3),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="grader agreement on the checks and the project's set")
    parser.add_argument("--update-verdicts", action="store_true", help=f"rewrite {VERDICTS.name}")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    checks = load(CHECKS)
    policy = json.loads(POLICY.read_text())
    score("\\boxed{\\pi/2}", "\\frac{\\pi}{2}")  # start the worker outside the timing
    verdicts = {c["id"]: grade(c) for c in checks}
    project = project_cases()
    for c in project:  # graded against the bare gold, as training grades it
        verdicts[c["id"]] = grade({**c, "gold": c["raw_gold"]}, c["gold"])
    out: dict = {"benchmark": "grader_agreement", "grading_timeout_ms": GRADING_TIMEOUT_S * 1000}
    for half in ("tuning", "reporting"):
        print(f"\n{half} half of the checks:" if half == "tuning" else "")
        cases = [c for c in checks if c["half"] == half]
        out[half] = report(cases, verdicts, policy, show=half == "tuning") | {"by_source": by_source(cases, verdicts)}
    print("\nproject set:")
    out["project"] = report(project, verdicts, policy, show=True)
    outputs = [c | {"boxed": c["prediction"]} for c in load(OUTPUTS)]  # long responses: no boxed variant
    replies = [c | {"boxed": c["prediction"]} for c in load(REPLIES)]
    for c in outputs + replies:  # bare MATH answers, which math-verify reads boxed (as for the project's set)
        verdicts[c["id"]] = grade(c, "\\boxed{" + c["gold"] + "}")
    print("\nmodel outputs (label: the harness's verdict):")
    out["model_outputs"] = report(outputs, verdicts, json.loads(OUTPUT_POLICY.read_text()), show=True) | {
        "agreement_strict_raw": agreement(outputs, verdicts, "strict_raw")
    }
    models = sorted({c["model"] for c in replies})
    out["zeroeval"] = {m: accuracies([c for c in replies if c["model"] == m], verdicts) for m in models}
    if args.update_verdicts:
        write_verdicts(VERDICTS, checks, verdicts, CHECK_VERDICTS)
        write_verdicts(OUTPUT_VERDICTS, outputs, verdicts, OUTPUT_VERDICTS_KEPT)
        write_verdicts(REPLY_VERDICTS, replies, verdicts, OUTPUT_VERDICTS_KEPT)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
