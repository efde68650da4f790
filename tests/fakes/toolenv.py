"""A fake tool env: a real venv (no real pip, no ftagent) whose site-packages holds stand-ins of the tools.

The check scripts of :mod:`ftagent.runners.toolenv` run in it exactly as in a real env (the env's own
python, ``-I``, a filtered environment), in about a second. The fake ``torch`` reads its version, its
CUDA build and whether CUDA works from ``torch/fake.json`` (see :func:`set_fake_torch`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FAKE_TORCH = '''
import json as _json, os as _os
_cfg = _json.load(open(_os.path.join(_os.path.dirname(__file__), "fake.json")))
__version__ = _cfg["version"]


class version:
    cuda = _cfg.get("cuda")


class cuda:
    @staticmethod
    def is_available():
        if _cfg.get("warning"):
            import warnings
            warnings.warn(_cfg["warning"], UserWarning)
        return bool(_cfg.get("available"))

    @staticmethod
    def get_device_name(index=0):
        return "Fake GPU"


class _Tensor:
    def __init__(self, values):
        self.values = list(values)

    def __mul__(self, other):
        return _Tensor(v * other for v in self.values)

    def sum(self):
        return _Tensor([sum(self.values)])

    def item(self):
        return self.values[0]


def ones(n, device="cpu"):
    if device.startswith("cuda") and _cfg.get("op_error"):
        raise RuntimeError(_cfg["op_error"])
    return _Tensor([1.0] * n)
'''


def _site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def set_fake_torch(env: Path, version: str = "2.13.0+cpu", cuda: str | None = None, available: bool = False,
                   op_error: str | None = None, warning: str | None = None) -> None:
    """What the fake torch of ``env`` reports (``torch.version.cuda``, ``cuda.is_available()`` and the warning
    it gives, a CUDA op's error)."""
    (_site_packages(env) / "torch" / "fake.json").write_text(json.dumps(
        {"version": version, "cuda": cuda, "available": available, "op_error": op_error, "warning": warning}))


def make_fake_tool_env(env: Path, *, broken: str | None = None) -> Path:
    """A venv at ``env`` with fake torch, transformers, llamafactory (``run_exp``), opencompass and peft.

    ``broken`` names a module whose import raises (an env with a broken tool).
    """
    base = getattr(sys, "_base_executable", sys.executable)  # not the venv's python: no ftagent there
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    site = _site_packages(env)
    modules = {"torch/__init__.py": FAKE_TORCH, "transformers/__init__.py": "__version__ = '4.57.6'\n",
               "llamafactory/__init__.py": "__version__ = '0.9.5'\n", "llamafactory/train/__init__.py": "",
               "llamafactory/train/tuner.py": "def run_exp():\n    pass\n",
               "opencompass/__init__.py": "__version__ = '0.5.4'\n", "peft/__init__.py": "__version__ = '0.18.1'\n",
               # `python -m pip uninstall -y torchvision` of the CPU fix: a no-op here
               "pip/__init__.py": "", "pip/__main__.py": "print('fake pip')\n"}
    if broken:
        modules[f"{broken}/__init__.py"] = "raise ImportError('libfoo.so: cannot open shared object file')\n"
    for rel, text in modules.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    set_fake_torch(env)
    return env
