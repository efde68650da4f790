"""Lazy package faces: a package names its public API without importing it at start-up.

``ftagent --help`` must stay fast and some packages are imported inside the tool env, where
ftagent's own dependencies are absent; so ``__init__.py`` files map names to modules and import on
first attribute access (PEP 562)::

    __all__ = ["LoopEngine"]
    __getattr__ = lazy_exports(__name__, {"LoopEngine": "ftagent.engine.loop"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first access."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
