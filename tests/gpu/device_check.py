"""The GPU device check behind ``tests/gpu/run_device_check.sh`` (run it through that script).

On one GPU, with nothing downloaded: build ``builtin/qwen2-50m``, train it (full and LoRA) with
LLaMA-Factory through ftagent's validator and trainer and with the same final YAML by hand, generate
with the HF backend and with vLLM, and write one JSON of measured numbers:

* ``training.<method>``: tokens/s of the ftagent run and of the hand run (from LLaMA-Factory's
  ``train_runtime``, and over the whole wall clock), their ratio;
* ``memory.<method>``: the estimator's figure for this batch × cutoff (static + per-token) vs the
  measured peak: ``torch.cuda.max_memory_allocated`` of the hand run and NVML's used-memory peak of
  both runs (NVML includes the CUDA context and the allocator's cache);
* ``eval``: items/s and exact-match accuracy of HF ``generate`` and vLLM on the same prompts.

``--cpu-smoke`` (tests of this script only) runs the real steps on CPU with ``builtin/tiny-qwen2``,
5 steps of batch 8 and 32 prompts: every code path but CUDA, no meaningful numbers.

``--dry-run`` runs every step up to the GPU calls on any machine: imports, wheelhouse, model build,
data, memory plan, the ftagent workspace and validated ``train.yaml`` (the ``llamafactory-cli
train`` call is recorded, not started), the hand YAML, and the backends' import + tokenizer check.
A missing prerequisite ends the check with one line ``device check: missing ...`` and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
MODEL = "qwen2-50m"
METHODS = ("full", "lora")
BATCH, CUTOFF, STEPS = 64, 128, 100
CPU_SMOKE = False  # --cpu-smoke: set by main()
REQUIRED = ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "llamafactory", "yaml")
DRIVER_REQUIRED = ("pydantic", "pydantic_settings", "yaml", "filelock")  # ftagent itself, in this process


class Missing(RuntimeError):
    """A prerequisite is missing: reported as one line, exit code 2."""


def _py(env: Path) -> Path:
    return env / "bin" / "python"


def _run(argv: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def preflight(env: Path, dry: bool, smoke: bool = False) -> dict[str, Any]:
    """Imports here (ftagent's) and in the check env (and CUDA unless ``dry``); raises :class:`Missing`."""
    import importlib

    for name in DRIVER_REQUIRED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise Missing(f"python module {name} for ftagent in {sys.executable} ({exc})") from exc
    if not _py(env).exists():
        raise Missing(f"no python at {_py(env)} (DEVICE_CHECK_ENV); run_device_check.sh creates it from the wheels")
    if not (env / "bin" / "llamafactory-cli").exists():
        raise Missing(f"no llamafactory-cli in {env / 'bin'} (wheel llamafactory==0.9.5 not installed)")
    code = ("import importlib, json, sys\nout = {}\nfor m in sys.argv[1:]:\n    try:\n"
            "        out[m] = str(getattr(importlib.import_module(m), '__version__', 'ok'))\n"
            "    except Exception as e:\n        out[m] = 'MISSING ' + type(e).__name__ + ': ' + str(e)[:200]\n"
            "from llamafactory.train.tuner import run_exp\nimport torch\n"
            "out['cuda'] = torch.cuda.is_available()\n"
            "out['device'] = torch.cuda.get_device_name(0) if out['cuda'] else None\n"
            "print('PREFLIGHT ' + json.dumps(out))\n")
    proc = _run([str(_py(env)), "-c", code, *REQUIRED], 600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PREFLIGHT ")), None)
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Missing(f"the check env cannot import LLaMA-Factory's trainer: {last}")
    found = json.loads(line.split(" ", 1)[1])
    bad = [f"{m} ({v[8:]})" for m, v in found.items() if isinstance(v, str) and v.startswith("MISSING")]
    if bad:
        raise Missing("python modules " + ", ".join(bad) + " — add their wheels to tests/gpu/wheels.txt")
    if not dry and not smoke and not found["cuda"]:
        raise Missing("CUDA: torch in the check env sees no GPU")
    return found


def wheelhouse(folder: Path | None) -> dict[str, Any]:
    """Which wanted wheels (tests/gpu/wheels.txt) the folder holds."""
    wanted = [ln.strip() for ln in (HERE / "wheels.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if folder is None or not folder.is_dir():
        return {"folder": str(folder) if folder else None, "present": False, "missing": wanted}
    def norm(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    have = {(norm(p.name.split("-")[0]), p.name.split("-")[1]) for p in folder.glob("*.whl")}
    missing = [w for w in wanted if (norm(w.split("==")[0]), w.split("==")[1]) not in have]
    return {"folder": str(folder), "present": True, "missing": missing, "wheels": len(have)}


def find_vllm_python(env: Path) -> tuple[Path | None, list[str]]:
    """The first python that imports vllm: $VLLM_PYTHON, the vLLM env, the check env, python3."""
    tried, cands = [], [os.environ.get("VLLM_PYTHON")]
    for root in (os.environ.get("FT_VLLM_ENV"), os.environ.get("FT_FILE_PATH") and f"{os.environ['FT_FILE_PATH']}/envs/vllm"):
        cands.append(f"{root}/bin/python" if root else None)
    cands += [str(_py(env)), shutil.which("python3")]
    for cand in [c for c in cands if c]:
        if not Path(cand).exists() or cand in tried:
            continue
        tried.append(cand)
        if _run([cand, "-c", "import vllm"], 300).returncode == 0:
            return Path(cand), tried
    return None, tried


def make_data(work: Path, n_train: int = 4000, n_eval: int = 512) -> tuple[Path, list[dict]]:
    """demo_add-style Alpaca rows for training, held-out questions for generation."""
    rng = random.Random(0)
    pairs = {(rng.randint(0, 999), rng.randint(0, 999)) for _ in range(3 * (n_train + n_eval))}
    pairs = sorted(pairs)[: n_train + n_eval]
    rng.shuffle(pairs)
    rows = [{"instruction": f"What is {a} + {b}?", "input": "", "output": f"\\boxed{{{a + b}}}"} for a, b in pairs]
    data = work / "data.json"
    data.write_text(json.dumps(rows[:n_train]), encoding="utf-8")
    held = [{"question": f"What is {a} + {b}?", "answer": a + b} for a, b in pairs[n_train:]]
    (work / "prompts.json").write_text(json.dumps(held), encoding="utf-8")
    return data, rows[:n_train]


def train_yaml(method: str) -> dict[str, Any]:
    """The planner-side YAML of one method (the validator adds paths and system keys)."""
    cfg: dict[str, Any] = {"stage": "sft", "do_train": True, "finetuning_type": method, "template": "chatml",
                           "cutoff_len": CUTOFF, "per_device_train_batch_size": BATCH, "gradient_accumulation_steps": 1,
                           "max_steps": STEPS, "learning_rate": 1e-4 if method == "full" else 1e-3,
                           "lr_scheduler_type": "constant", "logging_steps": min(10, STEPS), "bf16": True, "seed": 0,
                           "report_to": "none", "save_strategy": "no"}
    if method == "lora":
        cfg.update(lora_rank=16, lora_alpha=32, lora_target="all")
    return cfg


TOKENS_SCRIPT = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
rows, cutoff, lens = json.load(open(sys.argv[2]))[:1000], int(sys.argv[3]), []
for r in rows:
    msgs = [{"role": "user", "content": r["instruction"]}, {"role": "assistant", "content": r["output"]}]
    ids = tok.apply_chat_template(msgs, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    lens.append(min(len(ids), cutoff))
print("TOKENS", sum(lens) / len(lens), max(lens))
"""


def tokens_per_sample(env: Path, model: Path, data: Path) -> tuple[float, int]:
    """Mean and max tokens of a training row (ChatML prompt + answer, capped at the cutoff), in the check env."""
    proc = _run([str(_py(env)), "-c", TOKENS_SCRIPT, str(model), str(data), str(CUTOFF)], 300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("TOKENS ")), None)
    if line is None:
        raise RuntimeError(f"tokenizing the data failed: {proc.stderr[-600:]}")
    return float(line.split()[1]), int(line.split()[2])


class GpuPeak:
    """NVML used-memory peak of GPU 0 (the first visible) while the block runs, above the baseline."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.peak, self.base, self._stop = enabled, 0, 0, threading.Event()

    def _used(self) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetMemoryInfo(self._h).used)

    def __enter__(self) -> GpuPeak:
        if self.enabled:
            import pynvml

            pynvml.nvmlInit()
            cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
            self._h = pynvml.nvmlDeviceGetHandleByIndex(int(cvd) if cvd.isdigit() else 0)
            self.base = self.peak = self._used()
            self._t = threading.Thread(target=self._poll, daemon=True)
            self._t.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self._used())

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._stop.set()
            self._t.join()

    @property
    def gb(self) -> float | None:
        return round((self.peak - self.base) / 1e9, 3) if self.enabled else None


class DryRunner:
    """Wraps the local runner: ``llamafactory-cli train`` is recorded, not started (``--dry-run``)."""

    name = "dry"

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def run(self, cmd: list[str], **kw: Any) -> Any:
        from ftagent.runners.base import RunResult

        if cmd[:2] == ["llamafactory-cli", "train"]:
            self.calls.append({"cmd": self.inner.resolve_cmd(cmd), "gpus": kw.get("gpus"),
                               "env": {k: v for k, v in (kw.get("env") or {}).items() if "TORCHRUN" in k or "NPROC" in k}})
            return RunResult(exit_code=0, duration_s=0.0, log_tail="dry run: not started")
        return self.inner.run(cmd, **kw)


def _results(output_dir: Path) -> dict[str, Any]:
    path = output_dir / "all_results.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def run_ftagent(work: Path, env: Path, model: Path, method: str, scenario: Any, dry: bool) -> dict[str, Any]:
    """Validate (micro-batch) and train through ftagent; returns timings and the final YAML."""
    import yaml

    from ftagent.core.settings import load_settings
    from ftagent.core.types import CodeResult
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.llamafactory.train_run import RUN_CONFIG, run_of_model
    from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    ws = work / f"ftagent_{method}"
    shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir(parents=True)
    shutil.copy(work / "data.json", ws / "data.json")
    (ws / "train.yaml").write_text(yaml.safe_dump(train_yaml(method)), encoding="utf-8")
    settings = load_settings(file_path=str(work / "ft"))
    runner: Any = LocalRunner(env, sandbox="none", gpu=not (dry or CPU_SMOKE))
    runner = DryRunner(runner) if dry else runner
    code = CodeResult(workspace=str(ws), files={"train.yaml": str(ws / "train.yaml")})
    start = time.perf_counter()
    with GpuPeak(not (dry or CPU_SMOKE)) as peak:
        report = LlamaFactoryValidator(scenario, settings, runner).validate(code, None)
        validated = time.perf_counter()
        if dry:
            final = yaml.safe_load((ws / "train.yaml").read_text())
            if not runner.calls or not Path(runner.calls[0]["cmd"][0]).exists():
                raise Missing(f"the validator did not reach llamafactory-cli ({report.failure})")
            return {"dry_run": True, "config": final, "micro_batch_call": runner.calls[0],
                    "injected": report.injected_keys}
        if not report.passed:
            raise RuntimeError(f"ftagent validation of {method} failed: {report.failure}")
        result = LlamaFactoryTrainer(scenario, settings, runner).train(code, report, None)
    end = time.perf_counter()
    # The config the trainer ran (its run folder's inputs/train.yaml): its dataset_dir holds the sealed data.json
    # and the dataset_info.json ftagent wrote; the workspace's train.yaml names the workspace, which has neither.
    final = yaml.safe_load((run_of_model(Path(result.output_dir)).inputs / RUN_CONFIG).read_text())
    return {"config": final, "validate_s": round(validated - start, 2), "train_wall_s": round(end - validated, 2),
            "train_runtime_s": _results(Path(result.output_dir)).get("train_runtime"),
            "final_loss": result.loss_history[-1]["loss"] if result.loss_history else None,
            "nvml_peak_gb": peak.gb, "output_dir": result.output_dir}


PEAK_SCRIPT = """
import json, sys, yaml, torch
from llamafactory.train.tuner import run_exp
run_exp(yaml.safe_load(open(sys.argv[1])))
cuda = torch.cuda.is_available()
print("PEAK " + json.dumps({"max_allocated_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else 0.0,
                            "max_reserved_gb": torch.cuda.max_memory_reserved() / 1e9 if cuda else 0.0}))
"""


def run_by_hand(work: Path, env: Path, config: dict[str, Any], method: str, dry: bool,
                scenario: Any = None) -> dict[str, Any]:
    """The ftagent run's final YAML, run by LLaMA-Factory directly (no ftagent, no runner), with the
    same LLaMA-Factory environment variables (defaults.yaml, CPU threads, torchrun) as ftagent's run."""
    import yaml

    from ftagent.tools.llamafactory.config import system_env
    from ftagent.tools.llamafactory.launch import launch_env

    hand = dict(config, output_dir=str(work / f"hand_{method}"))
    path = work / f"hand_{method}.yaml"
    path.write_text(yaml.safe_dump(hand, sort_keys=False), encoding="utf-8")
    if dry:
        return {"dry_run": True, "yaml": str(path)}
    lf_vars = {**system_env(scenario.hardware), **launch_env(scenario.hardware, hand)} if scenario is not None else {}
    env_vars = {**os.environ, **lf_vars, "PATH": f"{env / 'bin'}:{os.environ.get('PATH', '')}"}
    start = time.perf_counter()
    with GpuPeak(not CPU_SMOKE) as peak:
        proc = _run([str(_py(env)), "-c", PEAK_SCRIPT, str(path)], 900, env=env_vars, cwd=str(work))
    wall = time.perf_counter() - start
    (work / f"hand_{method}.log").write_text(proc.stdout + proc.stderr)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PEAK ")), None)
    if proc.returncode or line is None:
        raise RuntimeError(f"hand run of {method} failed (exit {proc.returncode}): {proc.stderr[-800:]}")
    return {"yaml": str(path), "wall_s": round(wall, 2), "nvml_peak_gb": peak.gb,
            "train_runtime_s": _results(Path(hand["output_dir"])).get("train_runtime"),
            **{k: round(v, 3) for k, v in json.loads(line.split(" ", 1)[1]).items()}}


def generate(python: Path, backend: str, model: Path, work: Path, dry: bool) -> dict[str, Any]:
    """``device_gen.py`` in its own process (HF in the check env, vLLM in the vLLM python)."""
    out = work / f"gen_{backend}.json"
    argv = [str(python), str(HERE / "device_gen.py"), backend, str(model), str(work / "prompts.json"), str(out)]
    proc = _run(argv + (["--check"] if dry else []), 900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode or not out.is_file():
        raise RuntimeError(f"{backend} generation failed (exit {proc.returncode}): {proc.stderr[-800:]}")
    return json.loads(out.read_text())


def _tok_s(tokens: float, seconds: float | None) -> float | None:
    return round(tokens / seconds, 1) if seconds else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GPU device check (see tests/gpu/run_device_check.sh)")
    ap.add_argument("--env", type=Path, required=True, help="venv with LLaMA-Factory (the check env)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wheels", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--require-vllm", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true", help="the real steps on CPU, tiny model (tests only)")
    args = ap.parse_args(argv)
    dry, env, work = args.dry_run, args.env.absolute(), args.work.absolute()
    global MODEL, BATCH, STEPS, CPU_SMOKE
    if args.cpu_smoke:
        MODEL, BATCH, STEPS, CPU_SMOKE = "tiny-qwen2", 8, 5, True
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"dry_run": dry, "cpu_smoke": CPU_SMOKE, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": f"builtin/{MODEL}",
                           "batch": BATCH, "cutoff_len": CUTOFF, "max_steps": STEPS, "steps_s": {}}

    def step(name: str, fn, *a):
        s = time.perf_counter()
        value = fn(*a)
        out["steps_s"][name] = round(time.perf_counter() - s, 2)
        print(f"device check: {name} ok ({out['steps_s'][name]:.1f}s)", flush=True)
        return value

    try:
        out["preflight"] = step("preflight", preflight, env, dry, CPU_SMOKE)
        out["wheelhouse"] = wheelhouse(args.wheels)
        if out["wheelhouse"]["present"] and out["wheelhouse"]["missing"]:
            raise Missing(f"wheels {', '.join(out['wheelhouse']['missing'])} in {args.wheels}; run make_wheelhouse.sh")
        vllm_py, tried = step("find vllm", find_vllm_python, env)
        out["vllm_python"] = str(vllm_py) if vllm_py else None
        if vllm_py is None and args.require_vllm:
            raise Missing(f"vllm: no python imports it (tried {', '.join(tried)}); set VLLM_PYTHON")
        import psutil

        from ftagent.core.hardware import GPUInfo, HardwareInfo, detect_gpus
        from ftagent.core.types import ScenarioInfo
        from ftagent.models.builtin import build_builtin
        from ftagent.tools.llamafactory.memory import estimate_for_hardware

        model = step("build model", build_builtin, MODEL, work / "models" / MODEL, _py(env))
        data, _ = step("data", make_data, work, 4000, 32 if CPU_SMOKE else 512)
        tps, longest = step("tokenize", tokens_per_sample, env, model, data)
        hardware = detect_gpus()
        if dry and not hardware.gpu_count and not CPU_SMOKE:  # plan as on the H200 the check is meant for
            hardware = HardwareInfo(gpus=[GPUInfo(index=0, name="NVIDIA H200 (dry run)", memory_total_gb=139.8,
                                                  memory_used_gb=0.0)])
        memory = estimate_for_hardware(model, hardware, cpu_ram_gb=psutil.virtual_memory().total / 1e9)
        out["hardware"] = hardware.summary()
        scenario = ScenarioInfo(benchmark="demo_add", base_model=f"builtin/{MODEL}", base_model_path=str(model),
                                file_path=str(work / "ft"), workspace_root=str(work), hardware=hardware,
                                memory=memory.model_dump(mode="json"), memory_report=memory.to_markdown())
        tokens = tps * BATCH * STEPS
        out.update(tokens_per_sample=round(tps, 1), longest_sample=longest, training={}, memory={})
        for method in METHODS:
            ours = step(f"ftagent {method}", run_ftagent, work, env, model, method, scenario, dry)
            hand = step(f"by hand {method}", run_by_hand, work, env, ours["config"], method, dry, scenario)
            est = memory.get("full_gc" if method == "full" else "lora")
            est_gb = round(est.static_gb_per_gpu + est.per_token_mb * BATCH * CUTOFF / 1e3, 3)
            # batches are padded to their longest row, not to cutoff_len: the estimate at that length too
            est_data_gb = round(est.static_gb_per_gpu + est.per_token_mb * BATCH * longest / 1e3, 3)
            planned = {"estimate_gb": est_gb, "estimate_gb_at_data_length": est_data_gb, "launch": memory.launch_of(est)}
            if dry:
                out["training"][method] = {"ftagent": ours, "hand": hand}
                out["memory"][method] = planned
                continue
            out["training"][method] = {
                "ftagent_tokens_per_s": _tok_s(tokens, ours["train_runtime_s"]),
                "hand_tokens_per_s": _tok_s(tokens, hand["train_runtime_s"]),
                "ftagent_wall_tokens_per_s": _tok_s(tokens, ours["train_wall_s"]),
                "hand_wall_tokens_per_s": _tok_s(tokens, hand["wall_s"]),
                "ftagent_validate_s": ours["validate_s"], "final_loss": ours["final_loss"]}
            out["memory"][method] = {**planned, "torch_max_allocated_gb": hand["max_allocated_gb"],
                                     "torch_max_reserved_gb": hand["max_reserved_gb"],
                                     "nvml_peak_gb_hand": hand["nvml_peak_gb"], "nvml_peak_gb_ftagent": ours["nvml_peak_gb"]}
            if method == "full":
                trained = Path(ours["output_dir"])
        target = model if dry else trained
        out["eval"] = {"hf": step("eval hf", generate, _py(env), "hf", target, work, dry)}
        if vllm_py is not None:
            out["eval"]["vllm"] = step("eval vllm", generate, vllm_py, "vllm", target, work, dry)
        else:
            out["eval"]["vllm"] = {"skipped": f"no python imports vllm (tried {', '.join(tried)})"}
    except Missing as exc:
        print(f"device check: missing {exc}", file=sys.stderr)
        out["missing"] = str(exc)
        args.out.write_text(json.dumps(out, indent=1, default=str))
        return 2
    out["total_s"] = round(time.perf_counter() - t0, 1)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"device check: {'dry run ' if dry else ''}done in {out['total_s']:.0f}s -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
