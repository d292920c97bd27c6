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
import ast
import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "grader_checks.jsonl"
GOLD_NAMES = ("gold", "ground_truth", "answer", "reference", "test_in", "solution")
PRED_NAMES = ("pred", "prediction", "completions", "test_out", "completion", "model_response")
LABEL_NAMES = ("expected", "result", "expected_correct")


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
]


@dataclass(frozen=True)
class Row:
    gold: str
    prediction: str
    label: bool
    line: int
    test: str
    settings: str


def _literal(node: ast.AST) -> object:
    """A literal's value (``r"..."``, numbers, ``[[{"content": x}]]``), else raise ValueError."""
    return ast.literal_eval(node)


def _text(value: object) -> str | None:
    """A gold or prediction as text: strings as they are, numbers written out, the
    first message of a chat completion (``[[{"content": x}]]``) or of a list."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        value = value["content"]
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _label(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    return None


def _grader_settings(fn: ast.FunctionDef, skip: set[str]) -> str:
    """The constant keyword arguments the test passes to its grader call."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and node.keywords:
            kws = []
            for kw in node.keywords:
                if kw.arg is None or kw.arg in skip:
                    continue
                try:
                    kws.append(f"{kw.arg}={_literal(kw.value)!r}")
                except ValueError:
                    kws.append(f"{kw.arg}={ast.unparse(kw.value)}")
            if kws:
                return ", ".join(kws)
    return ""


def _parametrize(fn: ast.FunctionDef) -> tuple[list[str], ast.List] | None:
    for deco in fn.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and ast.unparse(deco.func).endswith("mark.parametrize")
            and len(deco.args) >= 2
            and isinstance(deco.args[0], ast.Constant)
            and isinstance(deco.args[1], ast.List)
        ):
            return [a.strip() for a in deco.args[0].value.split(",")], deco.args[1]
    return None


def _rows_of(table: ast.List) -> Iterator[tuple[int, list[ast.AST]]]:
    for elt in table.elts:
        if isinstance(elt, ast.Tuple):
            yield elt.lineno, elt.elts
        elif isinstance(elt, ast.Call) and ast.unparse(elt.func).endswith("param"):
            yield elt.lineno, elt.args


def read_parametrize(tree: ast.Module, skipped: list[str]) -> Iterator[Row]:
    """Rows of ``@pytest.mark.parametrize("gold,pred,expected[,more]", [...])``; the
    extra columns are settings of that row."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or (p := _parametrize(fn)) is None:
            continue
        names, table = p
        gold = next((n for n in names if n in GOLD_NAMES), None)
        pred = next((n for n in names if n in PRED_NAMES), None)
        label = next((n for n in names if n in LABEL_NAMES), None)
        if gold is None or pred is None or label is None:
            continue
        call = _grader_settings(fn, set(names))
        for line, values in _rows_of(table):
            if len(values) != len(names):
                skipped.append(f"{fn.name}:{line}")
                continue
            row = dict(zip(names, values, strict=True))
            try:
                g, q, l = _text(_literal(row[gold])), _text(_literal(row[pred])), _label(_literal(row[label]))
            except ValueError:
                skipped.append(f"{fn.name}:{line}")
                continue
            if g is None or q is None or l is None:
                skipped.append(f"{fn.name}:{line}")
                continue
            extra = [f"{n}={ast.unparse(row[n])}" for n in names if n not in (gold, pred, label)]
            yield Row(g, q, l, line, fn.name, ", ".join(filter(None, [call, *extra])))


def read_symmetric_pairs(tree: ast.Module, skipped: list[str]) -> Iterator[Row]:
    """``@parametrize("output_pair", [(a, b), ...])`` in ``test_correct_*`` (True) and
    ``test_incorrect_*`` (False) tests, which assert both orders: two cases each."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or (p := _parametrize(fn)) is None:
            continue
        if fn.name.startswith("test_correct"):
            label = True
        elif fn.name.startswith("test_incorrect"):
            label = False
        else:
            continue
        for line, values in _rows_of(p[1]):
            try:
                a, b = (_text(_literal(v)) for v in values)
            except ValueError:
                skipped.append(f"{fn.name}:{line}")
                continue
            if a is None or b is None:
                skipped.append(f"{fn.name}:{line}")
                continue
            yield Row(a, b, label, line, fn.name, "both orders asserted")
            yield Row(b, a, label, line, fn.name, "both orders asserted")


