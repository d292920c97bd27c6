"""Readers of other projects' grader tests for build_grader_checks.py: each turns one
test file's shape into (gold, prediction, label) rows, from literals only (a test's
syntax tree, or a JSON table of cases it loads), with the line each row stands on."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator

from check_asserts import asserted, read_asserted_calls, read_notebook
from check_rows import (
    GOLD_NAMES,
    LABEL_NAMES,
    PRED_NAMES,
    VERDICT_WORDS,
    Row,
    Shape,
    as_label,
    as_text,
    literal,
    verdict_of,
)


def _grader_settings(fn: ast.FunctionDef, skip: set[str]) -> str:
    """The constant keyword arguments the test passes to its grader call (in its body:
    a decorator's keywords are its rows')."""
    for node in (n for stmt in fn.body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call) and node.keywords:
            kws = []
            for kw in node.keywords:
                if kw.arg is None or kw.arg in skip:
                    continue
                try:
                    kws.append(f"{kw.arg}={literal(kw.value)!r}")
                except ValueError:
                    kws.append(f"{kw.arg}={ast.unparse(kw.value)}")
            if kws:
                return ", ".join(kws)
    return ""


def _parametrize(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], ast.List] | None:
    """The column names and the table of a parametrized test: pytest's names its
    columns in a string, ``parameterized.expand`` by the test's own arguments."""
    for deco in fn.decorator_list:
        if not isinstance(deco, ast.Call) or not deco.args:
            continue
        name = ast.unparse(deco.func)
        if name.endswith("mark.parametrize") and len(deco.args) >= 2 and isinstance(deco.args[1], ast.List):
            try:
                columns = literal(deco.args[0])  # "gold,pred,expected" or ("gold", "pred", "expected")
            except ValueError:
                continue
            if isinstance(columns, str):
                columns = columns.split(",")
            if isinstance(columns, tuple | list) and all(isinstance(c, str) for c in columns):
                return [c.strip() for c in columns], deco.args[1]
        if name.endswith("parameterized.expand") and isinstance(deco.args[0], ast.List):
            return [a.arg for a in fn.args.args if a.arg != "self"], deco.args[0]
        if name.endswith(("parameterized.named_parameters", "parameterized.parameters")):
            # absl's: each row one argument of the decorator, ``dict(gold=..., ...)``
            table = deco.args[0] if len(deco.args) == 1 and isinstance(deco.args[0], ast.List) else None
            return [a.arg for a in fn.args.args if a.arg != "self"], table or ast.List(deco.args)
    return None


def _rows_of(table: ast.List) -> Iterator[tuple[int, list[ast.AST]]]:
    for elt in table.elts:
        if isinstance(elt, ast.Tuple):
            yield elt.lineno, elt.elts
        elif isinstance(elt, ast.Call) and ast.unparse(elt.func).endswith("param"):
            yield elt.lineno, elt.args
        elif isinstance(elt, ast.Dict):  # one column of dicts
            yield elt.lineno, [elt]
        elif isinstance(elt, ast.Call) and ast.unparse(elt.func) == "dict" and not elt.args:
            keys: list[ast.expr | None] = [ast.Constant(k.arg) for k in elt.keywords]
            yield elt.lineno, [ast.Dict(keys, [k.value for k in elt.keywords])]


def read_parametrize(tree: ast.Module, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """Rows of ``@pytest.mark.parametrize("gold,pred,expected[,more]", [...])`` (or
    ``@parameterized.expand``), or of one column of dicts holding those keys; the
    extra columns are settings of that row.  A test without a label column states
    one verdict for all its rows in its body (``_body_label``)."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or (p := _parametrize(fn)) is None:
            continue
        names, table = p
        body_label = _body_label(fn, shape.verdict)
        call = _grader_settings(fn, set(names))
        for line, values in _rows_of(table):
            if len(values) == 1 and isinstance(values[0], ast.Dict):  # {"completion": ..., "answer": ...}
                row = {
                    k.value: v
                    for k, v in zip(values[0].keys, values[0].values, strict=True)
                    if isinstance(k, ast.Constant)
                }
            elif len(values) == len(names):
                row = dict(zip(names, values, strict=True))
            else:
                skipped.append(f"{fn.name}:{line}")
                continue
            gold = next((n for n in row if n in shape.gold), None)
            pred = next((n for n in row if n in shape.pred), None)
            label = next((n for n in row if n in shape.label), None)
            if gold is None or pred is None or (label is None and body_label is None):
                continue
            try:
                g, q = as_text(literal(row[gold])), as_text(literal(row[pred]))
                l = body_label if label is None else as_label(literal(row[label]), shape.wrong)
            except ValueError:
                skipped.append(f"{fn.name}:{line}")
                continue
            if g is None or q is None or l is None:
                skipped.append(f"{fn.name}:{line}")
                continue
            extra = [f"{n}={ast.unparse(row[n])}" for n in names if n in row and n not in (gold, pred, label)]
            yield Row(g, q, l, line, fn.name, ", ".join(filter(None, [call, *extra])))


def read_symmetric_pairs(tree: ast.Module, skipped: list[str], shape: Shape) -> Iterator[Row]:
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
                a, b = (as_text(literal(v)) for v in values)
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
        if (
            name.endswith("assertEqual")
            and len(call.args) == 2
            and ast.unparse(call.args[0]) in {f"{n}[0]" for n in result_names}
        ):
            try:
                return as_label(literal(call.args[1]))
            except ValueError:
                return None
    if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1:
        left = ast.unparse(stmt.test.left)
        if left in result_names and isinstance(stmt.test.ops[0], ast.Eq | ast.Is):
            try:
                return as_label(literal(stmt.test.comparators[0]))
            except ValueError:
                return None
    return None


def read_calls(tree: ast.Module, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """Test functions that call a grader with literal (or literally assigned) gold
    and prediction, then assert its verdict; each call with its first assertion."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test"):
            continue
        values: dict[str, ast.AST] = {}
        pending: tuple[int, str, str, set[str]] | None = None
        for stmt in fn.body:
            if isinstance(stmt, ast.For):
                yield from _looped_pairs(stmt, values, fn.name)
                continue
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


