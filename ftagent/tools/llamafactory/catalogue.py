"""LLaMA-Factory's parameter catalogue: extracted once in the tool env, cached as JSON.

``load_or_build_catalogue(info_dir, runner)`` returns an :class:`LFCatalogue`. The two files under
``info_dir`` (``constants.json``, ``parameters.json``) are written by ``catalogue_script.py`` run
with the tool env's python; they are rebuilt when missing, unreadable, or when the installed
LLaMA-Factory version differs from the one stored in them (the reference never refreshed its cache).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount, Runner

SCRIPT = Path(__file__).with_name("catalogue_script.py")
_VERSION_PROBE = "import importlib.metadata as m; print('LF_VERSION=' + m.version('llamafactory'))"


class LFParam(BaseModel):
    """One LLaMA-Factory / transformers argument."""

    name: str
    type: str = ""
    default: Any = None
    help: str = ""
    section: str = ""  # model | data | finetuning | training | generating
    group: str = ""  # defining dataclass, e.g. LoraArguments
    accepts_mapping: bool = False
    accepts_list: bool = False


class LFCatalogue(BaseModel):
    """Every argument LLaMA-Factory accepts, plus its constants (methods, stages, templates)."""

    version: str
    parameters: dict[str, LFParam] = Field(default_factory=dict)
    methods: list[str] = Field(default_factory=list)
    training_stages: dict[str, str] = Field(default_factory=dict)
    templates: list[str] = Field(default_factory=list)
    supported_models: dict[str, str] = Field(default_factory=dict)
    # issue 40: TRL's GRPOConfig fields (the GRPO stage's keys) and TRL's version
    grpo_parameters: dict[str, LFParam] = Field(default_factory=dict)
    trl_version: str = ""

    def knows(self, name: str) -> bool:
        """True when ``name`` is a parameter LLaMA-Factory accepts."""
        return name in self.parameters

    def format_for_prompt(
        self,
        categories: list[str] | None = None,
        *,
        managed: list[str],
        exclude_patterns: list[str] | None = None,
        max_help: int = 100,
        max_chars: int = 14000,
        max_tokens: int | None = None,
        gpu: bool = True,
        count: Callable[[str], int] | None = None,
    ) -> str:
        """A grouped, bounded description of the parameters for the planner's prompt.

        The arguments the planner actually tunes (:data:`ESSENTIAL`: method, LoRA/QLoRA, learning rate
        and schedule, batch and accumulation, epochs/steps, cutoff, packing, precision,
        evaluation/saving) come first, grouped by topic, and are always kept (exclusion patterns do
        not hide them). ``deepspeed`` is not among them: the validator sets it from the memory plan. The other arguments follow by section, minus the
        exclusion patterns, as long as the budget allows: whole lines are added until the next one
        would not fit, and a last line says how many were left out. Nothing is cut in the middle.

        Args:
            categories: sections (``model``, ``data``, ``finetuning``, ``training``, ``generating``) or
                groups (``LoraArguments``...) of the other arguments; None = model, data, finetuning,
                training. When given, only essential arguments of these categories are listed.
            exclude_patterns: regexes of names to hide; None = ``prompt_exclude_patterns`` of
                ``configs/llamafactory/defaults.yaml``.
            max_help: help text of the other arguments is cut to this many characters.
            max_chars: character budget of the whole text.
            max_tokens: token budget of the whole text (with ``count``, default ``ceil(chars / 4)``).
            gpu: the run has GPUs (DeepSpeed and the mixed-precision flags matter).
            managed: the keys ftagent sets or removes itself (``config.managed_keys``; passed in, as
                ``config`` imports this module).
            count: token counter for ``max_tokens``.
        """
        excluded = _exclusions(exclude_patterns)
        count = count or (lambda text: -(-len(text) // 4))
        wanted = set(categories or ["model", "data", "finetuning", "training"])

        def chosen(param: LFParam) -> bool:
            return categories is None or param.section in wanted or param.group in wanted

        head, essential = self._head(managed, gpu, chosen, max_help)
        rest: list[LFParam] = [p for p in self.parameters.values() if p.name not in essential and chosen(p)
                               and (categories is not None or p.section in wanted)
                               and (excluded is None or not excluded.fullmatch(p.name))]
        rest.sort(key=lambda p: SECTION_ORDER.index(p.section) if p.section in SECTION_ORDER else 99)
        body, left_out = _budgeted(rest, len(head), count(head), max_chars=max_chars, max_tokens=max_tokens,
                                   max_help=max_help, count=count)
        out = "\n".join([head, *body])
        if left_out:
            what = ", ".join(f"{n} {s}" for s, n in left_out.items())
            out += f"\n({sum(left_out.values())} more valid arguments not listed for space: {what}.)"
        return out

    def _head(self, managed: list[str], gpu: bool, chosen: Callable[[LFParam], bool],
              max_help: int) -> tuple[str, set[str]]:
        """The version and methods, the system-managed keys and the arguments the planner tunes (always kept),
        and the names of those arguments."""
        lines = [f"LLaMA-Factory {self.version}; finetuning_type is one of: {', '.join(self.methods)}",
                 # the config prompt shows this up front (issue 35: keys the planner set were replaced unseen)
                 f"{MANAGED_HEADING}\n" + "; ".join(managed)]
        essential: set[str] = set()
        groups = [(title, names) for title, names in ESSENTIAL if gpu or title not in GPU_ONLY]
        if groups:
            lines.append("## Training arguments you tune (all valid keys)")
        for title, names in groups:
            params = [self.parameters[n] for n in names if n in self.parameters and chosen(self.parameters[n])]
            essential.update(names)
            if params:
                lines.append(f"### {title}")
                lines += [_param_line(p, max(max_help, 220)) for p in params]
        return "\n".join(lines), essential


def _exclusions(exclude_patterns: list[str] | None) -> re.Pattern[str] | None:
    """The names hidden from the other arguments (None: defaults.yaml's patterns and system-managed keys)."""
    if exclude_patterns is None:
        from ftagent.tools.llamafactory.defaults import load_lf_defaults

        defaults = load_lf_defaults()
        exclude_patterns = defaults.prompt_exclude_patterns + [re.escape(k) for k in defaults.system_managed]
    return re.compile("|".join(f"(?:{p})" for p in exclude_patterns)) if exclude_patterns else None


def _budgeted(rest: list[LFParam], used_chars: int, used_tokens: int, *, max_chars: int, max_tokens: int | None,
              max_help: int, count: Callable[[str], int]) -> tuple[list[str], dict[str, int]]:
    """The other arguments' lines by section, whole lines while the budget allows (after the head's
    ``used_chars``/``used_tokens``), and how many of each section were left out after the first that did not fit."""
    body: list[str] = []
    left_out: dict[str, int] = {}
    current = None
    for param in rest:
        line = _param_line(param, max_help)
        title = f"## Other {param.section} arguments" if param.section != current else ""
        chunk = "\n".join([title, line] if title else [line])
        fits = used_chars + len(chunk) + 200 <= max_chars and (
            max_tokens is None or used_tokens + count(chunk) + 60 <= max_tokens)
        if not fits or left_out:
            left_out[param.section] = left_out.get(param.section, 0) + 1
            continue
        current = param.section
        body.append(chunk)
        used_chars += len(chunk) + 1
        used_tokens += count(chunk)
    return body, left_out


#: the heading of the system-managed keys in :meth:`LFCatalogue.format_for_prompt` (the config prompt moves
#: that section up front)
MANAGED_HEADING = "## Set by the system in every run (leave these out: a value you write is replaced or removed)"

# The arguments the planner tunes, by topic: always listed (see LFCatalogue.format_for_prompt).
ESSENTIAL: list[tuple[str, list[str]]] = [
    ("Method", ["finetuning_type", "template", "enable_thinking"]),
    ("LoRA / QLoRA", ["lora_rank", "lora_alpha", "lora_dropout", "lora_target", "use_rslora", "use_dora",
                      "additional_target", "quantization_bit", "quantization_method"]),
    ("Learning rate and schedule", ["learning_rate", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
                                    "weight_decay", "max_grad_norm", "optim"]),
    ("Batch and accumulation", ["per_device_train_batch_size", "gradient_accumulation_steps"]),
    ("Epochs and steps", ["num_train_epochs", "max_steps", "max_samples", "seed"]),
    ("Sequence length and packing", ["cutoff_len", "packing", "neat_packing", "train_on_prompt",
                                     "mask_history"]),
    ("Precision and memory", ["bf16", "fp16", "pure_bf16", "flash_attn", "disable_gradient_checkpointing"]),
    ("Evaluation, logging and saving", ["val_size", "eval_strategy", "eval_steps", "logging_steps",
                                        "save_strategy", "save_steps", "save_total_limit"]),
    ("Preference stages (dpo, kto, orpo, simpo; an sft run drops them)",
     ["pref_beta", "pref_loss", "pref_ftx", "simpo_gamma", "dpo_label_smoothing", "kto_chosen_weight",
      "kto_rejected_weight"]),
]
GPU_ONLY: set[str] = set()  # topics shown only with GPUs (DeepSpeed is set by the system from the memory plan)
SECTION_ORDER = ["finetuning", "training", "data", "model", "generating"]


def _param_line(param: LFParam, max_help: int) -> str:
    text = " ".join(param.help.split())
    if len(text) > max_help:
        text = text[: max_help - 3].rsplit(" ", 1)[0] + "..."
    type_name = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", param.type)  # drop module paths
    return f"- {param.name} ({type_name}, default={param.default!r}): {text}"


def read_catalogue(info_dir: Path) -> LFCatalogue:
    """Load the cached catalogue files (raises OSError/ValueError when missing or invalid)."""
    info_dir = Path(info_dir)
    consts = json.loads((info_dir / "constants.json").read_text(encoding="utf-8"))
    params = json.loads((info_dir / "parameters.json").read_text(encoding="utf-8"))
    grpo = json.loads((info_dir / "grpo_parameters.json").read_text(encoding="utf-8"))  # absent: an older cache
    if not consts.get("llamafactory_version") == params.get("llamafactory_version") == grpo.get("llamafactory_version"):
        raise ValueError("the catalogue files come from different LLaMA-Factory versions")
    try:
        return LFCatalogue(
            version=consts["llamafactory_version"],
            parameters={p["name"]: LFParam(**p) for p in params["parameters"]},
            methods=consts.get("methods", []),
            training_stages=consts.get("training_stages", {}),
            templates=consts.get("templates", []),
            supported_models=consts.get("supported_models", {}),
            grpo_parameters={p["name"]: LFParam(**p) for p in grpo["parameters"]},
            trl_version=str(grpo.get("trl_version", "")),
        )
    except (KeyError, TypeError, ValidationError) as exc:
        raise ValueError(f"malformed LLaMA-Factory catalogue in {info_dir}: {exc}") from exc


def installed_version(runner: Runner, workdir: Path, timeout: float = 120) -> str:
    """The LLaMA-Factory version installed in the training tool env (no heavy import)."""
    result = runner.run(["python", "-c", _VERSION_PROBE], tool="train", workdir=workdir, timeout=timeout)
    match = re.search(r"LF_VERSION=(\S+)", result.log_tail or "")
    if not result.ok or match is None:
        raise EnvironmentFailure(
            f"LLaMA-Factory is not importable in the training env (exit {result.exit_code}):\n"
            f"{result.log_tail[-2000:]}"
        )
    return match.group(1)


def build_catalogue(info_dir: Path, runner: Runner, timeout: float = 600) -> LFCatalogue:
    """Run the extraction script in the training env and read its output."""
    info_dir = Path(info_dir).absolute()
    info_dir.mkdir(parents=True, exist_ok=True)
    result = runner.run(
        ["python", str(SCRIPT), str(info_dir)], tool="train", workdir=info_dir,
        env={"OMP_NUM_THREADS": "1", "DISABLE_VERSION_CHECK": "1"},
        mounts=[Mount(source=SCRIPT.parent), Mount(source=info_dir, read_only=False)],
        timeout=timeout, log_file=info_dir / "extract.log",
    )
    if not result.ok:
        raise EnvironmentFailure(
            f"extracting LLaMA-Factory's parameters failed (exit {result.exit_code}, timed out "
            f"{result.timed_out}):\n{result.log_tail[-3000:]}"
        )
    return read_catalogue(info_dir)


def load_or_build_catalogue(info_dir: Path, runner: Runner, *, check_version: bool = True,
                            timeout: float = 600) -> LFCatalogue:
    """The cached catalogue, rebuilt when missing, broken or stale.

    Args:
        info_dir: cache folder, normally ``FT_FILE_PATH/.llama_factory_info``.
        runner: runs commands in the training tool env.
        check_version: compare the cached version with the installed one (one cheap subprocess).
        timeout: seconds for the extraction script.

    Raises:
        EnvironmentFailure: when LLaMA-Factory cannot be imported or the extraction fails.
    """
    from filelock import FileLock

    info_dir = Path(info_dir)
    info_dir.parent.mkdir(parents=True, exist_ok=True)
    # sessions sharing FT_FILE_PATH: one extracts, the others wait and read its result
    with FileLock(str(info_dir.parent / f".{info_dir.name}.lock")):
        try:
            cached = read_catalogue(info_dir)
        except (OSError, ValueError):
            cached = None
        if cached is not None and (not check_version or installed_version(runner, info_dir) == cached.version):
            return cached
        return build_catalogue(info_dir, runner, timeout=timeout)
