"""Lazy component registry: names map to ``"module:Object"`` strings, imported on first use.

Components (benchmarks, datasets, runners, proposers ...) are chosen by setting a name or a dotted
path. Unknown names get a did-you-mean suggestion. Third parties add entries through the Python
entry-point group given to the registry (e.g. ``ftagent.benchmarks``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

# the did-you-mean lives in core/didyoumean.py (errors.py uses it too); callers import it from here as before
from ftagent.core.didyoumean import DID_YOU_MEAN_CUTOFF as DID_YOU_MEAN_CUTOFF
from ftagent.core.didyoumean import closest as closest
from ftagent.core.didyoumean import did_you_mean as did_you_mean
from ftagent.core.errors import UserInputError

T = TypeVar("T")


def load_object(path: str) -> Any:
    """Import ``"package.module:Object"`` (or ``"package.module.Object"``) and return the object.

    Raises:
        UserInputError: when the module or the attribute does not exist.
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise UserInputError(f"'{path}' is not a dotted path like 'package.module:Object'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UserInputError(f"cannot import '{module_name}' for '{path}': {exc}") from exc
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise UserInputError(f"'{module_name}' has no attribute '{attr}' (from '{path}')") from exc
    return obj


class Registry(Generic[T]):
    """Name → lazily imported object, plus an optional entry-point group for plug-ins."""

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._paths: dict[str, str] = {}
        self._objects: dict[str, T] = {}
        self._plugins_loaded = False

    def register(self, name: str, target: str | T) -> None:
        """Register ``target`` (a ``"module:Object"`` string or the object itself) under ``name``."""
        if isinstance(target, str):
            self._paths[name] = target
            self._objects.pop(name, None)
        else:
            self._objects[name] = target
            self._paths.pop(name, None)

    def _load_plugins(self) -> None:
        if self._plugins_loaded or not self.entry_point_group:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            self._paths.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_plugins()
        return sorted(set(self._paths) | set(self._objects))

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """Return the object registered as ``name`` (importing it on first use).

        Raises:
            UserInputError: for an unknown name, listing the valid ones and the closest match.
        """
        self._load_plugins()
        if name in self._objects:
            return self._objects[name]
        if name not in self._paths:
            valid = self.names()
            raise UserInputError(
                f"unknown {self.kind} '{name}'.{did_you_mean(name, valid)} Valid: {', '.join(valid)}"
            )
        obj: T = load_object(self._paths[name])  # a registered path names a T (its registration says so)
        self._objects[name] = obj
        return obj
