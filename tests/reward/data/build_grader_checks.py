"""Writes grader_checks.jsonl: (gold, prediction, label) triples taken mechanically from
other projects' own grader tests, a check set not written beside our grader.

Run from the repository root, after fetching each source repository at the commit
named below into ``/work/.mirror/OWNER+NAME/repo`` (or ``--mirror DIR``)::

    python tests/reward/data/build_grader_checks.py

Nothing here is hand-edited: each case is read from a test file's syntax tree (a
``pytest.mark.parametrize`` row, or a test function's literal arguments and its
assertion), with the repository, commit, path, line, licence, test name and the
settings that test ran its grader with.  The label is the source's own expected
verdict.  Rows whose values are not literals (``5 / 2``, ``None``) are skipped and
counted.  Cases are deduplicated by (gold, prediction, label); a pair two sources
label differently is kept once per label and listed in GRADER_CHECKS.md.

``half`` splits the set once, by a fixed hash of the case: only ``tuning`` cases may
be read while changing the grader; ``reporting`` cases are for the figures.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from check_readers import read
from check_rows import Shape

HERE = Path(__file__).resolve().parent
OUT = HERE / "grader_checks.jsonl"


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    licence: str
    paths: tuple[str, ...]
    reader: str
    """Which reader below understands these files' test shape."""
    skip_tests: tuple[str, ...] = ()
    """Tests of another grader (multiple-choice letters) that are no math answers."""
    skip_settings: tuple[str, ...] = ()
    """How the settings of rows that are no math answers begin (a grader told the
    answer is a multiple-choice letter)."""
    shape: Shape = field(default_factory=Shape)
    """Where this source's tests keep gold and prediction, when not under the usual names."""


_sieval = functools.partial(Source, "scitix/sieval", "f2c86c3fdbb4f1a17724e3f220bfe8001d1af066", "Apache-2.0")
"""sieval's tests, read in several shapes (one Source each)."""


