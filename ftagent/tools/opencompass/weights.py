"""Never score weights the model did not load (issue 43): the weights are checked against ``config.json``
before any evaluation runs.

Before: a ``config.json`` naming Llama over Qwen2 weights (6 tensors dropped), or Bert (every weight newly
initialised), was evaluated: rc 0, score 0.0, the load warnings only in OpenCompass's log; a cut
``model.safetensors`` failed after a whole OpenCompass run (167 s).

:func:`weights_problem` (one model folder, or a LoRA adapter and its base):

1. the files are whole (:func:`ftagent.models.checkpoint.checkpoint_problems`, in ftagent's process: a cut
   file or a missing shard is found in milliseconds, before anything else runs);
2. the tensors fit the architecture: ``weights_script.py`` in the tool env instantiates the config's class on
   the ``meta`` device and compares the checkpoint's names and shapes with it the way transformers'
   ``from_pretrained`` does (missing, unexpected, mismatched keys; for an adapter: every LoRA tensor lands on
   a base module with PEFT's shape). Nothing is loaded: ~15 s on a loaded CPU, whatever the model's size.

A verdict is cached by the model files' digest (``eval_cache/weights/<digest>.json``): a model is checked
once, however often it is evaluated. A check that cannot run (a tool env without transformers, a config
whose class is remote code) is said in a warning and does not block the evaluation; a definite misfit does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.models.checkpoint import checkpoint_problems
from ftagent.runners.base import Mount, Runner

SCRIPT = Path(__file__).with_name("weights_script.py")
SHOWN = 4  # keys named per kind in the message (the count says how many more)


class WeightsVerdict(BaseModel):
    """What ``weights_script.py`` found (empty lists: the weights fit)."""

    architecture: str = ""
    checkpoint_tensors: int = 0
    model_tensors: int = 0
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list)
    mismatched: list[list[object]] = Field(default_factory=list)  # [name, checkpoint shape, model shape]
    adapter_tensors: int = 0
    adapter_unexpected: list[str] = Field(default_factory=list)
    adapter_mismatched: list[list[object]] = Field(default_factory=list)
    error: str = ""  # the check could not run

    def problem(self) -> str | None:
        """One sentence naming what does not fit, or None."""
        parts = []
        for label, keys in (("missing from the checkpoint (they would be newly initialised)", self.missing),
                            ("in the checkpoint but not in the model (they would be dropped)", self.unexpected),
                            ("of the adapter that land on no module of the base (PEFT would drop them)",
                             self.adapter_unexpected)):
            if keys:
                more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
                parts.append(f"{len(keys)} tensor(s) {label}: {', '.join(keys[:SHOWN])}{more}")
        for label, rows in (("with another shape than the model's", self.mismatched),
                            ("of the adapter with another shape than PEFT gives them", self.adapter_mismatched)):
            if rows:
                shown = "; ".join(f"{r[0]} {r[1]} vs {r[2]}" for r in rows[:SHOWN])
                parts.append(f"{len(rows)} tensor(s) {label}: {shown}")
        if not parts:
            return None
        return (f"its weights do not fit its config.json (transformers builds {self.architecture or '?'} from it: "
                f"{self.model_tensors} tensors; the checkpoint holds {self.checkpoint_tensors}): " + "; ".join(parts))


def _run_script(model: Path, adapter: Path | None, runner: Runner, work_dir: Path,
                timeout: float | None) -> WeightsVerdict:
    work_dir.mkdir(parents=True, exist_ok=True)
    cmd = ["python", str(SCRIPT), str(model), *([str(adapter)] if adapter else [])]
    mounts = [Mount(source=SCRIPT.parent), Mount(source=model), Mount(source=work_dir, read_only=False),
              *([Mount(source=adapter)] if adapter else [])]
    log = work_dir / "weights_check.log"
    res = runner.run(cmd, tool="eval", workdir=work_dir, mounts=mounts, timeout=timeout, log_file=log)
    text = Path(res.log_file).read_text(encoding="utf-8", errors="replace") if res.log_file else ""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return WeightsVerdict.model_validate(json.loads(line))
            except ValueError:
                break
    return WeightsVerdict(error=f"the check wrote no verdict (exit {res.exit_code}; see {log})")


def weights_problem(model_path: Path, base_path: Path | None, runner: Runner, *, work_dir: Path,
                    cache_dir: Path, digest: str, timeout: float | None = 600.0,
                    on_warning: Callable[[str], None] | None = None) -> str | None:
    """Why the model at ``model_path`` (a LoRA adapter of ``base_path`` when that is given) must not be
    evaluated, or None when its weights fit (see the module docstring)."""
    model_path = Path(model_path)
    folders = [model_path] + ([Path(base_path)] if base_path else [])
    for folder in folders:
        cut = checkpoint_problems(folder)
        if cut:
            return f"{folder}: " + "; ".join(cut)
    cached = Path(cache_dir) / "weights" / f"{digest}.json"
    if cached.is_file():
        verdict = WeightsVerdict.model_validate_json(cached.read_text(encoding="utf-8"))
    else:
        model, adapter = (Path(base_path), model_path) if base_path else (model_path, None)
        verdict = _run_script(model, adapter, runner, Path(work_dir), timeout)
        if not verdict.error:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(".tmp")
            tmp.write_text(verdict.model_dump_json(), encoding="utf-8")
            tmp.replace(cached)
    if verdict.error:
        if on_warning is not None:
            on_warning(f"the weights of {model_path} could not be checked against its config: {verdict.error}"[:600])
        return None
    problem = verdict.problem()
    return None if problem is None else f"{model_path}: {problem}"
