"""Sample a model on training prompts with the evaluation's own inference and scorer (issue 40).

:func:`sample_training_prompts` is one OpenCompass run over a JSONL of *training* rows ``{prompt, gold}``:
the model block is the evaluation's (:func:`.runs.model_spec`: same backend, chat template of the model
folder, answer-token cap) but sampling (``do_sample`` at the planner's temperature, ``n`` answers per
prompt); the dataset block is the benchmark's first validation block with its path, columns and prompt
replaced (the training prompt is the whole user turn, as LLaMA-Factory trains it: instruction + "\\n" +
input) and its evaluator and answer post-processor kept. The gold is read as the benchmark reads a reply
(``oc_reward.gold_as_answer``). The run mounts the model, the package and its own folder only: the
benchmark's items are not there to read.

The answers are read back per prompt and run with OpenCompass's per-item verdict (:mod:`.parse`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.benchmarks.components import component_path
from ftagent.core.errors import ErrorType, StepError
from ftagent.runners.base import Mount, Runner
from ftagent.runners.scrubbed import run_scrubbed
from ftagent.runners.vllmenv import vllm_env_path
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.backend import choose_backend
from ftagent.tools.opencompass.inference import answer_token_limit
from ftagent.tools.opencompass.merge import is_lora_adapter
from ftagent.tools.opencompass.model_block import model_spec
from ftagent.tools.opencompass.render import render_config
from ftagent.tools.opencompass.run_job import PACKAGE_ROOT
from ftagent.tools.opencompass.serving import VllmServeCommand, served_model, server_check

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter, DatasetBlock
    from ftagent.core.settings import Settings
    from ftagent.tools.opencompass.inference import InferenceSettings
    from ftagent.tools.opencompass.progress import ProgressCallback

ABBR = "training_prompts"
PROMPTS_FILE = "prompts.jsonl"


def sampling_block(benchmark: BenchmarkAdapter, root: Path, prompts: Path, max_out_len: int) -> DatasetBlock:
    """The benchmark's first validation block, turned to the training prompts in ``prompts`` (``{prompt,
    gold}`` rows): its evaluator and answer post-processor, the gold read as an answer, no judge."""
    blocks = benchmark.dataset_blocks(root, "validation")
    if not blocks:
        raise StepError(f"benchmark {benchmark.spec.key} has no validation block to score samples with",
                        error_type=ErrorType.EVAL)
    first = blocks[0]
    kwargs: dict[str, Any] = {}
    if first.postprocessor:
        kwargs = {"postprocessor": component_path(first.postprocessor), **first.postprocessor_kwargs}
    return first.model_copy(update={
        "abbr": ABBR, "path": str(prompts), "input_columns": ["prompt"], "output_column": "gold",
        "rounds": [{"role": "HUMAN", "prompt": "{prompt}"}], "max_out_len": max_out_len, "judge": None,
        "reference_postprocessor": "@gold_as_answer", "reference_postprocessor_kwargs": kwargs})


def _sampling_spec(mspec: Any, temperature: float) -> Any:
    """The evaluation's model block, sampling: every backend draws at ``temperature`` (HF included; top-k
    off: 0 for transformers' generate, -1 for vLLM)."""
    top_k = 0 if mspec.backend == "hf" else -1
    return mspec.model_copy(update={"do_sample": True, "temperature": float(temperature), "top_p": 1.0,
                                    "top_k": top_k})


