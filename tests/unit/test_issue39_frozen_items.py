"""Issue 39 item 6: a session evaluates on its own immutable, content-hashed copy of its items; another
command preparing ``FT_FILE_PATH/benchmarks/<key>`` mid-session never changes it.

The second command is the real one the red team ran: ``ftagent eval`` without a limit on the same
``FT_FILE_PATH`` (a subprocess; it prepares the benchmark's 100 + 100 items, then stops at the fake model's
chat template, before any OpenCompass run). At d350dfe the session's guard then saw other files
(``benchmark_files`` flagged) and its evaluations read the re-prepared items (the baseline's 10 no longer
paired: no interval); there was no session copy at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.benchmarks import open_benchmark
from ftagent.benchmarks.frozen import FROZEN, verify
from ftagent.benchmarks.prepared import prepare_session_copy
from ftagent.core.errors import StepError
from ftagent.core.paths import benchmarks_dir
from ftagent.core.trace import Experiment
from ftagent.core.types import ModelInfo, ScenarioInfo
from ftagent.integrity.guard import IntegrityGuard
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.data_script import benchmark_items
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.helpers.weights import answer_weights_check, safetensors_bytes

REPO = Path(__file__).resolve().parents[2]
KEY = "demo_add"
LIMIT = 10


def _fake_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                                    "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10,
                                                    "num_attention_heads": 1, "max_position_embeddings": 64}))
    (folder / "model.safetensors").write_bytes(safetensors_bytes(b"w"))  # whole (issue 43's check)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def _ftagent_eval(ft: Path, model: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "HF_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(ft),
                "FT_TOOLS_ENV": str(cwd / "no-tool-env")})
    return subprocess.run([sys.executable, "-m", "ftagent", "eval", "--model", str(model), "--benchmark", KEY],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


class CapturingRunner:
    """Records the OpenCompass command and its mounts, then fails (no run is needed to see what it reads)."""

    confines_itself = True

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list]] = []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, **_):
        checked = answer_weights_check(cmd, log_file)  # the weights check before the run (issue 43)
        if checked is not None:
            return checked
        self.calls.append((list(cmd), list(mounts or [])))
        return RunResult(exit_code=1, duration_s=0.0, log_tail="captured")


def test_ftagent_eval_mid_session_never_changes_the_sessions_items(tmp_path):
    from ftagent.core.settings import load_settings

    ft = tmp_path / "files"
    _, adapter = open_benchmark(KEY)
    root, digest = prepare_session_copy(adapter, benchmarks_dir(ft), LIMIT, None)  # the session's start-up stage
    assert root.parent.name == FROZEN and _lines(root / KEY / "validation.jsonl") == LIMIT
    scenario = ScenarioInfo(benchmark=KEY, base_model="m", base_model_path=str(tmp_path / "base"),
                            model_info=ModelInfo(name="m", path=""), file_path=str(ft),
                            workspace_root=str(tmp_path / "ws"), benchmark_root=str(root), benchmark_digest=digest)
    guard = IntegrityGuard(scenario, input_columns=["question"], references_file=tmp_path / "refs.json",
                           baseline_configs={})
    guard.record_start()
    before = benchmark_items(scenario, ["question"])

    res = _ftagent_eval(ft, _fake_model(tmp_path / "model"), tmp_path)  # the second command, no limit
    assert "chat template" in res.stdout + res.stderr, (res.stdout, res.stderr)
    shared = benchmarks_dir(ft) / KEY
    assert _lines(shared / "validation.jsonl") == 100  # it did prepare the shared folder again

    assert verify(root, KEY, digest)  # the session's copy is what it was
    assert benchmark_items(scenario, ["question"]) == before and len(before) == 2 * LIMIT  # validation + test
    files = next(c for c in guard.check(Experiment(loop=0)).checks if c.name == "benchmark_files")
    assert files.passed is True, files.detail
    assert all(not os.access(p, os.W_OK) or os.geteuid() == 0 for p in (root / KEY).rglob("*.jsonl"))

    # the session's evaluation renders its datasets from its copy and prepares nothing
    model = _fake_model(tmp_path / "cand")
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    runner = CapturingRunner()
    settings = load_settings(file_path=str(ft))
    with pytest.raises(StepError):
        evaluate_splits_of_path(model, None, benchmark=adapter, splits=("validation",), settings=settings,
                                runner=runner, work_dir=tmp_path / "oc", model_name="m",
                                items_root=scenario.items_root())
    config = (tmp_path / "oc" / "oc_validation.py").read_text()
    assert str(root / KEY / "validation") in config and str(shared / "validation") not in config
    assert any(Path(m.source) == root / KEY for m in runner.calls[0][1])
    assert _lines(shared / "validation.jsonl") == 100  # untouched by the session's evaluation


def test_the_same_content_is_one_copy_and_other_content_another(tmp_path):
    ft = tmp_path / "files"
    _, adapter = open_benchmark(KEY)
    first = prepare_session_copy(adapter, benchmarks_dir(ft), LIMIT, None)
    again = prepare_session_copy(adapter, benchmarks_dir(ft), LIMIT, None)
    other = prepare_session_copy(adapter, benchmarks_dir(ft), LIMIT + 5, None)
    assert first == again and other[0] != first[0]
    assert verify(*first[:1], KEY, first[1]) and verify(other[0], KEY, other[1])
    assert _lines(first[0] / KEY / "validation.jsonl") == LIMIT  # the later preparation did not touch it
