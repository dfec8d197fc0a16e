"""The runs app keeps rooms a newcomer can read: every product module under 600 lines, every
function under 60 lines with at most 8 parameters (migrations are exempt)."""

from __future__ import annotations

import ast
from pathlib import Path

import runs

ROOT = Path(runs.__file__).resolve().parent
MODULE_LINES = 600
FUNCTION_LINES = 60
PARAMETERS = 8


def _modules() -> list[Path]:
    found = sorted(p for p in ROOT.rglob("*.py") if "migrations" not in p.relative_to(ROOT).parts)
    assert len(found) > 10  # the walk found the app
    return found


def oversized_functions(source: str) -> list[str]:
    """``name: lines, parameters`` of each function over a budget (decorators count as lines)."""
    over = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        lines = (node.end_lineno or node.lineno) - start + 1
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]
        count = len([p for p in params if p.arg not in ("self", "cls")])
        if lines >= FUNCTION_LINES or count > PARAMETERS:
            over.append(f"{node.name}: {lines} lines, {count} parameters")
    return over


def test_runs_modules_stay_under_600_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) >= MODULE_LINES
    }
    assert long == {}


def test_runs_functions_stay_under_60_lines_and_8_parameters():
    over = {
        str(p.relative_to(ROOT)): found
        for p in _modules()
        if (found := oversized_functions(p.read_text()))
    }
    assert over == {}


def test_budget_check_reports_a_long_function_and_too_many_parameters():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    source = f"def long():\n{body}\n\n\ndef wide(a, b, c, d, e, f, g, h, i):\n    pass\n"
    assert oversized_functions(source) == [
        f"long: {FUNCTION_LINES + 1} lines, 0 parameters",
        "wide: 2 lines, 9 parameters",
    ]