SOURCES = [
    Source(
        "huggingface/Math-Verify",
        "5d148cfaaf99214c2e4ffb4bc497ab042c592a7a",
        "Apache-2.0",
        (
            "tests/test_all.py",
            "tests/test_boxed.py",
            "tests/test_numina_cases.py",
            "tests/test_open_thoughts.py",
            "tests/test_yujianll.py",
            "tests/test_strict.py",
        ),
        "parametrize",
    ),
    Source(
        "huggingface/lighteval",
        "3fd15266bc8448b797e61462d293aa3fd40b3580",
        "MIT",
        ("tests/unit/metrics/test_extractive_match.py",),
        "parametrize",
        skip_tests=("test_extraction_abc", "test_multilingual_extraction_abc"),
    ),
    Source(
        "NVIDIA/NeMo-Skills",
        "0b012df8a09cd4730d31b16e90a0d8f13d145fb8",
        "Apache-2.0",
        ("tests/test_math_equal.py",),
        "symmetric_pairs",
    ),
    Source(
        "hendrycks/math",
        "985bdc1696e88e8643f081a0ff4719da39f2ae2a",
        "MIT",
        ("modeling/math_equivalence_test.py",),
        "calls",
    ),
    Source(
        "inclusionAI/AReaL",
        "4aef98d8d818af55b43621aaadba047ae10f4e77",
        "Apache-2.0",
        ("tests/test_math_verify_reward.py",),
        "calls",
    ),
    Source(
        "huggingface/open-r1",
        "1416fa0cf21595d2083b399a2a0bbddd7f6e9563",
        "Apache-2.0",
        ("tests/test_rewards.py",),
        "calls",
    ),
    Source(
        "UKGovernmentBEIS/inspect_ai",
        "499e6152e7b8fc8cbd8ac5283536572aa6e4ab17",
        "MIT",
        ("tests/scorer/math_cases.json",),
        "json_cases",
        shape=Shape(gold=("target",), pred=("output",)),
    ),
    Source(
        "UKGovernmentBEIS/inspect_ai",
        "499e6152e7b8fc8cbd8ac5283536572aa6e4ab17",
        "MIT",
        ("tests/scorer/test_math.py",),
        "parametrize",
        shape=Shape(gold=("target",), pred=("answer", "output")),
    ),
    Source(
        "UKGovernmentBEIS/inspect_ai",
        "499e6152e7b8fc8cbd8ac5283536572aa6e4ab17",
        "MIT",
        ("tests/scorer/test_math.py",),
        "asserted_calls",
        shape=Shape(call=("_score_answer", 1, 0)),
    ),
    Source(
        "modelscope/ms-swift",
        "3602360a562313afbf2ef6065fdf61f271a2c5b9",
        "Apache-2.0",
        ("tests/utils/test_rewards.py",),
        "batches",
        shape=Shape(gold=("solutions",), pred=("completions",)),
    ),
    Source(
        "Ascend/MindSpeed-RL",
        "05a90d77cb6cfad8999e2aee21068284db959579",
        "MIT",
        ("tests/ut/utils/test_grader.py",),
        "asserted_calls",
        shape=Shape(call=("math_equal", 1, 0)),
    ),
    Source(
        "Ascend/MindSpeed-RL",
        "05a90d77cb6cfad8999e2aee21068284db959579",
        "MIT",
        ("tests/ut/models/test_verifier.py",),
        "asserted_calls",
        shape=Shape(call=("accuracy_reward", 1, 0)),
    ),
    Source(
        "NovaSky-AI/SkyThought",
        "0d190f11fd8e885bbe113aeccacba5ccde5b1102",
        "Apache-2.0",
        ("tests/evals/util/test_math_parsing.py",),
        "parametrize",
    ),
    Source(
        "allenai/open-instruct",
        "e6c3044aa6201c8bfa4573c1b03142af599e730d",
        "Apache-2.0",
        ("open_instruct/test_ground_truth_utils.py",),
        "parametrize",
        # The other verifiers of that file match text or score F1; only GSM8K's is math.
        skip_tests=("test_basic_scenarios", "test_puzzle_matcher_scenarios", "test_single_label", "test_list_labels"),
        shape=Shape(gold=("label",), pred=("prediction",), label=("expected_score",)),
    ),
    Source(
        "PrimeIntellect-ai/verifiers",
        "a60a606ecc4d309247edf9ff92c3eabca362781f",
        "MIT",
        ("tests/test_math_rubric.py",),
        "parametrize",
        shape=Shape(gold=("answer",), pred=("completion",), verdict="['correct_answer']"),
    ),
    Source(
        "MARIO-Math-Reasoning/MARIO_EVAL",
        "13584f20b71ffc6e9873e86481054849ed015065",
        "MIT",  # declared by its setup.py's classifier; the repository has no LICENSE file
        ("math_evaluation/tests/test_is_equiv.py",),
        "calls",
    ),
]


# Added in the session of 2026-12-07 (tenth): their reporting halves were graded
# before any grader change made for these sources.
SOURCES += [
    Source(
        "THUDM/slime",
        "624b824a898ab0ec1fcb4d373004c7f3852bf515",
        "Apache-2.0",
        ("tests/test_rm_math.py",),
        "parametrize",
        shape=Shape(gold=("gt",), pred=("given",), verdict="grade_answer_mathd(given, gt)"),
    ),
    Source(
        "THUDM/slime",
        "624b824a898ab0ec1fcb4d373004c7f3852bf515",
        "Apache-2.0",
        ("tests/test_rm_math.py", "tests/test_rm_math_dapo.py", "tests/test_rm_deepscaler.py"),
        "asserted_calls",
        shape=Shape(
            call=(
                (
                    "grade_answer_mathd",
                    "grade_answer_sympy",
                    "grade_answer_verl",
                    "is_correct_minerva",
                    "verify",
                    "get_deepscaler_rule_based_reward",
                ),
                1,
                0,
            )
        ),
    ),
    Source(
        "radixark/miles",
        "31f1ca961a94cb860cec3b2dea34ec332bfa8f76",
        "Apache-2.0",
        (
            "tests/fast/rollout/rm_hub/test_math_utils.py",
            "tests/fast/rollout/rm_hub/test_math_dapo_utils.py",
            "tests/fast/rollout/rm_hub/test_deepscaler.py",
        ),
        "parametrize",
        shape=Shape(
            gold=("ground_truth", "gt", "label"),
            pred=("given", "solution", "response"),
            label=("expected", "expected_correct", "expected_acc"),
        ),
    ),
    Source(
        "meta-pytorch/forge",
        "8cb21bef356349ae72a2e56afde14845c9937bbe",
        "BSD-3-Clause",
        ("tests/unit_tests/rl/test_math_reward.py",),
        "asserted_calls",
        shape=Shape(call=(("reward", "custom_reward"), 2, 1)),
    ),
    _sieval(
        ("tests/unit/community/test_ugmathbench.py",),
        "asserted_calls",
        # Its true/false, multiple-choice and open-ended answer kinds are no math answers.
        skip_settings=("'TF'", "'MCS'", "'MCM'", "'OE'"),
        shape=Shape(call=(("judge_answer", "math_equal"), 1, 0)),
    ),
    _sieval(
        ("tests/unit/community/test_ugmathbench.py",),
        "parametrize",
        shape=Shape(verdict="judge_answer(pred, gold, kind)"),
    ),
    _sieval(
        ("tests/unit/community/test_imo_bench.py",),
        "asserted_calls",
        shape=Shape(call=(("verify_math_answer", "_grade"), 0, 1)),
    ),
    _sieval(
        ("tests/unit/community/test_deepseek_math.py",),
        "asserted_calls",
        shape=Shape(call=("symbolic_equal", 1, 0)),
    ),
    _sieval(
        ("tests/unit/community/test_deepseek_math.py",),
        "parametrize",
        shape=Shape(gold=("reference",), pred=("prediction",), verdict="symbolic_equal(prediction, reference)"),
    ),
    Source(
        "hkust-nlp/dart-math",
        "219b32467b55f7c610195e148b56df3431e1a963",
        "MIT",
        ("nbs/04_eval.ipynb",),
        "notebook",
        shape=Shape(call=("eq", 0, 1)),
    ),
]


