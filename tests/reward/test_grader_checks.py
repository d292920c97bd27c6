"""The grader against the check set taken from other projects' grader tests
(data/grader_checks.jsonl, built by data/build_grader_checks.py), both halves.

Every verdict is held to data/grader_checks_verdicts.jsonl: a change of the grader
that changes any verdict fails here until that file is rewritten with it
(``python benchmarks/grader_agreement.py --update-verdicts``), so the change shows in
review.  Beside it: strict mode accepts no wrong answer, and where math-verify judges
a case as labelled and lenient mode does not, the case is listed with its reason in
data/grader_checks_policy.json (see data/GRADER_CHECKS.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import pytest

from rstar2_async.reward import Grader

DATA = Path(__file__).parent / "data"
CASES = [json.loads(line) for line in (DATA / "grader_checks.jsonl").open()]
CASE_BY_ID = {c["id"]: c for c in CASES}
EXPECTED = {v["id"]: v for v in map(json.loads, (DATA / "grader_checks_verdicts.jsonl").open())}
POLICY = json.loads((DATA / "grader_checks_policy.json").read_text())
GRADED = ("lenient_raw", "lenient_boxed", "strict_raw", "strict_boxed")


def test_the_set_comes_from_five_projects_and_splits_by_its_hash() -> None:
    assert len({c["sources"][0]["repo"] for c in CASES}) >= 5
    assert sum(c["label"] for c in CASES) >= 100 and sum(not c["label"] for c in CASES) >= 50
    for case in CASES:
        for source in case["sources"]:
            assert source["commit"] and source["path"] and source["line"] > 0 and source["licence"]
        digest = hashlib.sha256(f"{case['gold']}\x00{case['prediction']}".encode()).digest()
        assert case["half"] == ("tuning" if digest[0] % 2 == 0 else "reporting")
    assert set(EXPECTED) == {c["id"] for c in CASES}, "rewrite the verdicts: the set changed"


async def _grade_all() -> dict[str, dict[str, bool]]:
    """Every graded verdict of every case, two graders of one worker each (a long
    timeout: on a loaded machine a slow comparison must not flip its verdict)."""
    got: dict[str, dict[str, bool]] = {c["id"]: {} for c in CASES}
    async with Grader(workers=1, timeout=60.0) as strict, Grader(workers=1, timeout=60.0, mode="lenient") as lenient:

        async def grade(grader: Grader, key: str, text: str, case: dict) -> None:
            got[case["id"]][key] = await grader.score(text, case["gold"]) == 1.0

        async def run(grader: Grader, mode: str) -> None:
            async with anyio.create_task_group() as tg:
                for case in CASES:
                    tg.start_soon(grade, grader, f"{mode}_raw", case["prediction"], case)
                    tg.start_soon(grade, grader, f"{mode}_boxed", case["boxed"], case)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, strict, "strict")
            tg.start_soon(run, lenient, "lenient")
    return got


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # one backend: the graders are tested on both elsewhere
async def test_every_verdict_is_the_expected_one() -> None:
    got = await _grade_all()
    changed = [
        f"{key} {EXPECTED[i][key]} -> {v[key]}: gold={case['gold']!r} prediction={case['prediction'][:80]!r}"
        for case in CASES
        for i, v in [(case["id"], got[case["id"]])]
        for key in GRADED
        if v[key] != EXPECTED[i][key]
    ]
    assert changed == [], "verdicts changed without grader_checks_verdicts.jsonl:\n" + "\n".join(changed)


def test_strict_accepts_no_wrong_answer_but_by_policy() -> None:
    wrong = [c for c in CASES if not c["label"] and not POLICY.get(c["id"], "").startswith("policy:")]
    assert [c["id"] for c in wrong if EXPECTED[c["id"]]["strict_raw"] or EXPECTED[c["id"]]["strict_boxed"]] == []


def test_where_math_verify_is_right_lenient_is_too_or_the_case_is_listed() -> None:
    unlisted = [
        c["id"]
        for c in CASES
        if EXPECTED[c["id"]]["math_verify_raw"] == c["label"] != EXPECTED[c["id"]]["lenient_raw"]
        and c["id"] not in POLICY
    ]
    assert unlisted == []
    assert all(POLICY[i] for i in POLICY)


def test_every_listed_case_still_needs_its_reason() -> None:
    """A case the grader now judges as labelled leaves the list: a stale "known miss"
    would hide that it was mended, and a stale policy a change of policy."""

    def needed(i: str) -> bool:
        label, v = CASE_BY_ID[i]["label"], EXPECTED[i]
        lenient_behind = v["math_verify_raw"] == label != v["lenient_raw"]
        return lenient_behind or (not label and (v["strict_raw"] or v["strict_boxed"]))

    assert [i for i in POLICY if not needed(i)] == []
