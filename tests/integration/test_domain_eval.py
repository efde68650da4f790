"""Real OpenCompass on CPU with the tiny model over fixture splits of the four domain families.

One OpenCompass run evaluates ``panorama_noc4pc``, ``chemcotbench_mol_und`` (3 sub-datasets),
``tablebench_fact_checking`` and ``bioprobench_err`` together: a test-only composite benchmark
concatenates the dataset blocks of the four real adapters, so the run goes through
:func:`evaluate_model_path` and ftagent's ``DomainEvaluator`` inside the one (in-process) OpenCompass run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.base import BenchmarkSpec
from ftagent.benchmarks.domain import KEY_SPECS, MEAN_CORE
from ftagent.benchmarks.domain_adapters import raw_dir
from ftagent.benchmarks.registry import BENCHMARKS
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.evaluator import evaluate_model_path

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"
KEYS = ("panorama_noc4pc", "chemcotbench_mol_und", "tablebench_fact_checking", "bioprobench_err")


class DomainMix:
    """Test-only benchmark: the blocks of several real domain adapters in one OpenCompass config."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.parts = [get_benchmark(k) for k in keys]
        self.spec = BenchmarkSpec(key="domain_mix", category="test", data_source="fixtures",
                                  prompt="{prompt}", answer_rule="per key", evaluator="DomainEvaluator",
                                  core_metric=MEAN_CORE, input_columns=["prompt"])

    def prepare(self, root: Path, *, limit: int | None = None) -> Path:
        for part in self.parts:
            part.prepare(root, limit=limit)
        out = Path(root) / self.spec.key
        out.mkdir(parents=True, exist_ok=True)
        return out

    def load_items(self, root: Path, split):
        return [it for part in self.parts for it in part.load_items(root, split)]

    def dataset_blocks(self, root: Path, split, *, judge=None):
        return [b for part in self.parts for b in part.dataset_blocks(root, split)]


def _tool_env_has_rdkit(tools_env: Path) -> bool:
    proc = subprocess.run([str(tools_env / "bin" / "python"), "-c", "import rdkit.Chem"],
                          capture_output=True, check=False)
    return proc.returncode == 0


def test_four_families_in_one_opencompass_run(tools_env, tiny_model, tmp_path, monkeypatch):
    root = tmp_path / "ft" / "benchmarks"
    for key in KEYS:  # the offline path: published files copied into <root>/<key>/raw/
        shutil.copytree(FIXTURES / KEY_SPECS[key]["family"], raw_dir(root, key))
    monkeypatch.setitem(BENCHMARKS._objects, "domain_mix", DomainMix(KEYS))
    from ftagent.runners.local import LocalRunner

    settings = load_settings(file_path=tmp_path / "ft")
    t0 = time.monotonic()
    result = evaluate_model_path(tiny_model, None, benchmark=get_benchmark("domain_mix"), split="validation", settings=settings,
                                 runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / "work",
                                 model_name="builtin/tiny-qwen2", timeout=900)
    print(f"OpenCompass run of {len(KEYS)} domain keys: {time.monotonic() - t0:.1f}s")
    run = Path(result.run_dir)
    assert parse.failure_reason(run) is None  # results exist, no '-' in the summary
    m = result.metrics
    expected = {"panorama_noc4pc", "tablebench_fact_checking", "bioprobench_err",
                "chemcotbench_mol_und-fg_count", "chemcotbench_mol_und-Murcko_scaffold",
                "chemcotbench_mol_und-equivalence"}
    assert set(m) == expected
    # core metrics computed by DomainEvaluator inside OpenCompass (real numbers, all metrics kept)
    assert isinstance(m["panorama_noc4pc"]["macro_f1"], float) and "accuracy_valid_only" in m["panorama_noc4pc"]
    assert isinstance(m["tablebench_fact_checking"]["accuracy"], float)
    assert {"f1", "accuracy", "precision", "recall"} <= set(m["bioprobench_err"])
    for ds in expected:
        assert m[ds]["num_items"] == 1.0
    for sub in ("fg_count", "equivalence"):  # stdlib metrics: headline under mean_core as well
        row = m[f"chemcotbench_mol_und-{sub}"]
        assert row["mean_core"] == row["accuracy"]
    murcko = json.loads((run / "results" / "ft-domain_mix" / "chemcotbench_mol_und-Murcko_scaffold@validation.json")
                        .read_text(encoding="utf-8"))
    # one OpenCompass process, one inference task for the six sub-datasets (no task subprocesses)
    log = (tmp_path / "work" / "opencompass_validation.log").read_text(encoding="utf-8")
    assert log.count("OpenCompass - INFO - Task [") == 1 and not list(run.glob("logs/infer/**/*.out"))
    if _tool_env_has_rdkit(tools_env):
        assert isinstance(m["chemcotbench_mol_und-Murcko_scaffold"]["scaffold_hard"], float)
    else:  # no RDKit in the tool env: said so, and no silent 0 for the scaffold metrics
        assert "scaffold_hard" not in m["chemcotbench_mol_und-Murcko_scaffold"]
        assert "mean_core" not in m["chemcotbench_mol_und-Murcko_scaffold"]
        assert "unavailable" in str(murcko["status"]) and "RDKit" in str(murcko["reason"])
    # per-sample details parsed: every wrong sample carries the prompt, the gold and the model output
    assert result.error_samples
    for sample in result.error_samples:
        assert sample["question"] and sample["model_output"] is not None
