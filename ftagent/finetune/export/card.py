"""The model card (``README.md``): a YAML header in the Hugging Face model-card schema (``base_model``,
``library_name``, ``tags``, ``datasets``, ``model-index``) and a Jinja2 body (``model_card.md.j2``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import yaml

from ftagent.finetune.export.facts import ExportFacts, SplitScores
from ftagent.finetune.export.reproduce import Reproduction, is_hub_id

TEMPLATE = "model_card.md.j2"
LICENCE_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")


def model_name(facts: ExportFacts, repo_id: str | None = None) -> str:
    """The card's title: the Hub repo's name when pushing, else ``<base>-ftagent-<benchmark>``."""
    if repo_id:
        return repo_id.split("/")[-1]
    return f"{facts.base_model.rstrip('/').split('/')[-1]}-ftagent-{facts.benchmark}"


def model_index(facts: ExportFacts, name: str) -> list[dict[str, Any]]:
    """``model-index`` (HF schema): one result per split that has a fine-tuned score."""
    results = []
    for s in facts.scores:
        if s.finetuned is None:
            continue
        results.append({
            "task": {"type": "text-generation", "name": "Text Generation"},
            "dataset": {"name": f"{facts.benchmark} ({s.split})", "type": facts.benchmark, "split": s.split},
            "metrics": [{"type": facts.core_metric, "value": s.finetuned, "name": f"{facts.core_metric} ({s.split})"}],
            "source": {"name": "ftagent (OpenCompass)", "url": "https://github.com/open-compass/opencompass"},
        })
    return [{"name": name, "results": results}]


def front_matter(facts: ExportFacts, repro: Reproduction, *, adapter: bool, name: str) -> dict[str, Any]:
    """The card's YAML header as a dict."""
    meta: dict[str, Any] = {}
    if is_hub_id(facts.base_model):  # a local folder or builtin/ model is no Hub id: left out, named in the body
        meta["base_model"] = facts.base_model
    meta["library_name"] = "peft" if adapter else "transformers"
    meta["pipeline_tag"] = "text-generation"
    meta["tags"] = ["ftagent", "llama-factory", facts.finetuning_type, facts.benchmark]
    datasets = [d.repo_id for d in repro.datasets if d.repo_id]
    if datasets:
        meta["datasets"] = datasets
    licences = {d.license.lower() for d in repro.datasets if LICENCE_ID.match(d.license.lower())}
    if len(licences) == 1:  # the data's licence, when it is one Hub licence id (mit, apache-2.0, cc-by-4.0 ...)
        meta["license"] = licences.pop()
    meta["model-index"] = model_index(facts, name)
    return meta


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _delta(s: SplitScores) -> str:
    """``+32.0 [+25.0, +39.0] on 100 items`` (the paired 95 % interval), else the bare change."""
    if s.vs_baseline is not None and s.vs_baseline.has_interval:
        return s.vs_baseline.text()
    if s.baseline is None or s.finetuned is None:
        return "–"
    why = s.vs_baseline.no_interval if s.vs_baseline is not None else "no per-item scores recorded"
    return f"{s.finetuned - s.baseline:+.2f} (no interval: {why})"


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown"
    value = float(value)
    return f"{value / 3600:.1f} h" if value >= 3600 else f"{value / 60:.1f} min" if value >= 120 else f"{value:.0f} s"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(score=_score, seconds=_seconds, oneline=lambda t: " ".join(str(t).split()))
    return env


def render_card(facts: ExportFacts, repro: Reproduction, *, adapter: bool, train_yaml: str,
                loss_png: bool, repo_id: str | None = None) -> str:
    """The model card's text (``README.md`` of the export)."""
    name = model_name(facts, repo_id)
    meta = front_matter(facts, repro, adapter=adapter, name=name)
    return _env().get_template(TEMPLATE).render(
        f=facts, repro=repro, adapter=adapter, name=name, train_yaml=train_yaml, loss_png=loss_png,
        front_matter=yaml.safe_dump(meta, sort_keys=False, allow_unicode=True), delta=_delta,
        base_ref=facts.base_model if is_hub_id(facts.base_model) else "path/to/the/base/model",
        lora_rank=facts.config.get("lora_rank"),
        bundled=[f"`reproduce/datasets/{d.name}`" for d in repro.datasets if d.bundled])