def _looped_pairs(loop: ast.For, values: dict[str, ast.AST], test: str) -> Iterator[Row]:
    """``for test_in, test_out in pairs: self.assertTrue(is_equiv(test_in, test_out))``
    over a list of literal pairs assigned before it: a row per pair, on the pair's line."""
    table = values.get(loop.iter.id) if isinstance(loop.iter, ast.Name) else None
    names = [t.id for t in getattr(loop.target, "elts", []) if isinstance(t, ast.Name)]
    if not isinstance(table, ast.List) or len(names) != 2 or len(loop.body) != 1:
        return
    label = _assertion_label(loop.body[0], set())
    if label is None:
        return
    for pair in table.elts:
        if isinstance(pair, ast.Tuple) and len(pair.elts) == 2:
            found = _graded_pair(loop.body[0], {**values, **dict(zip(names, pair.elts, strict=True))})
            if found is not None:
                yield Row(found[0], found[1], label, pair.lineno, test, "")


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
            g_text, p_text = as_text(literal(gold)), as_text(literal(pred))
        except ValueError:
            continue
        if g_text is not None and p_text is not None:
            return g_text, p_text
    return None


def _is_verdict(node: ast.expr, verdict: str) -> bool:
    """Whether `node` is the verdict expression itself: ``not grade(given, gt)`` ends
    like ``grade(given, gt)`` but states the opposite."""
    return not isinstance(node, ast.UnaryOp) and ast.unparse(node).endswith(verdict)


def _body_label(fn: ast.FunctionDef | ast.AsyncFunctionDef, verdict: str) -> bool | None:
    """The verdict a parametrized test without a label column asserts for every row
    (``assert score(answer, target).status == "correct"``, ``assert grader(given, gt)
    is True``, ``assert not grader(pred, gold, kind)``), where `verdict` is how the
    asserted expression ends (``.status``, ``grader(given, gt)``), when it asserts one."""
    found = {
        v
        for node in ast.walk(fn)
        if isinstance(node, ast.Assert)
        if (v := asserted(node.test, lambda n: _is_verdict(n, verdict))) is not None
    }
    found |= {
        v
        for node in ast.walk(fn)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
        if ast.unparse(node.left).endswith(verdict) and (v := verdict_of(node.comparators[0])) is not None
    }
    return found.pop() if len(found) == 1 else None


def read_batches(tree: ast.Module, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """Tests that grade literal lists (``completions = [...]``, ``solutions = [...]``)
    and assert each result by index (``assertEqual(rewards[1], 1.0)``, ``assert
    rewards[1] == 1.0``)."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test"):
            continue
        lists: dict[str, list] = {}
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                try:
                    value = literal(stmt.value)
                except ValueError:
                    continue
                if isinstance(value, list):
                    lists[stmt.targets[0].id] = value
        golds = next((lists[n] for n in shape.gold if n in lists), None)
        preds = next((lists[n] for n in shape.pred if n in lists), None)
        if golds is None or preds is None or len(golds) != len(preds):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("assertEqual") and len(node.args) == 2:
                at, expected = node.args
            elif isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
                at, expected = node.test.left, node.test.comparators[0]
            else:
                continue
            if not (isinstance(at, ast.Subscript) and isinstance(at.slice, ast.Constant)):
                continue
            i, label = at.slice.value, verdict_of(expected)
            if not isinstance(i, int) or not 0 <= i < len(golds) or label is None:
                skipped.append(f"{fn.name}:{node.lineno}")
                continue
            g, p = as_text(golds[i]), as_text(preds[i])
            if g is not None and p is not None:
                yield Row(g, p, label, node.lineno, fn.name, f"batch item {i}")


def read_json_cases(text: str, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """A JSON list of case objects (``{"output": ..., "target": ..., "expected": "C"}``)
    that a parametrized test loads; each case's line is where its object opens."""
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return
        case, end = decoder.raw_decode(text, at)
        line = text.count("\n", 0, at) + 1
        gold = next((case[n] for n in shape.gold if n in case), None)
        pred = next((case[n] for n in shape.pred if n in case), None)
        label = next((VERDICT_WORDS.get(case[n]) for n in LABEL_NAMES if n in case), None)
        if isinstance(gold, str) and isinstance(pred, str) and label is not None:
            yield Row(gold, pred, label, line, "cases", str(case.get("source", "")))
        else:
            skipped.append(f"case:{line}")
        at = end


def read(reader: str, text: str, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """The rows of one file by the named reader (JSON tables and notebooks are read as text)."""
    if reader == "json_cases":
        return read_json_cases(text, skipped, shape)
    if reader == "notebook":
        return read_notebook(text, skipped, shape)
    tree = ast.parse(text.expandtabs(8))  # hendrycks/math mixes tabs and spaces
    return READERS[reader](tree, skipped, shape)


READERS: dict[str, Callable[[ast.Module, list[str], Shape], Iterator[Row]]] = {
    "parametrize": read_parametrize,
    "symmetric_pairs": read_symmetric_pairs,
    "calls": read_calls,
    "asserted_calls": read_asserted_calls,
    "batches": read_batches,
}
