"""The reader of tests that assert a named grader's result on literal arguments, for
build_grader_checks.py: ``assert grader(pred, gold) is True``, ``assert not
grader(...)``, ``self.assertEqual(self.grader(prompt, pred, gold), 1.0)``, or the
result kept in a variable (``ok, pred = grader(...)``) and asserted after; in a
test function, or in a notebook's code cells."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from dataclasses import replace

from check_rows import Row, Shape, as_text, literal, verdict_of


def asserted(test: ast.expr, is_result: Callable[[ast.expr], bool]) -> bool | None:
    """The verdict an assertion states about a grader result: ``assert r``,
    ``assert not r``, ``assert r is True``, ``assert r.status == "incorrect"``,
    ``assert r == [1.0]``."""
    if is_result(test):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and is_result(test.operand):
        return False
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq | ast.Is):
        left = test.left.value if isinstance(test.left, ast.Attribute) else test.left
        if is_result(left):
            return verdict_of(test.comparators[0])
    return None


def _assertion_test(stmt: ast.stmt) -> ast.expr | None:
    """What a statement asserts, as an ``assert`` would write it:
    ``self.assertFalse(x)`` as ``not x``, ``self.assertEqual(x, v)`` and ``test_eq(x,
    v)`` as ``x == v``."""
    if isinstance(stmt, ast.Assert):
        return stmt.test
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    name = ast.unparse(call.func).split(".")[-1]
    if name == "assertTrue" and call.args:
        return call.args[0]
    if name == "assertFalse" and call.args:
        return ast.UnaryOp(ast.Not(), call.args[0])
    if name in ("assertEqual", "test_eq") and len(call.args) == 2:  # test_eq: fastcore's, in nbdev notebooks
        return ast.Compare(call.args[0], [ast.Eq()], [call.args[1]])
    return None


def _graders_made_in_setup(tree: ast.Module) -> dict[str, str]:
    """``self.custom = Grader(tolerance=1e-3)`` in a ``setUp``: the settings a test's
    ``self.custom(...)`` grades with, as written there."""
    made = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "setUp":
            for stmt in fn.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                    for target in stmt.targets:
                        if isinstance(target, ast.Attribute):
                            made[target.attr] = ast.unparse(stmt.value)
    return made


def read_asserted_calls(tree: ast.Module, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """Each call of the source's grader (its name and the positions of gold and
    prediction come from `shape`) with literal or literally assigned arguments,
    and the verdict asserted of it, directly or through the variable it was kept
    in.  The call's other arguments, and how ``setUp`` made the grader, are the
    row's settings."""
    made = _graders_made_in_setup(tree)
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test"):
            yield from _asserted_calls_in(fn.body, fn.name, made, skipped, shape)


def read_notebook(text: str, skipped: list[str], shape: Shape) -> Iterator[Row]:
    """The asserted grader calls of a Jupyter notebook's code cells (nbdev's tests:
    ``test_eq(grader(gold, pred), True)`` at a cell's top level), each on the line of
    the notebook file that holds it."""
    at = 0
    for number, cell in enumerate(json.loads(text)["cells"]):
        # Each piece of a cell's source is one JSON string in the file: found in order,
        # markdown cells' too, so that text a code cell repeats is not found early.
        pieces = [cell["source"]] if isinstance(cell["source"], str) else cell["source"]
        lines = []  # the file's line of each of the cell's lines
        for piece in pieces:
            found = text.index(encoded := json.dumps(piece, ensure_ascii=False), at)
            lines += [text.count("\n", 0, found) + 1] * len(piece.splitlines() or [""])
            at = found + len(encoded)
        if cell["cell_type"] != "code":
            continue
        source = "".join(pieces).splitlines(keepends=True)
        code = "".join("\n" if line.lstrip().startswith(("%", "!")) else line for line in source)
        try:
            tree = ast.parse(code)
        except SyntaxError:
            skipped.append(f"cell {number}")
            continue
        for row in _asserted_calls_in(tree.body, f"cell {number}", {}, skipped, shape):
            yield replace(row, line=lines[row.line - 1])


def _asserted_calls_in(
    body: list[ast.stmt], test: str, made: dict[str, str], skipped: list[str], shape: Shape
) -> Iterator[Row]:
    assert shape.call is not None
    graders, gold_at, pred_at = shape.call
    graders = (graders,) if isinstance(graders, str) else graders
    values: dict[str, ast.AST] = {}
    pending: tuple[int, tuple[str, str, str], set[str]] | None = None

    def pair(call: ast.expr) -> tuple[str, str, str] | None:
        """(gold, prediction, settings) of a call of the grader."""
        if not (isinstance(call, ast.Call) and ast.unparse(call.func).split(".")[-1] in graders):
            return None
        if len(call.args) <= max(gold_at, pred_at):
            return None
        args = [values.get(a.id, a) if isinstance(a, ast.Name) else a for a in call.args]
        try:
            g, p = as_text(literal(args[gold_at])), as_text(literal(args[pred_at]))
        except ValueError:
            return None
        if g is None or p is None:
            return None
        rest = [ast.unparse(a) for i, a in enumerate(call.args) if i not in (gold_at, pred_at)]
        rest += [ast.unparse(k) for k in call.keywords]
        grader = made.get(call.func.attr) if isinstance(call.func, ast.Attribute) else None
        return g, p, ", ".join(filter(None, [grader, *rest]))

    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
                target = target.elts[0]  # ``ok, extracted = grader(...)``: the verdict comes first
            if isinstance(target, ast.Name):
                values[target.id] = stmt.value
                if (found := pair(stmt.value)) is not None:
                    pending = (stmt.lineno, found, {target.id})
            continue
        if (test_expr := _assertion_test(stmt)) is None:
            continue
        direct: list[tuple[str, str, str]] = []

        def is_call(node: ast.expr, direct: list[tuple[str, str, str]] = direct) -> bool:
            found = pair(node)
            if found is not None:
                direct.append(found)
            return found is not None

        label = asserted(test_expr, is_call)
        if direct and label is not None:
            yield Row(*direct[0][:2], label, stmt.lineno, test, direct[0][2])
        elif direct:
            skipped.append(f"{test}:{stmt.lineno}")  # a verdict that is no label (partial credit)
        elif pending is not None:
            kept = pending[2]
            label = asserted(test_expr, lambda n, kept=kept: isinstance(n, ast.Name) and n.id in kept)
            if label is not None:
                yield Row(*pending[1][:2], label, pending[0], test, pending[1][2])
                pending = None
