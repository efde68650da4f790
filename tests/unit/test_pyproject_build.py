"""Issue 32 (make demo from a fresh clone): `pip install -e .` printed about 330 lines of setuptools warnings
before anything else — one "Package 'ftagent._configs.benchmarks' is absent from the `packages`
configuration" block per data folder, three "`project.license` as a TOML table is deprecated" blocks. A new
user reads them as a failed install. Every folder the wheel ships is listed, and the licence is an SPDX string.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _shipped_folders() -> set[str]:
    """The dotted names of the folders setuptools ships as packages (package-dir mapped: configs/, docker/)."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    roots = {"ftagent": ROOT / "ftagent"}
    roots.update({name: ROOT / folder for name, folder in setuptools["package-dir"].items()})
    names = set()
    for name, folder in roots.items():
        for sub in [folder, *folder.rglob("*")]:
            if sub.is_dir() and sub.name != "__pycache__" and any(p.is_file() for p in sub.iterdir()):
                rel = sub.relative_to(folder).parts
                names.add(".".join((name, *rel)))
    return names


def test_every_shipped_folder_is_a_listed_package():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    missing = sorted(_shipped_folders() - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml (else one warning each): {missing}"


def test_license_is_an_spdx_string():
    assert isinstance(PYPROJECT["project"]["license"], str)
    assert any(req.startswith("setuptools>=") and int(req.split(">=")[1].split(".")[0]) >= 77
               for req in PYPROJECT["build-system"]["requires"])  # PEP 639 license strings: setuptools 77
