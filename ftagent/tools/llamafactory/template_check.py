"""Does the planner's ``template:`` train the format evaluation will prompt with?

LLaMA-Factory 0.9.5 (``llamafactory/data/template.py``) formats the training data with the named
template, but writes that template into the tokenizer it saves only when the template has
``replace_jinja_template`` (alpaca, chatml, llama2 ...) or the model has no chat template; otherwise
(qwen, llama3, mistral ...) the saved tokenizer keeps the base model's own chat template, and
OpenCompass prompts the trained model with that one. ``template: qwen`` on a ChatML model trains with
Qwen's default system turn and evaluates without it; ``template: llama3`` trains Llama-3 headers and
evaluates ChatML.

:func:`probe_template` renders one conversation both ways with the real LLaMA-Factory and tokenizer
in the training tool env (``template_probe_script.py``); :func:`template_mismatch` turns a
disagreement into the failure the planner gets (which format each side uses, and the templates that
match the model's own).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.runners.base import Mount, Runner
from ftagent.runners.scrubbed import run_scrubbed

SCRIPT = Path(__file__).with_name("template_probe_script.py")
RESULT_FILE = "template_check.json"
LOG_FILE = "template_check.log"
PROBE_ANSWER = "The answer is 42."  # the probe's answer text (template_probe_script.ANSWER)
DATA_KEYS = ("default_system", "enable_thinking", "tool_format")  # train.yaml keys that change the format
SHOWN_MATCHES = 8


class TemplateProbe(BaseModel):
    """One conversation as LLaMA-Factory trains it and as evaluation prompts the trained model."""

    template: str
    exists: bool
    base_has_chat_template: bool
    replaces_chat_template: bool = False
    training_prompt: str = ""
    training_answer: str = ""
    evaluation_prompt: str = ""
    evaluation_answer: str = ""
    matching: list[str] = Field(default_factory=list)  # templates that train the model's own prompt

    def answer_end(self, answer: str) -> str:
        """What follows the answer text (the end-of-turn the model learns, or stops at)."""
        return answer.split(PROBE_ANSWER, 1)[-1]

    @property
    def agrees(self) -> bool:
        """Same prompt and same end of turn in training and evaluation."""
        return (self.training_prompt == self.evaluation_prompt
                and self.answer_end(self.training_answer) == self.answer_end(self.evaluation_answer))


class ProbeError(RuntimeError):
    """The probe could not run (the micro-batch run then shows the real error)."""


def probe_template(model_dir: Path, config: dict[str, Any], runner: Runner, workdir: Path,
                   timeout: float) -> TemplateProbe:
    """Render the probe conversation with ``config['template']`` for the model in ``model_dir``.

    Raises:
        ProbeError: the script failed or wrote no result.
    """
    workdir = Path(workdir).absolute()
    out = workdir / RESULT_FILE
    out.unlink(missing_ok=True)
    data_args = {k: config[k] for k in DATA_KEYS if k in config}
    result = run_scrubbed(
        runner, ["python", str(SCRIPT), str(Path(model_dir).absolute()), str(out), str(config["template"]),
                 json.dumps(data_args)],
        tree=workdir, tool="train", workdir=workdir, env={"OMP_NUM_THREADS": "1", "DISABLE_VERSION_CHECK": "1",
                                            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        mounts=[Mount(source=SCRIPT.parent), Mount(source=Path(model_dir)), Mount(source=workdir, read_only=False)],
        timeout=timeout, log_file=workdir / LOG_FILE)
    if not result.ok or not out.is_file():
        raise ProbeError(f"exit {result.exit_code}: {(result.log_tail or '').strip()[-500:]}")
    try:
        return TemplateProbe.model_validate_json(out.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ProbeError(f"unreadable {out.name}: {exc}") from exc


def template_mismatch(probe: TemplateProbe) -> dict[str, Any] | None:
    """``{message, suggestion, details}`` when training and evaluation formats differ, else None."""
    if not probe.exists or probe.agrees:
        return None
    names = [n for n in probe.matching if n != probe.template][:SHOWN_MATCHES]
    use = f" or set it to one that renders the model's own format: {', '.join(names)}" if names else ""
    return {
        "message": (f"template '{probe.template}' trains a different chat format than evaluation uses: "
                    "LLaMA-Factory keeps the base model's own chat template in the trained model's tokenizer "
                    f"for '{probe.template}', and OpenCompass prompts with that one"),
        "suggestion": ("Remove `template:` from train.yaml (LLaMA-Factory then reads the base model's own chat "
                       f"template, so training and evaluation agree){use}."),
        "details": {"template": probe.template, "matching_templates": names,
                    "training_prompt": probe.training_prompt, "evaluation_prompt": probe.evaluation_prompt,
                    "training_answer": probe.training_answer, "evaluation_answer": probe.evaluation_answer},
    }
