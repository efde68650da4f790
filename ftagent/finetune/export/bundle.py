"""``ftagent export``: one loop's model as a self-contained folder (model, card, ``reproduce/``).

Every check runs before anything is written (the session, the loop, its model, the target folder,
the Hub when pushing); the folder is then built in a hidden sibling and renamed into place at the
end, so a failure leaves neither a half-written export nor a changed target.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ftagent.core.errors import UserInputError
from ftagent.finetune.export.card import render_card
from ftagent.finetune.export.facts import ExportFacts, collect_facts
from ftagent.finetune.export.model import LOSS_PNG, copy_model, merge_lora, plot_loss
from ftagent.finetune.export.reproduce import REPRODUCE_DIR, write_reproduce
from ftagent.runners.base import Runner

EXPORT_DIR = "export"  # default: SESSION_DIR/export/loop_<n>[-adapter]


class ExportRequest(BaseModel):
    """The user's choices (``ftagent export`` flags)."""

    session_dir: Path
    loop: int | None = None  # None: the best loop
    to: Path | None = None
    merge: bool = True
    push_to_hub: str | None = None
    private: bool = True


class ExportResult(BaseModel):
    """What was written (and pushed)."""

    folder: str
    loop: int
    kind: str  # merged | adapter | full
    loss_png: bool
    hub_url: str | None = None


def default_target(session_dir: Path, loop: int, adapter: bool) -> Path:
    """``SESSION_DIR/export/loop_<n>`` (``-adapter`` when the LoRA adapter is kept as is)."""
    return Path(session_dir) / EXPORT_DIR / (f"loop_{loop}" + ("-adapter" if adapter else ""))


def check_target(target: Path) -> None:
    """The target may be missing or an empty folder; anything else would be overwritten.

    Raises:
        UserInputError: it is a file, or a folder that is not empty.
    """
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserInputError(f"{target} exists and is not an empty folder: nothing written "
                             "(choose another --to, or remove it)")


def plan_export(request: ExportRequest) -> tuple[ExportFacts, Path]:
    """Every check that needs no tool: the facts of the loop and the target folder.

    Raises:
        UserInputError: bad session, loop, model, target, or (with ``push_to_hub``) Hub/token.
    """
    facts = collect_facts(request.session_dir, request.loop)
    adapter = facts.is_lora and not request.merge
    if adapter and len(facts.stages) > 1:  # issue 40: the adapter belongs on its parent's merged weights
        raise UserInputError(f"loop {facts.loop}'s LoRA adapter was trained on loop {facts.stages[-2].loop}'s "
                             f"merged weights ({facts.stage_chain}), not on the base model: export it merged "
                             "(leave out --no-merge)")
    target = Path(request.to) if request.to else default_target(request.session_dir, facts.loop, adapter)
    check_target(target.absolute())
    if request.push_to_hub:
        from ftagent.finetune.export.hub import check_hub

        check_hub(request.push_to_hub)
    return facts, target.absolute()


def _write_model(facts: ExportFacts, out: Path, work: Path, runner: Runner, merge: bool) -> str:
    if facts.is_lora and merge:
        base = Path(str(facts.config.get("model_name_or_path") or facts.base_model_path))
        merge_lora(Path(facts.model_path), base, out, runner, log_dir=work)
        return "merged"
    copy_model(Path(facts.model_path), out)
    return "adapter" if facts.is_lora else "full"


def export_model(request: ExportRequest, make_runner: Callable[[], Runner]) -> ExportResult:
    """Write the export folder (and push it when asked).

    Args:
        request: what to export where.
        make_runner: builds the runner (merge, loss curve) once every check has passed, so that bad
            input is reported before a missing tool env.

    Raises:
        UserInputError: see :func:`plan_export`.
        EnvironmentFailure: the merge failed or the base model is gone.
    """
    facts, target = plan_export(request)
    runner = make_runner()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        work, out = Path(tmp), Path(tmp) / "export"
        kind = _write_model(facts, out, work, runner, request.merge)
        loss_png = plot_loss(facts.loss_history, out / LOSS_PNG, runner, log_dir=work)
        repro = write_reproduce(facts, out, Path(facts.dataset_root) if facts.dataset_root else None)
        train_yaml = (out / REPRODUCE_DIR / "train.yaml").read_text(encoding="utf-8")
        card = render_card(facts, repro, adapter=kind == "adapter", train_yaml=train_yaml, loss_png=loss_png,
                           repo_id=request.push_to_hub)
        (out / "README.md").write_text(card, encoding="utf-8")
        if target.is_dir():
            target.rmdir()  # empty (checked): replaced by the finished folder
        os.replace(out, target)
    result = ExportResult(folder=str(target), loop=facts.loop, kind=kind, loss_png=loss_png)
    if request.push_to_hub:
        from ftagent.finetune.export.hub import push_folder

        result.hub_url = push_folder(target, request.push_to_hub, private=request.private)
    return result
