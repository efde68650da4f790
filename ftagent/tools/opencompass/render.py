"""Render an OpenCompass config from ``configs/opencompass/eval_config.py.j2``.

StrictUndefined + a ``py`` filter (``repr``) for every literal; the result is checked with
``ast.parse``. The chat template is never set by ftagent: the config points ``tokenizer_path`` at the
folder whose tokenizer carries the template the model was trained with (the adapter/model folder
written by LLaMA-Factory, else the base model), so evaluation prompts are exactly the training ones.
For ``vllm-server`` the model block is :class:`~ftagent.tools.opencompass.oc_ext.TrainedFormatOpenAIModel`
calling the server (started with ``--tokenizer`` = that same folder) at ``api_base``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel

from ftagent.benchmarks.base import DatasetBlock
from ftagent.benchmarks.components import component_path
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import config_file
from ftagent.tools.opencompass import provides  # noqa: F401 - registers the "@Name" components it resolves
from ftagent.tools.opencompass.judge import JUDGE_MAX_OUT_LEN, JUDGE_TOKENIZER, judge_max_seq_len

TEMPLATE_DIR = config_file("opencompass")
TEMPLATE_NAME = "eval_config.py.j2"
TEMPLATE_VERSION = "3"  # 2: HF turns keep the training format; 3: stock scoring (think strip, math-verify)
JUDGE_PROMPT = (
    "As a grading expert, decide whether the candidate's final answer matches the standard answer. "
    "Trust the standard answer, do not solve the problem again, accept equivalent forms and ignore "
    "\\boxed{} wrappers. Reply with one letter: A (CORRECT) or B (INCORRECT).\n"
    "<Original Question Begin>\n{question}\n<Original Question End>\n"
    "<Gold Target Begin>\n{answer}\n<Gold Target End>\n"
    "<Predicted Answer Begin>\n{prediction}\n<Predicted End>\nGrade:"
)


class ModelSpec(BaseModel):
    """The model block of the config."""

    backend: Literal["hf", "vllm", "vllm-server"] = "hf"
    device: Literal["cpu", "cuda"] = "cpu"  # where the HF backend (or the model server) runs
    abbr: str
    path: str  # full model, or the base model when adapter_path is set
    adapter_path: str | None = None
    tokenizer_path: str  # folder whose tokenizer holds the chat template used in training
    max_seq_len: int = 2048
    max_out_len: int = 512
    batch_size: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 1
    do_sample: bool = False
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "bfloat16"
    max_lora_rank: int = 64
    enable_thinking: bool = False
    # vllm-server: the running server's OpenAI base URL (``http://127.0.0.1:<port>/v1/``, known only
    # once it answers, so never part of a cache key) and the name the model is served under
    api_base: str | None = None
    served_name: str | None = None
    # vllm-server only, none of them the model's behaviour (not in the cache key): vLLM replicas over the GPUs
    # (``--data-parallel-size``), the GPUs and the port of the trial's slot (issue 41; serving.server_spec)
    data_parallel_size: int = 1
    cuda_visible_devices: str | None = None
    port: int | None = None


def chat_template_of(folder: Path | str) -> str | None:
    """The chat template stored with a tokenizer (``chat_template.jinja`` or tokenizer_config.json)."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text(encoding="utf-8")
    cfg = folder / "tokenizer_config.json"
    if cfg.exists():
        value = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:  # named templates: use "default"
            named = {t.get("name"): t.get("template") for t in value}
            return named.get("default") or value[0].get("template")
    return None


def template_folder(model_path: Path | str, base_path: Path | str | None = None) -> Path:
    """The folder whose tokenizer chat template evaluation must use: the trained model/adapter
    folder when it has one (LLaMA-Factory saves its template there), else the base model.

    Raises:
        StepError(EVAL): when neither folder has a chat template (a fallback would mismatch training).
    """
    for folder in (model_path, base_path):
        if folder and chat_template_of(folder):
            return Path(folder).resolve()
    raise StepError(f"no chat template in the tokenizer files of {model_path}"
                    + (f" or {base_path}" if base_path else ""), error_type=ErrorType.EVAL,
                    suggestion="save the tokenizer (with its chat_template) next to the model")


def _import_name(ref: str) -> tuple[str, str]:
    """(module, name) of an evaluator/post-processor reference (``"@Name"`` or ``"module:Name"``)."""
    module, _, name = (component_path(ref) or "").partition(":")
    return module, name


def render_config(datasets: list[DatasetBlock], model: ModelSpec, *, benchmark: str, split: str,
                  num_runs: int = 1, pass_k: int | None = None, max_workers: int = 1,
                  in_process: bool = False) -> str:
    """The OpenCompass config source (validated with ``ast.parse``).

    Args:
        datasets: the dataset blocks (of one or several splits: abbrs must be unique).
        model: the model block.
        benchmark: recorded in the header.
        split: recorded in the header (e.g. ``"validation+test"``).
        num_runs: ``n`` of every dataset (repeated generations).
        pass_k: ``k`` of every dataset.
        max_workers: ``LocalRunner.max_num_workers`` of the subprocess layout.
        in_process: one task for all datasets and OpenCompass's in-process (``debug``) runner: one
            process, one model load, for inference and scoring alike. False renders the layout of
            one subprocess per (model, dataset) task.
    """
    env = Environment(loader=FileSystemLoader(str(TEMPLATE_DIR)), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["py"] = repr
    imports: list[tuple[str, str]] = []
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        row = ds.model_dump()
        for field in ("evaluator", "postprocessor", "reference_postprocessor"):
            dotted = getattr(ds, field)
            row[f"{field}_name"] = None
            if dotted:
                module, name = _import_name(dotted)
                if (module, name) not in imports:
                    imports.append((module, name))
                row[f"{field}_name"] = name
        rows.append(row)
    source = env.get_template(TEMPLATE_NAME).render(
        datasets=rows, model=model.model_dump(), imports=imports, benchmark=benchmark, split=split,
        num_runs=num_runs, pass_k=pass_k, max_workers=max_workers, template_version=TEMPLATE_VERSION,
        in_process=in_process,
        judge_used=any(ds.judge for ds in datasets), judge_prompt=JUDGE_PROMPT,
        judge_tokenizer=JUDGE_TOKENIZER, judge_max_seq_len=judge_max_seq_len, judge_max_out_len=JUDGE_MAX_OUT_LEN,
    )
    if model.backend == "vllm-server" and not (model.api_base and model.served_name):
        raise ValueError("a vllm-server model block needs api_base and served_name (start the server first)")
    ast.parse(source)
    return source
