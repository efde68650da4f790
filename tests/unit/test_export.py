"""`ftagent export` without tools: the card (HF front matter + body), reproduce/ and the folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import UserInputError
from ftagent.finetune.export import ExportRequest, export_model
from ftagent.finetune.export.facts import collect_facts
from ftagent.runners.base import RunResult
from ftagent.views.report import build_report, export_command, render_markdown
from tests.unit.test_export_sessions import HUB_TOKEN, exportable_session, no_sota_plan


class NoToolRunner:
    """A runner without a tool env: every command fails (no loss curve, no merge)."""

    name = "none"

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, cmd, **kwargs) -> RunResult:
        self.commands.append(cmd)
        return RunResult(exit_code=1, duration_s=0.0, log_tail="no tool env here")


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text(encoding="utf-8")
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def _export(session: Path, **kw) -> tuple[Path, NoToolRunner]:
    runner = NoToolRunner()
    result = export_model(ExportRequest(session_dir=session, **kw), lambda: runner)
    return Path(result.folder), runner


def test_default_export_is_the_best_loop_with_a_hub_card(tmp_path):
    session = exportable_session(tmp_path)
    folder, runner = _export(session)
    assert folder == session / "export" / "loop_0"
    meta, body = _card(folder)
    assert meta["library_name"] == "transformers" and "base_model" not in meta  # builtin/ is no Hub id
    assert {"ftagent", "llama-factory", "full", "demo_add"} <= set(meta["tags"])
    (index,) = meta["model-index"]
    scores = {r["dataset"]["split"]: r["metrics"][0] for r in index["results"]}
    assert scores["validation"] == {"type": "accuracy", "value": 0.4, "name": "accuracy (validation)"}
    assert scores["test"]["value"] == 0.35
    assert "| validation | 0.10 | 0.40 | +0.30 (no interval: no per-item scores recorded) |" in body
    assert "| test | 0.05 | 0.35 | +0.30 (no interval: no per-item scores recorded) |" in body
    assert "the session's best loop" in body and "training rows: 200" in body
    assert "LLM: 3 calls, $0.0375" in body  # the scripted session's three priced calls
    assert "vllm serve path/to/this/folder" in body and "AutoModelForCausalLM.from_pretrained" in body
    # model files only: no trainer bookkeeping, no checkpoints
    assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors", "tokenizer_config.json",
                                                  "README.md", "reproduce"}
    assert "first and last logged losses: 2.0 (step 1)" in body  # no matplotlib here: said, not drawn
    assert runner.commands and runner.commands[0][0] == "python"


def test_chain_lists_the_ancestors_oldest_first(tmp_path):
    session = exportable_session(tmp_path)
    facts = collect_facts(session, 2)
    assert [s.loop for s in facts.chain] == [0, 2]  # loop 1 (failed) is a sibling, not an ancestor
    folder, _ = _export(session, loop=2)
    _, body = _card(folder)
    assert body.index("**loop 0** — LoRA rank 8") < body.index("**loop 2** — LoRA rank 24")
    assert "not the session's best loop" in body


def test_reproduce_has_no_host_paths_and_no_credentials(tmp_path):
    session = exportable_session(tmp_path)
    folder, _ = _export(session, to=tmp_path / "out")
    repro = folder / "reproduce"
    assert {p.name for p in repro.iterdir()} >= {"process_data.py", "train.yaml", "dataset_info.json",
                                                 "run.sh", "requirements.txt", "datasets"}
    config = yaml.safe_load((repro / "train.yaml").read_text())
    assert config["model_name_or_path"] == "base_model" and config["output_dir"] == "output"
    assert config["dataset_dir"] == "." and config["learning_rate"] == 2e-4
    assert "hub_token" not in config and "deepspeed" not in config
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in {".md", ".yaml", ".sh", ".txt", ".json", ".py"}:
            text = path.read_text(encoding="utf-8")
            assert str(tmp_path) not in text, path
            assert HUB_TOKEN not in text, path
    assert (repro / "datasets" / "demo_add" / "demo_add_train.json").is_file()  # generated data: bundled
    run = (repro / "run.sh").read_text()
    assert "python process_data.py" in run and "llamafactory-cli train train.yaml" in run
    assert "torch==2.13.0" in (repro / "requirements.txt").read_text()
    _, body = _card(folder)
    assert "Left out of `train.yaml` (credentials or files of the original machine): deepspeed, hub_token." in body


def test_hub_base_model_is_named_and_kept_in_train_yaml(tmp_path):
    session = exportable_session(tmp_path, base_model="Qwen/Qwen2.5-0.5B-Instruct")
    folder, _ = _export(session)
    meta, body = _card(folder)
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert yaml.safe_load((folder / "reproduce" / "train.yaml").read_text())["model_name_or_path"] == \
        "Qwen/Qwen2.5-0.5B-Instruct"


def test_no_merge_keeps_the_adapter_with_its_config(tmp_path):
    session = exportable_session(tmp_path, lora=True)
    folder, runner = _export(session, merge=False)
    assert folder.name == "loop_0-adapter"
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    meta, body = _card(folder)
    assert meta["library_name"] == "peft" and "PeftModel.from_pretrained" in body
    assert "--enable-lora --lora-modules ft=path/to/this/folder --max-lora-rank 8" in body
    assert "llamafactory-cli export merge.yaml" in body
    merge = yaml.safe_load((folder / "reproduce" / "merge.yaml").read_text())
    assert merge == {"model_name_or_path": "base_model", "adapter_name_or_path": "output", "template": "chatml",
                     "finetuning_type": "lora", "export_dir": "merged"}
    assert all("-c" not in c or "PeftModel" not in c[2] for c in runner.commands)  # nothing merged


def test_a_failed_merge_leaves_nothing(tmp_path):
    session = exportable_session(tmp_path, lora=True)
    (tmp_path / "base").mkdir()
    from ftagent.core.errors import EnvironmentFailure

    with pytest.raises(EnvironmentFailure, match="merging the LoRA adapter failed"):
        _export(session)
    assert list((session / "export").iterdir()) == []  # no half-written folder, no temp folder


def test_no_sota_needs_an_explicit_loop(tmp_path):
    session = exportable_session(tmp_path, plan=no_sota_plan())
    with pytest.raises(UserInputError, match="no loop .* beat the baseline.*--loop"):
        _export(session)
    folder, _ = _export(session, loop=0)
    assert "not the session's best loop" in _card(folder)[1]


def test_report_prints_the_export_command(tmp_path):
    session = exportable_session(tmp_path)
    text = render_markdown(build_report(session))
    assert f"`{export_command(session)}`" in text and f"ftagent export {session.absolute()}`" in text


def _staged(tmp_path: Path, *, lora: bool = False) -> Path:
    """The scripted session with loop 2 turned into DPO from loop 0's weights (issue 40), its samples kept."""
    from ftagent.engine.session import list_snapshots
    from ftagent.finetune.state import FinetuneSessionState

    session = exportable_session(tmp_path, lora=lora)
    snap = list_snapshots(session)[-1]
    state = FinetuneSessionState.model_validate_json(snap.read_text(encoding="utf-8"))
    exp = state.trace.get(2)
    exp.hypothesis = exp.hypothesis.model_copy(update={"stage": "dpo", "weights_from": 0})
    exp.config = {**exp.config, "stage": "dpo", "pref_beta": 0.1, "model_name_or_path": str(tmp_path / "ws" / "weights")}
    exp.plan["sampling"] = {"samples": 8, "prompts": 4, "correct": 3, "prompts_mixed": 2}
    (Path(exp.artefacts["workspace"]) / "samples.jsonl").write_text('{"prompt": "p", "gold": "g", "sample": "s", "score": 0}\n')
    snap.write_text(state.model_dump_json(), encoding="utf-8")
    return session


