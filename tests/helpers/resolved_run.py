"""A :class:`~ftagent.finetune.resolve.ResolvedRun` for tests that build a scenario or components without
going through the whole start-up (no base-model check, no dataset check): what ``resolve_run`` would
return for a registered benchmark key and a base-model name."""

from __future__ import annotations

from pathlib import Path

from ftagent.finetune.resolve import ResolvedModel, ResolvedRun


def resolved_run(benchmark: str = "demo_add", base_model: str = "builtin/tiny-qwen2", *,
                 file_path: Path | str = ".", dataset: str | None = None, description: str | None = None,
                 planner: str = "heuristic") -> ResolvedRun:
    """The resolved facts of ``benchmark`` (a registered key or a YAML file) and ``base_model``."""
    from ftagent.benchmarks import open_benchmark
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.models.base_model import base_model_dir
    from ftagent.tools.opencompass.inference import inference_settings

    root = Path(file_path).absolute()
    key, adapter = open_benchmark(benchmark)
    model = ResolvedModel(name=base_model, path=base_model_dir(base_model, root),
                          inference=inference_settings(base_model))
    return ResolvedRun(benchmark=key, adapter=adapter, data_dir=benchmark_data_dir(root, key), model=model,
                       dataset=dataset, description=adapter.spec.description if description is None else description,
                       planner=planner)
