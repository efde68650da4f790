"""Small modules and small functions, kept (issue 45): no module of ``ftagent/`` over 400 lines and no function or
method over 80 (its ``def`` line to its last line, docstring included).

A ratchet: the offenders of the day are listed below with their size when the list was written. A listed one may
only shrink (lower its number here when it does; drop it once it is under the bar: a stale entry does not fail, so
that a branch which fixes one is not stopped by this list); nothing else may cross a bar.
A module or function that grows past one is split where it has seams (see docs/architecture.md's room list),
not squeezed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "ftagent"
MODULE_LINES = 400
FUNCTION_LINES = 80

# path relative to ftagent/ -> its lines when listed
LISTED_MODULES: dict[str, int] = {}  # none since issue 45 (nine when the issue was filed)
# "path:qualified name" -> its lines when listed
LISTED_FUNCTIONS: dict[str, int] = {}  # LlamaFactoryTrainer.train (85) is 70 since issue 39's _trained


def module_sizes() -> dict[str, int]:
    return {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in sorted(ROOT.rglob("*.py"))}


def function_sizes() -> dict[str, int]:
    out: dict[str, int] = {}

    def walk(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                out[f"{path}:{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                walk(child, path, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, f"{prefix}{child.name}.")

    for p in sorted(ROOT.rglob("*.py")):
        walk(ast.parse(p.read_text(encoding="utf-8")), str(p.relative_to(ROOT)), "")
    return out


def _over(sizes: dict[str, int], listed: dict[str, int], bar: int) -> list[str]:
    problems = []
    for name, size in sorted(sizes.items()):
        if name in listed and size > listed[name]:
            problems.append(f"{name}: {size} lines, grew past its listed {listed[name]} (listed offenders may only shrink)")
        elif name not in listed and size > bar:
            problems.append(f"{name}: {size} lines, over the bar of {bar}: split it where it has seams")
    return problems


def test_no_module_crosses_the_bar_and_listed_ones_only_shrink():
    assert _over(module_sizes(), LISTED_MODULES, MODULE_LINES) == []


def test_no_function_crosses_the_bar_and_listed_ones_only_shrink():
    assert _over(function_sizes(), LISTED_FUNCTIONS, FUNCTION_LINES) == []