def test_a_stage_chain_is_named_on_the_card_and_rebuilt_step_by_step(tmp_path):
    folder, _ = _export(_staged(tmp_path), loop=2, to=tmp_path / "out")
    _, body = _card(folder)
    assert "Training stages, each run starting from the weights of the one before: **sft (loop 0) → dpo (loop 2)**" in body
    assert "- dpo (loop 2, full): 8 samples of its start weights on 4 training prompts, 3 right" in body
    repro = folder / "reproduce"
    first, second = yaml.safe_load((repro / "1_0_sft" / "train.yaml").read_text()), \
        yaml.safe_load((repro / "2_2_dpo" / "train.yaml").read_text())
    assert first["model_name_or_path"] == "../base_model" and first["stage"] == "sft"
    assert second["model_name_or_path"] == "../1_0_sft/output" and second["stage"] == "dpo"
    assert (repro / "2_2_dpo" / "samples.jsonl").is_file() and not (repro / "1_0_sft" / "samples.jsonl").exists()
    run = (repro / "run.sh").read_text()
    assert run.index("(cd 1_0_sft && llamafactory-cli train train.yaml)") < run.index("(cd 2_2_dpo && python process_data.py)")
    assert "sft (loop 0) → dpo (loop 2)" in run
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in {".md", ".yaml", ".sh", ".json"}:
            assert str(tmp_path) not in path.read_text(encoding="utf-8"), path


def test_a_chained_lora_adapter_is_exported_merged_only(tmp_path):
    with pytest.raises(UserInputError, match="trained on loop 0's merged weights .* export it merged"):
        _export(_staged(tmp_path, lora=True), loop=2, merge=False)
    assert not (tmp_path / "log").joinpath("exports").exists()
