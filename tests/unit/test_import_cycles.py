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