# Added in the session of 2026-12-07 (eleventh), their reporting halves graded before
# any grader change made for them.
SOURCES += [
    Source(
        "thinking-machines-lab/tinker-cookbook",
        "9dfcc3a2cf44432d621a01005073dc6d76a1e87a",
        "Apache-2.0",
        ("tinker_cookbook/recipes/math_rl/math_env_test.py",),
        "asserted_calls",
        shape=Shape(call=("grade_answer", 1, 0)),
    ),
    Source(
        "google/tunix",
        "c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3",
        "Apache-2.0",
        ("tests/utils/math_utils_test.py",),
        "parametrize",
        shape=Shape(gold=("ground_truth",), pred=("given_answer",)),
    ),
    Source(
        "huggingface/trl",
        "f2cd57710ae345ea6428ae95363267fcf38a3dc8",
        "Apache-2.0",
        ("tests/test_rewards.py",),
        "batches",
        shape=Shape(gold=("solution", "solutions"), pred=("completion", "completions")),
    ),
    # sieval's tests that its sources above did not reach: two tables of ugmathbench's
    # math_equal, the vote keys its math tasks share, and AGIEval's cloze grader.
    _sieval(
        ("tests/unit/community/test_ugmathbench.py",),
        "parametrize",
        shape=Shape(verdict="math_equal(pred, gold)"),
    ),
    _sieval(
        ("tests/unit/tasks/test__math_verify.py",),
        "parametrize",
        shape=Shape(gold=("a",), pred=("b",), verdict="normalize_vote(a) == normalize_vote(b)"),
    ),
    _sieval(
        ("tests/unit/community/test_agieval.py",),
        "asserted_calls",
        # Its letter-choice subsets are compared exactly and are no math answers.
        skip_settings=("'jec-qa", "'gaokao-physics", "'sat-math", "'gaokao-mathqa"),
        shape=Shape(call=("evaluate_single_sample", 2, 1)),
    ),
    _sieval(
        ("tests/unit/community/test_agieval.py",),
        "asserted_calls",
        shape=Shape(call=("is_equiv", 1, 0)),
    ),
]


# Added in the session of 2026-12-07 (twelfth), their reporting halves graded before
# any grader change made for them.
_aisbench = functools.partial(Source, "AISBench/benchmark", "29c363e38e9d1560e6f19eff582f6117943b6a77", "Apache-2.0")
"""AISBench's tests of its graders, each called as ``grader(prediction, reference)``."""

