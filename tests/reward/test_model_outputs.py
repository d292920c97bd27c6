"""The grader on real model responses (data/model_outputs.jsonl.gz: Qwen2.5-Math's own
example of its evaluation harness's output, 8 samples on each of 100 MATH problems,
built by data/build_model_outputs.py), in both modes.

Every verdict is held to data/model_outputs_verdicts.jsonl (rewrite it with ``python
benchmarks/grader_agreement.py --update-verdicts`` when a change is meant to move one),
and each verdict that differs from the harness's is listed with its reason in
data/model_outputs_policy.json.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rstar2_async.reward import score

DATA = Path(__file__).parent / "data"
with gzip.open(DATA / "model_outputs.jsonl.gz", "rt") as f:
    CASES = [json.loads(line) for line in f]
EXPECTED = {v["id"]: v for v in map(json.loads, (DATA / "model_outputs_verdicts.jsonl").open())}
POLICY = json.loads((DATA / "model_outputs_policy.json").read_text())


@pytest.fixture(scope="module")
def graded() -> dict[str, dict[str, bool]]:
    return {
        c["id"]: {mode: score(c["prediction"], c["gold"], mode=mode) == 1.0 for mode in ("lenient", "strict")}
        for c in CASES
    }


def test_the_set_is_eight_samples_of_a_hundred_problems_with_their_source() -> None:
    assert len(CASES) == 800 and len({c["source"]["line"] for c in CASES}) == 100
    assert all(c["source"]["commit"] and c["source"]["licence"] == "MIT" for c in CASES)
    assert set(EXPECTED) == {c["id"] for c in CASES}, "rewrite the verdicts: the set changed"


def test_every_verdict_is_the_expected_one(graded: dict[str, dict[str, bool]]) -> None:
    changed = [
        f"{c['id']} {mode}: {graded[c['id']][mode]} (expected {EXPECTED[c['id']][f'{mode}_raw']})"
        for c in CASES
        for mode in ("lenient", "strict")
        if graded[c["id"]][mode] != EXPECTED[c["id"]][f"{mode}_raw"]
    ]
    assert changed == [], "verdicts changed without model_outputs_verdicts.jsonl:\n" + "\n".join(changed)


def test_where_we_differ_from_the_harness_the_case_is_listed(graded: dict[str, dict[str, bool]]) -> None:
    differ = {c["id"] for c in CASES for mode in ("lenient", "strict") if graded[c["id"]][mode] != c["label"]}
    assert differ == set(POLICY) and all(reason.startswith("policy:") for reason in POLICY.values())