def sample_training_prompts(
    model_path: Path | str, *, rows: list[dict[str, str]], samples_per_prompt: int, temperature: float,
    benchmark: BenchmarkAdapter, settings: Settings, runner: Runner, work_dir: Path, items_root: Path,
    base_path: Path | str | None = None, model_name: str = "", timeout: float | None = None, gpu_count: int = 0,
    inference: InferenceSettings | None = None, on_progress: ProgressCallback | None = None,
) -> list[dict[str, Any]]:
    """``samples_per_prompt`` answers of the model to each ``{prompt, gold}`` row, each with its score.

    ``items_root``: where the session's benchmark is prepared (its frozen copy, ``ScenarioInfo.items_root``):
    only its rules (evaluator, post-processor) are read from there, never an item.

    Returns:
        ``[{prompt, gold, sample, score, run}]`` in prompt order, then run (``score``: the evaluator's
        verdict as the evaluation counts it, :func:`.parse.is_correct`: 1.0 right, 0.0 wrong).

    Raises:
        StepError(EVAL/TIMEOUT): OpenCompass failed, or wrote fewer answers than asked.
    """
    ft = settings.ft
    work_dir = Path(work_dir).absolute()
    work_dir.mkdir(parents=True, exist_ok=True)
    prompts = work_dir / PROMPTS_FILE
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"], "gold": r["gold"]}, ensure_ascii=False) + "\n"
                               for r in rows), encoding="utf-8")
    root = Path(items_root)
    model_path = Path(model_path)
    lora = is_lora_adapter(model_path)
    base = Path(base_path) if base_path else None
    command = VllmServeCommand(vllm_env_path(settings))
    choice = choose_backend(gpu_count, runner, forced=ft.eval_backend, server=lambda: server_check(command))
    mspec = _sampling_spec(model_spec(model_path, base, model_name, gpu_count, "ft-samples", serve_adapter=lora,
                                      backend=choice.backend, device=choice.device, inference=inference), temperature)
    cap = answer_token_limit(benchmark.spec.max_out_len, mspec.max_out_len, thinking=mspec.enable_thinking,
                             max_seq_len=mspec.max_seq_len) or mspec.max_out_len
    block = sampling_block(benchmark, root, prompts, cap)
    with served_model(mspec, command, work_dir, timeout=timeout, on_progress=on_progress) as served:
        run = _run(block, served, samples_per_prompt, settings, runner, work_dir, timeout, benchmark.spec.key)
    return _read(run, rows, samples_per_prompt)


def _run(block: DatasetBlock, mspec: Any, n: int, settings: Settings, runner: Runner, work_dir: Path,
         timeout: float | None, key: str) -> Path:
    source = render_config([block], mspec, benchmark=key, split=ABBR, num_runs=n, in_process=True)
    cfg = work_dir / "oc_samples.py"
    cfg.write_text(source, encoding="utf-8")
    out_dir = work_dir / "eval"
    env = {"PYTHONPATH": str(PACKAGE_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    if mspec.backend == "vllm-server":
        env["NO_PROXY"] = env["no_proxy"] = ",".join(x for x in ("127.0.0.1", "localhost", os.environ.get("NO_PROXY", ""))
                                                      if x)
    mounts = [Mount(source=PACKAGE_ROOT / "ftagent"), Mount(source=Path(mspec.path)),
              Mount(source=work_dir, read_only=False)]  # no benchmark folder: its items are not readable here
    if mspec.adapter_path:
        mounts.append(Mount(source=Path(mspec.adapter_path)))
    res = run_scrubbed(runner, ["opencompass", str(cfg), "--work-dir", str(out_dir)], tree=work_dir, tool="eval",
                       workdir=work_dir, env=env, mounts=mounts, timeout=timeout,
                       log_file=work_dir / "opencompass_samples.log")  # no link left where ftagent reads next
    run = parse.latest_run(out_dir)
    reason = "timed out" if res.timed_out else parse.failure_reason(run)
    if reason or run is None:
        raise StepError(f"sampling the model on training prompts failed: {reason or 'no OpenCompass run'}",
                        error_type=ErrorType.TIMEOUT if res.timed_out else ErrorType.EVAL,
                        log_tail=res.log_tail[-3000:], details={"run_dir": str(run) if run else None})
    return run


def _read(run: Path, rows: list[dict[str, str]], n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    runs: dict[int, int] = {}
    for _name, idx, detail, pred in parse._scored(run, None):  # an item's runs one after the other
        if not 0 <= idx < len(rows):
            continue
        row = rows[idx]
        sample = pred.get("prediction", detail.get("origin_prediction", detail.get("pred")))
        sample = sample[0] if isinstance(sample, list) and sample else sample
        out.append({"prompt": row["prompt"], "gold": row["gold"], "sample": "" if sample is None else str(sample),
                    "score": float(parse.is_correct(detail)), "run": runs.get(idx, 0)})
        runs[idx] = runs.get(idx, 0) + 1
    if len(out) < len(rows) * n:
        raise StepError(f"sampling wrote {len(out)} answers, {len(rows) * n} were asked for", error_type=ErrorType.EVAL,
                        details={"run_dir": str(run)})
    return out
