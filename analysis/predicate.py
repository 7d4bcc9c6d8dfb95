"""Getstats's predicates (Auto-pilot's TEST ... stop condition), parsed rather than eval'd:
comparisons, and/or/not, arithmetic, numbers and the names of a metric's summary, e.g.
`hw_pct < 5 or count >= 30`."""

from __future__ import annotations

import ast
import operator

_OPERATORS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
              ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Add: operator.add, ast.Sub: operator.sub,
              ast.Mult: operator.mul, ast.Div: operator.truediv, ast.USub: operator.neg}
# The fields of stats.Summary (this module leaves scipy out: the file loader uses it).
PREDICATE_NAMES = ("count", "mean", "median", "low", "high", "min", "max", "sdev_pct", "hw_pct")


def check_predicate(text: str) -> ast.Expression:
    """The parsed predicate.

    Raises:
        ValueError: naming what is not allowed in it.
    """
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"predicate {text!r} is not an expression: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in PREDICATE_NAMES:
            raise ValueError(f"predicate {text!r}: unknown name '{node.id}' "
                             f"(known: {', '.join(PREDICATE_NAMES)})")
        if not isinstance(node, (ast.Expression, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp,
                                 ast.Not, ast.BinOp, ast.Name, ast.Load, ast.Constant, *_OPERATORS)):
            raise ValueError(f"predicate {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            raise ValueError(f"predicate {text!r}: only numbers, not {node.value!r}")
    return tree


def holds(text: str, names: dict[str, float]) -> bool:
    """Whether the predicate holds for a summary's `names` (dataclasses.asdict of a
    stats.Summary); NaN compares false, as it should."""

    def value(node: ast.AST) -> float | bool:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return names[node.id]
        if isinstance(node, ast.BoolOp):
            parts = (bool(value(v)) for v in node.values)
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.UnaryOp):
            return not value(node.operand) if isinstance(node.op, ast.Not) else -value(node.operand)
        if isinstance(node, ast.BinOp):
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        assert isinstance(node, ast.Compare)
        left = value(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = value(right_node)
            if not _OPERATORS[type(op)](left, right):
                return False
            left = right
        return True

    return bool(value(check_predicate(text)))
