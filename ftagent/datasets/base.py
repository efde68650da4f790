"""What a raw training dataset is: a :class:`DatasetSpec` plus a :class:`DatasetSource`.

A source knows where its files come from (a Hugging Face dataset repo, or a local generator), what to
fix after download (``post_download``), and how to turn its files into Alpaca rows (``to_alpaca``).
The default converters are plain, self-contained functions (stdlib imports inside the body), so the
planner can embed their source in a generated ``process_data.py`` (see :func:`converter_source`).
"""

from __future__ import annotations

import fnmatch
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

Converter = Callable[..., list[dict]]


class DatasetSpec(BaseModel):
    """Static facts about one raw dataset (shown by ``ftagent datasets list/show``)."""

    name: str
    repo_id: str | None = Field(None, description="HF dataset repo; None = generated locally")
    related_benchmarks: list[str] = Field(default_factory=list, description="fnmatch patterns of keys")
    task_type: str = ""
    license: str = ""
    summary: str = ""
    gated: bool = False
    allow_patterns: list[str] | None = Field(None, description="download only these files (None = the whole repo)")
    hook_description: str = Field("", description="what post_download changes, in one line")

    def relates_to(self, benchmark_key: str) -> bool:
        """True when ``benchmark_key`` matches one of :attr:`related_benchmarks`."""
        return any(fnmatch.fnmatchcase(benchmark_key, pat) for pat in self.related_benchmarks)


@runtime_checkable
class DatasetSource(Protocol):
    """The extension point (entry-point group ``ftagent.datasets``)."""

    spec: DatasetSpec

    def post_download(self, dataset_dir: Path) -> None:
        """Fix the downloaded files in place (remove evaluation splits, repair schemas ...)."""

    def to_alpaca(self, dataset_dir: Path, limit: int | None = None, seed: int = 0) -> list[dict]:
        """Default conversion to Alpaca rows ``{instruction, input, output}``."""

    def generate(self, dataset_dir: Path) -> None:
        """Create the files locally (only for sources with ``spec.repo_id is None``)."""

    def readme(self) -> str:
        """Our own notes for the planner (task type, quality, output-format rules)."""


def _no_hook(dataset_dir: Path) -> None:
    return None


def _no_generator(dataset_dir: Path) -> None:
    raise NotImplementedError("this dataset is downloaded, not generated")


@dataclass
class FunctionSource:
    """A :class:`DatasetSource` assembled from module-level functions."""

    spec: DatasetSpec
    converter: Converter
    hook: Callable[[Path], object] = _no_hook  # what it returns (removed files, row counts) is not used
    generator: Callable[[Path], None] = _no_generator

    def post_download(self, dataset_dir: Path) -> None:
        """Run the post-download hook."""
        self.hook(Path(dataset_dir))

    def to_alpaca(self, dataset_dir: Path, limit: int | None = None, seed: int = 0) -> list[dict]:
        """Run the default converter."""
        return self.converter(str(dataset_dir), limit, seed)

    def generate(self, dataset_dir: Path) -> None:
        """Run the local generator."""
        self.generator(Path(dataset_dir))

    def readme(self) -> str:
        """The packaged ``readmes/<name>.md`` (empty when missing)."""
        return read_packaged_readme(self.spec.name)


def read_packaged_readme(name: str) -> str:
    """Text of ``ftagent/datasets/readmes/<name>.md``, or '' when there is none."""
    path = resources.files("ftagent.datasets").joinpath("readmes", f"{name}.md")
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return ""


def converter_source(source: DatasetSource) -> str:
    """Source code of a source's default converter, dedented, ready to paste into a script.

    The converter is called ``to_alpaca(dataset_dir, limit, seed)`` in the returned code.
    """
    func = getattr(source, "converter", None) or source.to_alpaca
    code = textwrap.dedent(inspect.getsource(func))
    name = func.__name__
    if name != "to_alpaca":
        code = code.replace(f"def {name}(", "def to_alpaca(", 1)
    return code
