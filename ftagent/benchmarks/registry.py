"""The benchmark registry: the ONE authority on which benchmarks exist (CLI, ``llm_finetune``, ``job``, UI).

Sources, in lookup order:

1. objects or ``"module:Object"`` paths registered in code, and the entry-point group
   ``ftagent.benchmarks`` (third-party adapters: a class or an instance with the
   :class:`~ftagent.benchmarks.base.BenchmarkAdapter` interface);
2. the built-in YAML files ``configs/benchmarks/<key>.yaml`` (files starting with ``_`` are
   include-only family defaults);
3. user YAML files: every ``*.yaml``/``*.yml`` in the ``FT_BENCHMARK_PATHS`` directories, and any file
   passed as ``--benchmark ./my_bench.yaml`` (registered for the rest of the process under its ``name``).

A YAML benchmark's key is its ``name:``; a user file may not reuse a built-in key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.benchmarks.schema import YAML_SUFFIXES, BenchmarkConfig, load_config
from ftagent.core.errors import UserInputError
from ftagent.core.paths import config_file
from ftagent.core.registry import Registry, did_you_mean

BUILTIN_DIR = config_file("benchmarks")


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in YAML_SUFFIXES
                  and not p.name.startswith(("_", ".")))


def benchmark_paths() -> list[Path]:
    """The ``FT_BENCHMARK_PATHS`` directories (environment or ``.env``).

    Raises:
        UserInputError: an entry is not a directory.
    """
    from ftagent.core.settings import FTSettings

    paths = [Path(p).expanduser() for p in FTSettings().benchmark_paths]
    for path in paths:
        if not path.is_dir():
            raise UserInputError(f"FT_BENCHMARK_PATHS: {path} is not a directory")
    return paths


class BenchmarkRegistry(Registry):
    """:class:`~ftagent.core.registry.Registry` plus built-in and user benchmark YAML files."""

    def __init__(self) -> None:
        super().__init__("benchmark", entry_point_group="ftagent.benchmarks")
        self._user: dict[str, Path] = {}  # name -> file given explicitly (--benchmark FILE)
        self._configs: dict[Path, tuple[float, BenchmarkConfig]] = {}

    # --- files ----------------------------------------------------------------------------------
    def config(self, path: Path) -> BenchmarkConfig:
        """The parsed file (cached until its modification time changes)."""
        path = Path(path).resolve()
        mtime = path.stat().st_mtime if path.exists() else -1.0
        cached = self._configs.get(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, load_config(path))
            self._configs[path] = cached
        return cached[1]

    def builtin_files(self) -> dict[str, Path]:
        """Built-in key -> ``configs/benchmarks/<key>.yaml``."""
        return {p.stem: p for p in _yaml_files(BUILTIN_DIR)} if BUILTIN_DIR.is_dir() else {}

    def user_files(self) -> dict[str, Path]:
        """User key -> file: ``FT_BENCHMARK_PATHS`` files, then files registered with :meth:`register_file`.

        Raises:
            UserInputError: a bad file, a built-in key reused, or one name in two files.
        """
        builtin = self.builtin_files()
        found: dict[str, Path] = {}
        candidates = [f for d in benchmark_paths() for f in _yaml_files(d)] + list(self._user.values())
        for path in candidates:
            path = path.resolve()
            name = self.config(path).name
            self._check_name(name, path, builtin)
            if name in found and found[name] != path:
                raise UserInputError(f"benchmark name '{name}' is defined twice: {found[name]} and {path}")
            found[name] = path
        return found

    def _check_name(self, name: str, path: Path, builtin: dict[str, Path]) -> None:
        if name in builtin or name in self._paths or name in self._objects:
            raise UserInputError(f"benchmark file {path}: name '{name}' is already a built-in or registered "
                                 "benchmark; choose another `name:`")

    def register_file(self, path: Path | str) -> str:
        """Register a user benchmark file for this process; returns its key.

        Raises:
            UserInputError: bad file, or its name is taken (by a built-in or another file).
        """
        path = Path(path).expanduser().resolve()
        if not path.is_file():
            raise UserInputError(f"benchmark file {path} not found")
        name = self.config(path).name
        self._check_name(name, path, self.builtin_files())
        other = self._user.get(name)
        if other is not None and other != path:
            raise UserInputError(f"benchmark name '{name}' is defined twice: {other} and {path}")
        self._user[name] = path
        return name

    # --- Registry -------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every key: registered objects and plug-ins, built-in files, user files."""
        self._load_plugins()
        keys = set(self._paths) | set(self._objects) | set(self.builtin_files()) | set(self.user_files())
        return sorted(keys)

    def source_file(self, name: str) -> Path | None:
        """The YAML file behind a key (None for code-registered benchmarks)."""
        self._load_plugins()
        if name in self._paths or name in self._objects:
            return None
        return self.builtin_files().get(name) or self.user_files().get(name)

    def get(self, name: str) -> Any:
        """The benchmark ``name`` (a fresh :class:`~ftagent.benchmarks.adapter.Benchmark` for YAML ones).

        Raises:
            UserInputError: unknown name (did-you-mean + valid keys) or a bad YAML file.
        """
        from ftagent.benchmarks.adapter import Benchmark

        self._load_plugins()
        if name in self._paths or name in self._objects:
            return super().get(name)
        path = self.builtin_files().get(name) or self.user_files().get(name)
        if path is None:
            valid = self.names()
            raise UserInputError(f"unknown benchmark '{name}'.{did_you_mean(name, valid)} Valid: {', '.join(valid)}"
                                 ". A benchmark YAML file is given by its path (e.g. ./my_bench.yaml)")
        return Benchmark(self.config(path))


BENCHMARKS = BenchmarkRegistry()