def _assertion_label(stmt: ast.stmt, result_names: set[str]) -> bool | None:
    """The verdict a statement asserts about a grader's result, or None:
    ``assertTrue/False(is_equiv(...))``, ``assertEqual(rewards[0], 1.0)``,
    ``assert reward == 1.0``, ``assert out.is_correct is True``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        name = ast.unparse(call.func)
        if name.endswith("assertTrue"):
            return True
        if name.endswith("assertFalse"):
            return False
        if name.endswith("assertEqual") and len(call.args) == 2:
            if ast.unparse(call.args[0]) in {f"{n}[0]" for n in result_names}:
                try:
                    return _label(_literal(call.args[1]))
                except ValueError:
                    return None
    if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1:
        left = ast.unparse(stmt.test.left)
        if left in result_names and isinstance(stmt.test.ops[0], ast.Eq | ast.Is):
            try:
                return _label(_literal(stmt.test.comparators[0]))
            except ValueError:
                return None
    return None


def read_calls(tree: ast.Module, skipped: list[str]) -> Iterator[Row]:
    """Test functions that call a grader with literal (or literally assigned) gold
    and prediction, then assert its verdict; each call with its first assertion."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test"):
            continue
        values: dict[str, ast.AST] = {}
        pending: tuple[int, str, str, set[str]] | None = None
        for stmt in fn.body:
            if pending is not None and (label := _assertion_label(stmt, pending[3])) is not None:
                yield Row(pending[1], pending[2], label, pending[0], fn.name, "")
                pending = None
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                values[stmt.targets[0].id] = stmt.value
            found = _graded_pair(stmt, values)
            if found is not None:
                targets = {t.id for t in getattr(stmt, "targets", []) if isinstance(t, ast.Name)}
                pending = (stmt.lineno, found[0], found[1], targets | {"output"})
                if isinstance(stmt, ast.Expr) and (label := _assertion_label(stmt, set())) is not None:
                    yield Row(found[0], found[1], label, stmt.lineno, fn.name, "")
                    pending = None
        if pending is not None:
            skipped.append(f"{fn.name}:{pending[0]}")


def _graded_pair(stmt: ast.stmt, values: dict[str, ast.AST]) -> tuple[str, str] | None:
    """(gold, prediction) of the grader call in `stmt`: keywords named like
    ``answer=``/``completions=``, or ``grader(gold_name, pred_name)`` /
    ``accuracy_reward(completion, solution)`` with variables assigned literals."""
    for call in ast.walk(stmt):
        if not isinstance(call, ast.Call):
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        gold = next((kw[n] for n in GOLD_NAMES if n in kw), None)
        pred = next((kw[n] for n in PRED_NAMES if n in kw), None)
        if gold is None or pred is None:
            names = [a.id for a in call.args if isinstance(a, ast.Name)]
            if len(names) != 2 or len(call.args) != 2:
                continue
            g = next((n for n in names if n in GOLD_NAMES), None)
            q = next((n for n in names if n in PRED_NAMES), None)
            if g is None or q is None or g not in values or q not in values:
                continue
            gold, pred = values[g], values[q]
        try:
            g_text, p_text = _text(_literal(gold)), _text(_literal(pred))
        except ValueError:
            continue
        if g_text is not None and p_text is not None:
            return g_text, p_text
    return None


READERS: dict[str, Callable[[ast.Module, list[str]], Iterator[Row]]] = {
    "parametrize": read_parametrize,
    "symmetric_pairs": read_symmetric_pairs,
    "calls": read_calls,
}


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


def build(mirror: Path) -> tuple[list[dict], dict[str, list[str]]]:
    cases: dict[tuple[str, str, bool], dict] = {}
    skipped: dict[str, list[str]] = {}
    for src in SOURCES:
        git_dir = mirror / src.repo.replace("/", "+") / "repo"
        for path in src.paths:
            text = subprocess.run(
                ["git", "-C", str(git_dir), "show", f"{src.commit}:{path}"], check=True, capture_output=True, text=True
            ).stdout
            tree = ast.parse(text.expandtabs(8))  # hendrycks/math mixes tabs and spaces
            lost = skipped.setdefault(f"{src.repo}/{path}", [])
            for row in READERS[src.reader](tree, lost):
                if row.test in src.skip_tests or not row.gold.strip():
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
            print(f"  skipped in {where}: {len(lost)} rows without literal values or a verdict ({', '.join(lost[:6])}...)")


if __name__ == "__main__":
    main()
