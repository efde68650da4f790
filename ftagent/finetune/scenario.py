"""The scenario builder: everything known before loop 0 (DESIGN §4).

It produces a :class:`ftagent.core.types.ScenarioInfo`, which every component receives. It runs once
per session (``FT_SCEN``) and is stored in the session snapshot, so a resume never re-runs it.
"""

from __future__ import annotations

from ftagent.core.types import ScenarioInfo


class FinetuneScenario:
    """Builds :class:`ScenarioInfo` in the order of DESIGN §4; each stage is an event and cached.

    Stages: file path → datasets → base model → LLaMA-Factory catalogue → dataset catalogue →
    dataset selection → GPU facts → memory estimate → baseline evaluation.
    """

    def __init__(self, settings, runner, emit) -> None:
        self.settings = settings
        self.runner = runner
        self.emit = emit

    def _stage(self, name: str, fn, **detail):
        from ftagent.engine.events import ScenarioStage

        self.emit(ScenarioStage(stage=name, status="start", detail=detail))
        result = fn()
        self.emit(ScenarioStage(stage=name, status="done", detail=detail))
        return result

    def build(self) -> ScenarioInfo:
        """Run every stage and return the scenario (raises EnvironmentFailure when one cannot run)."""
        from pathlib import Path

        from ftagent.benchmarks import get_benchmark
        from ftagent.core.hardware import detect_gpus
        from ftagent.datasets.catalogue import build_catalogue
        from ftagent.datasets.prepare import datasets_root, prepare_for
        from ftagent.models.builtin import resolve_base_model
        from ftagent.models.describe import describe_model
        from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue

        ft, paths = self.settings.ft, self.settings.paths
        file_path = Path(ft.file_path).absolute()
        file_path.mkdir(parents=True, exist_ok=True)
        adapter = get_benchmark(ft.target_benchmark)
        spec = adapter.spec
        token = _hf_token()
        prepared = self._stage("datasets", lambda: prepare_for(ft.dataset, ft.target_benchmark, file_path,
                                                               token=token), dataset=ft.dataset)
        model_path = self._stage("model", lambda: resolve_base_model(ft.base_model, file_path, self.runner),
                                 base_model=ft.base_model)
        info_dir = file_path / ".llama_factory_info"
        catalogue = self._stage("llama_factory_catalogue", lambda: load_or_build_catalogue(info_dir, self.runner))
        self._stage("dataset_catalogue", lambda: build_catalogue(datasets_root(file_path), list(prepared),
                                                                 model_dir=model_path))
        model = describe_model(model_path, ft.base_model).model_dump()
        model.setdefault("template", "chatml" if _is_chatml(model_path) else None)
        hw = self._stage("hardware", detect_gpus)
        hardware = hw.model_dump()
        memory, memory_report = self._stage("memory", lambda: _memory(model_path, hw))
        info = ScenarioInfo(
            benchmark=ft.target_benchmark, benchmark_description=ft.benchmark_description or "",
            user_target_scenario=ft.user_target_scenario, core_metric=spec.core_metric,
            direction=spec.direction, base_model=ft.base_model, base_model_path=str(model_path),
            model_info=model, datasets=sorted(prepared), dataset_root=str(datasets_root(file_path)),
            hardware=hardware, memory=memory, memory_report=memory_report,
            llama_factory_info_dir=str(info_dir), file_path=str(file_path),
            workspace_root=str(Path(paths.workspace_path).absolute()),
            upper_data_size_limit=ft.upper_data_size_limit,
            time_limits={"full_timeout": ft.full_timeout, "data_processing_timeout": ft.data_processing_timeout,
                         "benchmark_timeout": ft.benchmark_timeout_s},
        )
        info.model_info["llama_factory_version"] = catalogue.version
        return info


def _hf_token() -> str | None:
    import os

    for key in ("HF_TOKEN", "HUGGINGFACE_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(key):
            return os.environ[key]
    return None


def _is_chatml(model_path) -> bool:
    from pathlib import Path

    cfg = Path(model_path) / "tokenizer_config.json"
    tpl = Path(model_path) / "chat_template.jinja"
    text = (cfg.read_text(encoding="utf-8") if cfg.is_file() else "") + (
        tpl.read_text(encoding="utf-8") if tpl.is_file() else "")
    return "<|im_start|>" in text


def _memory(model_path, hardware) -> tuple[dict, str]:
    from ftagent.tools.llamafactory.memory import estimate_for_hardware

    result = estimate_for_hardware(model_path, hardware)
    return result.model_dump(), result.to_markdown()
