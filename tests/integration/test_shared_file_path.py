"""Three processes start together on one fresh FT_FILE_PATH, as the job runner starts its tasks: every
dataset, model and the LLaMA-Factory catalogue is prepared exactly once, and nothing is corrupted
(``dataset_info.json`` keeps every session's entry; no temp or staging file is left behind).

Each process runs the scenario's preparation stages for real (dataset preparation, the dataset
catalogue, base-model resolution, the LLaMA-Factory parameter extraction in the tool env); only the
Hugging Face download itself is replaced by a slow local copy (no network here), which counts its calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.weights import safetensors_bytes

pytestmark = pytest.mark.integration
N = 3

DRIVER = r'''
import json, os, sys, time
from pathlib import Path

file_path, tools_env, me, start_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
counts = file_path / "counts"

def count(what):
    with open(counts / f"{what}.{os.getpid()}.{time.monotonic_ns()}", "w"):
        pass

import huggingface_hub
from tests.helpers.weights import safetensors_bytes

def fake_snapshot_download(repo_id, local_dir, **kw):  # a slow "download": config first, weights later
    count("download")
    out = Path(local_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"model_type": "qwen2", "repo": repo_id}))
    time.sleep(1.5)
    (out / "model.safetensors").write_bytes(safetensors_bytes(b"w" * 4096))
    return str(out)

huggingface_hub.snapshot_download = fake_snapshot_download

from ftagent.datasets.catalogue import build_catalogue
from ftagent.datasets.prepare import prepare_dataset
from ftagent.models.base_model import base_model_dir, fetch_base_model
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory import catalogue as lf


class CountingRunner(LocalRunner):
    def run(self, cmd, **kw):
        if any("catalogue_script" in str(c) for c in cmd):
            count("lf_extract")
        return super().run(cmd, **kw)


while time.time() < start_at:
    time.sleep(0.005)
out = {}
ds = file_path / "datasets"
out["dataset"] = str(prepare_dataset("demo_add", file_path))
own = ds / f"user_data_{me}"  # each session brings its own dataset: its catalogue entry must survive
own.mkdir(parents=True, exist_ok=True)
(own / "train.json").write_text(json.dumps([{"instruction": f"q{i} of {me}", "output": "a"} for i in range(300)]))
build_catalogue(ds, ["demo_add", own.name])
out["model"] = str(fetch_base_model("someorg/some-model", base_model_dir("someorg/some-model", file_path),
                                    sys.executable, file_path))
cat = lf.load_or_build_catalogue(file_path / ".llama_factory_info", CountingRunner(tools_env, sandbox="none"))
out["lf_params"] = len(cat.parameters)
print(json.dumps(out))
'''


def test_three_sessions_share_one_fresh_file_path(tmp_path, tools_env):
    file_path = tmp_path / "files"
    (file_path / "counts").mkdir(parents=True)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    start_at = time.time() + 4.0  # all three imported and waiting: then they go at the same instant
    procs = [subprocess.Popen([sys.executable, str(driver), str(file_path), str(tools_env), str(i), str(start_at)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**_env(), "HF_HUB_OFFLINE": "0"}) for i in range(N)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    counts = sorted(p.name.split(".")[0] for p in (file_path / "counts").iterdir())
    assert counts == ["download", "lf_extract"], counts  # one model download, one catalogue extraction
    prepared = (file_path / "datasets" / ".prepare_log.jsonl").read_text().splitlines()
    assert [json.loads(line)["name"] for line in prepared] == ["demo_add"]  # the dataset prepared once
    assert len({r["dataset"] for r in results}) == 1 and len({r["model"] for r in results}) == 1
    assert len({r["lf_params"] for r in results}) == 1 and results[0]["lf_params"] > 50
    catalogue = json.loads((file_path / "datasets" / "dataset_info.json").read_text())
    assert sorted(catalogue) == ["demo_add"] + [f"user_data_{i}" for i in range(N)]  # no lost update
    model = Path(results[0]["model"])
    whole = len(safetensors_bytes(b"w" * 4096))
    assert (model / "model.safetensors").stat().st_size == whole  # nobody used a half-downloaded model
    leftovers = [p for p in file_path.rglob("*") if p.name.endswith((".tmp", ".partial")) or ".downloading-" in p.name]
    assert leftovers == []


def _env() -> dict[str, str]:
    """This environment, with the repository first on the driver's path (it imports ``tests.helpers``)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
