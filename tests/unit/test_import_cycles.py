"""No import cycles inside ftagent (lint-imports holds the layers; this holds the modules)."""

from __future__ import annotations

import grimp


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("ftagent")
    cycles = set()
    for module in sorted(m for m in graph.modules if m.startswith("ftagent")):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith("ftagent") and imported != module and \
                    graph.find_shortest_chain(importer=imported, imported=module):
                cycles.add(tuple(sorted((module, imported))))
    assert not cycles, f"import cycles: {sorted(cycles)}"


def _layer_rank() -> dict[str, int]:
    """The layers of pyproject.toml's import-linter contract (their one owner), top (0) to bottom."""
    import re
    from pathlib import Path

    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return {name.strip(): rank for rank, entry in enumerate(contract["layers"]) for name in re.split(r"[|:]", entry)}


LAYER_RANK = _layer_rank()
# configuration defaults the user may replace (FT_SCEN, FT_VALIDATOR, ...), loaded by the finetune layer
SETTING_DEFAULTS = {"ftagent/core/settings.py"}


def _upward_strings(path, layer: str) -> list[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [f"{path}: {node.value!r} names ftagent.{up}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            for up, rank in LAYER_RANK.items() if rank < LAYER_RANK[layer] and f"ftagent.{up}." in node.value]


def test_no_lower_layer_names_a_module_of_a_higher_one_in_a_string():
    """A "module:Name" string imported at run time is an edge import-linter cannot see: the layer that
    provides something registers it below (e.g. ftagent.tools.opencompass.provides fills
    ftagent.benchmarks.components.PROVIDED), so lint-imports sees every edge."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted((root / "ftagent").rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) > 2 and rel.parts[1] in LAYER_RANK and rel.as_posix() not in SETTING_DEFAULTS:
            found += _upward_strings(path, rel.parts[1])
    assert not found, "\n".join(found)