SOURCES += [
    Source(
        "NovaSky-AI/SkyRL",
        "a9564572eb8e91076be43c1bd5e4615e3de17265",
        "Apache-2.0",
        ("skyrl-gym/tests/test_aime.py",),
        "parametrize",
        # Its AIME environment rewards a wrong answer with -1 (its GSM8K one, below, with 0).
        shape=Shape(gold=("ground_truth",), pred=("output",), wrong=-1),
    ),
    Source(
        "NovaSky-AI/SkyRL",
        "a9564572eb8e91076be43c1bd5e4615e3de17265",
        "Apache-2.0",
        ("skyrl-gym/tests/test_gsm8k.py",),
        "parametrize",
        shape=Shape(gold=("ground_truth",), pred=("output",)),
    ),
    _aisbench(("tests/UT/datasets/test_geometry3k.py",), "asserted_calls", shape=Shape(call=("_grade_answer", 1, 0))),
    _aisbench(
        ("tests/UT/datasets/agieval/test_agieval.py", "tests/UT/datasets/agieval/test_math_equivalence.py"),
        "asserted_calls",
        shape=Shape(call=("is_equiv", 1, 0)),
    ),
    _aisbench(("tests/UT/datasets/test_math.py",), "asserted_calls", shape=Shape(call=("is_equiv", 1, 0))),
    _aisbench(("tests/UT/datasets/test_gsm8k.py",), "asserted_calls", shape=Shape(call=("is_equal", 1, 0))),
    Source(
        "stanford-crfm/helm",
        "63754d05db6f874e41a395880fb573890a13e791",
        "Apache-2.0",
        ("src/helm/benchmark/metrics/test_evaluate_reference_metrics.py",),
        "asserted_calls",
        # Its other metrics there (exact match, BLEU) compare text, not answers.
        shape=Shape(call=("final_number_exact_match", 0, 1)),
    ),
]


def case_half(gold: str, prediction: str) -> str:
    """The fixed split: a case's half depends on its text alone."""
    digest = hashlib.sha256(f"{gold}\x00{prediction}".encode()).digest()
    return "tuning" if digest[0] % 2 == 0 else "reporting"


_SHORT_CHARS = 40
"""A prediction this short, on one line and with no box, is a bare final answer: the
``boxed`` variant of the case wraps it in ``\\boxed{}`` as a model told to box
would write it."""


def boxed_variant(prediction: str) -> str:
    short = len(prediction) <= _SHORT_CHARS and "\n" not in prediction and "\\boxed" not in prediction
    return f"\\boxed{{{prediction}}}" if short else prediction


def case_id(gold: str, prediction: str, label: bool) -> str:
    return hashlib.sha256(f"{gold}\x00{prediction}\x00{label}".encode()).hexdigest()[:16]


def show(mirror: Path, repo: str, commit: str, path: str) -> str:
    """A file of a fetched repository at a commit (``mirror/OWNER+NAME/repo``)."""
    git_dir = mirror / repo.replace("/", "+") / "repo"
    return subprocess.run(
        ["git", "-C", str(git_dir), "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def build(mirror: Path) -> tuple[list[dict], dict[str, list[str]]]:
    cases: dict[tuple[str, str, bool], dict] = {}
    skipped: dict[str, list[str]] = {}
    for src in SOURCES:
        for path in src.paths:
            text = show(mirror, src.repo, src.commit, path)
            lost = skipped.setdefault(f"{src.repo}/{path}", [])
            for row in read(src.reader, text, lost, src.shape):
                if row.test in src.skip_tests or row.settings.startswith(src.skip_settings) or not row.gold.strip():
                    continue
                origin = {
                    "repo": src.repo,
                    "commit": src.commit,
                    "path": path,
                    "line": row.line,
                    "licence": src.licence,
                    "test": row.test,
                    "settings": row.settings,
                }
                key = (row.gold, row.prediction, row.label)
                if key in cases:
                    cases[key]["sources"].append(origin)
                    continue
                cases[key] = {
                    "id": case_id(*key),
                    "gold": row.gold,
                    "prediction": row.prediction,
                    "label": row.label,
                    "boxed": boxed_variant(row.prediction),
                    "half": case_half(row.gold, row.prediction),
                    "sources": [origin],
                }
    return list(cases.values()), skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    args = parser.parse_args()
    cases, skipped = build(args.mirror)
    with OUT.open("w") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    by_label = sum(c["label"] for c in cases)
    print(f"{len(cases)} cases ({by_label} equal, {len(cases) - by_label} not) -> {OUT}")
    for where, lost in skipped.items():
        if lost:
            print(
                f"  skipped in {where}: {len(lost)} rows without literal values or a verdict ({', '.join(lost[:6])}...)"
            )


if __name__ == "__main__":
    main()
