"""A tool of your own: exact arithmetic without running code.

Use it with ``[rollout] tools = ["rstar2_async.rollout.tools:python", "examples.calculator_tool:calculator"]``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from rstar2_async.rollout import ToolContext, ToolOutput

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class Calculator:
    """Evaluates ``+ - * /`` over integers and decimals exactly (as fractions)."""

    name = "calculator"
    description = "Evaluate an arithmetic expression exactly, e.g. 48213 * 9981 or (1/3 + 1/6) * 12."
    parameters = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The expression to evaluate."}},
        "required": ["expression"],
    }

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        # Cheap and bounded, so it runs right here; a slow tool would honour context.timeout_s.
        try:
            value = _evaluate(ast.parse(arguments["expression"], mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError) as exc:
            return ToolOutput(f"Error: {exc}", status="error")
        return ToolOutput(str(value.numerator if value.denominator == 1 else value))


def _evaluate(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


calculator = Calculator()
