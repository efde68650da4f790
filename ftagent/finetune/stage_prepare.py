"""A loop's stage, prepared by the system before the coder writes anything (issue 40).

:class:`StagePreparer` runs at the start of the code step (once per loop: a second code round, or a
resumed one, reuses what is recorded in the loop state):

1. the hypothesis's stage must be one of ``FT_STAGES`` (else the loop fails with CONFIG feedback);
2. **start weights** (:class:`~ftagent.core.types.StartModel`): the base model, or the trained weights of
   ``weights_from`` (a succeeded loop), once per parent in ``WORKSPACE_PATH/<session>/weights/loop_<n>`` —
   outside every loop workspace, so no data script can change the weights another loop starts from, and no
   run that mounts them sees the parent's evaluation records: a full model's files are hard-linked there
   (model files only), a LoRA adapter is merged into the weights it was trained on;
3. **samples** (stages that need them): the start model answers training prompts ``samples_per_prompt``
   times at the hypothesis's temperature, through the evaluation's inference and the benchmark's scorer
   (:mod:`ftagent.tools.opencompass.sampling`); ``samples.jsonl`` (prompt, gold, sample, score) goes into
   the loop workspace for the data script. Prompts come only from training data (:mod:`.prompts`);
4. **reward** (GRPO): the benchmark's evaluator and answer post-processor as a
   :class:`~ftagent.core.types.RewardSpec`, passed to the GRPO run by the system.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.stage_specs import StageSpec, stage_spec, weights_chain
from ftagent.core.types import Hypothesis, RewardSpec, SamplingPlan, SamplingResult, StartModel
from ftagent.engine.events import Message, Progress

if TYPE_CHECKING:
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.runners.base import Runner
    from ftagent.tools.llamafactory.data_script import DataProcessor

SAMPLES_FILE = "samples.jsonl"
WEIGHTS_DIR = "weights"


class StagePreparer:
    """Start weights, samples and reward of a loop's stage (see the module docstring)."""

    def __init__(self, scenario: ScenarioInfo, settings: Any, runner: Runner, *, run: ResolvedRun,
                 data: DataProcessor) -> None:
        self.scenario = scenario
        self.settings = settings
        self.runner = runner
        self.run = run
        self.data = data  # its contamination scan covers the prompts too

    # -- 1 ----------------------------------------------------------------------------------------------
    def stage_of(self, hypothesis: Hypothesis) -> StageSpec:
        """The hypothesis's stage, refused unless ``FT_STAGES`` enables it."""
        enabled = list(self.settings.ft.stages)
        if hypothesis.stage not in enabled:
            raise StepError(f"stage {hypothesis.stage} is not enabled (FT_STAGES={','.join(enabled)})",
                            error_type=ErrorType.CONFIG,
                            suggestion=f"Propose one of the enabled stages: {', '.join(enabled)}.")
        return stage_spec(hypothesis.stage)

    # -- 2 ----------------------------------------------------------------------------------------------
    def start_model(self, hypothesis: Hypothesis, trace: Trace, session_dir: Path, ctx: StepContext[FinetuneSessionState]) -> StartModel:
        """The weights the loop trains from (a LoRA parent merged once, outside every loop workspace)."""
        loop = hypothesis.weights_from
        if loop is None:
            return StartModel(path=self.scenario.base_model_path)
        parent = trace.get(loop)
        model = parent.artefacts.get("model") if parent is not None else None
        if parent is None or not parent.succeeded or not model or not Path(model).is_dir():
            raise StepError(f"weights_from={loop}: loop {loop} has no trained model to start from",
                            error_type=ErrorType.CONFIG,
                            suggestion="Start from the base model (weights_from null) or from a loop that trained "
                                       "and scored.")
        chain = weights_chain(trace, loop)
        changed = parent.approved.model.changes() if parent.approved is not None and parent.approved.model else []
        if changed:  # the parent's weights as they were trained and evaluated, or none (issue 39)
            raise StepError(f"weights_from={loop}: loop {loop}'s weights changed since it trained: "
                            f"{'; '.join(changed[:6])}", error_type=ErrorType.ENV,
                            suggestion="Start from the base model or another loop; no sandboxed command can write a "
                                       "trained model's folder, so another process changed it.")
        from ftagent.tools.opencompass.merge import is_lora_adapter

        weights = session_dir / WEIGHTS_DIR / f"loop_{loop}"
        if not is_lora_adapter(model):  # its model files only: the output folder also holds its evaluation
            if not (weights / "config.json").is_file():
                link_model_files(Path(model), weights)
            return StartModel(path=str(weights), loop=loop, chain=chain)
        base = parent.artefacts.get("adapter_of") or parent.config.get("model_name_or_path")
        if not (weights / "config.json").is_file():
            ctx.emit(Message(text=f"merging loop {loop}'s LoRA adapter into its base: the start weights of this loop"))
            self._merge(Path(str(base)), Path(model), weights, ctx)
        return StartModel(path=str(weights), loop=loop, chain=chain, merged_adapter=str(model))

    def _merge(self, base: Path, adapter: Path, out: Path, ctx: StepContext[FinetuneSessionState]) -> None:
        from ftagent.runners.base import Mount
        from ftagent.runners.scrubbed import run_scrubbed
        from ftagent.tools.opencompass.merge import merge_command

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)  # a killed merge's leftovers
        tmp.mkdir()
        # its one writable folder is its own output: no other loop's start weights are in its sandbox
        result = run_scrubbed(self.runner, merge_command(base, adapter, tmp), tree=tmp, tool="train",
                              workdir=tmp, mounts=[Mount(source=base), Mount(source=adapter),
                                                   Mount(source=tmp, read_only=False)],
                              timeout=ctx.limit(float(self.settings.ft.micro_batch_timeout)),
                              log_file=out.parent / f"{out.name}.merge.log")
        if not result.ok or not (tmp / "config.json").is_file():
            raise StepError(f"merging the parent's adapter {adapter} failed (exit {result.exit_code})",
                            error_type=ErrorType.ENV, log_tail=(result.log_tail or "")[-2000:])
        tmp.rename(out)  # complete or absent: a killed merge is redone, never half-read

    # -- 3 ----------------------------------------------------------------------------------------------
    def sample(self, hypothesis: Hypothesis, start: StartModel, trace: Trace, workspace: Path,
               ctx: StepContext[FinetuneSessionState]) -> SamplingResult:
        """``samples.jsonl`` of the start model on training prompts (see :mod:`.prompts`)."""
        from ftagent.finetune.prompts import training_prompts
        from ftagent.tools.opencompass.sampling import sample_training_prompts

        plan = hypothesis.sampling or SamplingPlan()
        rows, source = training_prompts(trace, hypothesis, workspace, plan.max_prompts, data=self.data, ctx=ctx)
        ctx.emit(Message(text=f"sampling the start model {start.path}: {plan.samples_per_prompt} answers to each of "
                              f"{len(rows)} training prompts at temperature {plan.temperature:g} ({source})"))
        ctx.emit(Progress(phase="sample", done=0, total=len(rows) * plan.samples_per_prompt))
        started = time.monotonic()
        samples = sample_training_prompts(
            start.path, rows=rows, samples_per_prompt=plan.samples_per_prompt, temperature=plan.temperature,
            benchmark=self.run.adapter, settings=self.settings, runner=self.runner, work_dir=workspace / "sampling",
            items_root=self.scenario.items_root(), model_name=self.scenario.base_model,
            gpu_count=self.scenario.hardware.gpu_count, timeout=ctx.limit(self.settings.ft.benchmark_timeout_s),
            inference=self.run.model.inference)
        path = workspace / SAMPLES_FILE
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps({k: s[k] for k in ("prompt", "gold", "sample", "score")},
                                          ensure_ascii=False) + "\n" for s in samples), encoding="utf-8")
        tmp.replace(path)
        return summarise(samples, path=path, model=start.path, source=source, plan=plan,
                         duration_s=time.monotonic() - started)

    # -- 4 ----------------------------------------------------------------------------------------------
    def reward(self) -> RewardSpec | None:
        """The benchmark's scorer as a GRPO reward (None: its rules read the benchmark's own files)."""
        from ftagent.benchmarks.components import component_path
        from ftagent.core.paths import benchmarks_dir
        from ftagent.tools.opencompass import provides  # noqa: F401 - registers the "@Name" evaluators resolved here

        adapter = self.run.adapter
        root = self.scenario.items_root()
        blocks = adapter.dataset_blocks(root, "validation")
        if not blocks:
            return None
        first = blocks[0]
        spec = RewardSpec(benchmark=adapter.spec.key, evaluator=component_path(first.evaluator) or first.evaluator,
                          evaluator_kwargs=dict(first.evaluator_kwargs),
                          postprocessor=component_path(first.postprocessor) if first.postprocessor else None,
                          postprocessor_kwargs=dict(first.postprocessor_kwargs), rule=adapter.spec.answer_rule)
        text = spec.model_dump_json()
        if any(str(r) in text for r in (root, benchmarks_dir(self.settings.ft.file_path))):
            return None  # a rule that reads the benchmark's files: never in training
        return spec


def link_model_files(model: Path, out: Path) -> None:
    """``out`` holding the top-level regular files of a trained full model (weights, config, tokenizer), hard
    links where the filesystem allows, else copies; never a link it found, never a subfolder (the model's
    ``oc/`` evaluation records, checkpoints). Written as ``<out>.partial`` and renamed when complete."""
    import os
    import shutil
    import stat

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for entry in os.scandir(model):
        if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode) or entry.name in MODEL_BOOKKEEPING:
            continue
        try:
            os.link(entry.path, tmp / entry.name, follow_symlinks=False)
        except OSError:
            shutil.copyfile(entry.path, tmp / entry.name, follow_symlinks=False)
    tmp.rename(out)


MODEL_BOOKKEEPING = frozenset({"trainer_log.jsonl", "trainer_state.json", "training_args.bin", "all_results.json",
                               "train_results.json", "eval_results.json", "README.md"})


def summarise(samples: list[dict[str, Any]], *, path: Path, model: str, source: str, plan: SamplingPlan,
              duration_s: float) -> SamplingResult:
    """The counts of a sampling run: right answers, prompts with both right and wrong answers, all right."""
    by_prompt: dict[str, list[float]] = {}
    for s in samples:
        by_prompt.setdefault(s["prompt"], []).append(float(s["score"]))
    mixed = sum(1 for v in by_prompt.values() if max(v) > 0 and min(v) < 1)
    right = sum(1 for v in by_prompt.values() if min(v) >= 1)
    return SamplingResult(path=str(path), model=model, source=source, prompts=len(by_prompt), samples=len(samples),
                          correct=sum(1 for s in samples if float(s["score"]) >= 1), prompts_mixed=mixed,
                          prompts_all_right=right, temperature=plan.temperature,
                          samples_per_prompt=plan.samples_per_prompt, duration_s=round(duration_s, 2))


def prepare_stage(preparer: StagePreparer | None, loop: Any, trace: Trace, session_dir: Path, workspace: Path,
                  ctx: StepContext[FinetuneSessionState]) -> None:
    """The code step's system part (issue 40): the stage checked, the start weights resolved, the samples
    drawn and the reward resolved, each once per loop (kept in ``loop``: a second code round reuses them).

    Without a preparer (a workflow assembled without one, as unit tests do) only SFT from the base model runs.
    """
    from ftagent.engine.events import SamplingEvent

    hypothesis = loop.hypothesis
    if preparer is None:
        if hypothesis.stage != "sft" or hypothesis.weights_from is not None:
            raise StepError(f"stage {hypothesis.stage} from loop {hypothesis.weights_from} needs the stage preparer "
                            "(Components.stages)", error_type=ErrorType.CONFIG)
        return
    stage = preparer.stage_of(hypothesis)
    if loop.start is None:
        loop.start = preparer.start_model(hypothesis, trace, session_dir, ctx)
    if stage.needs_samples and loop.samples is None:
        loop.samples = preparer.sample(hypothesis, loop.start, trace, workspace, ctx)
        s = loop.samples
        ctx.emit(SamplingEvent(stage=stage.name, model=s.model, source=s.source, prompts=s.prompts, samples=s.samples,
                               correct=s.correct, prompts_mixed=s.prompts_mixed, prompts_all_right=s.prompts_all_right,
                               temperature=s.temperature, samples_per_prompt=s.samples_per_prompt,
                               start_loop=loop.start.loop, duration_s=s.duration_s))
        if stage.trainer == "trl" and s.prompts_mixed == 0:
            ctx.emit(Message(level="warning", text=f"GRPO from these weights: {s.line()} — no group mixes right and "
                                                   "wrong answers, so the reward gives no signal (every advantage 0)"))
    if stage.trainer == "trl" and loop.reward is None:
        loop.reward = preparer.reward()


def stage_memory_markdown(model_path: Path, memory: Any, stages: list[str]) -> str:
    """The per-stage memory table appended to the SFT one ("" with SFT alone, or a model of unknown shape)."""
    from ftagent.tools.llamafactory.memory import model_spec
    from ftagent.tools.llamafactory.stage_memory import stage_table

    if stages == ["sft"]:
        return ""
    try:
        spec = model_spec(model_path)
    except ValueError:
        return ""
    return "\n\n" + stage_table(spec, stages, float(memory.per_gpu_gb), int(memory.num_gpus), device=memory.device)


def stage_plan_notes(model_config: dict[str, Any], method: str, per_gpu_gb: float, gpu_count: int,
                     stages: list[str]) -> list[str]:
    """``plan --hardware``'s lines for each enabled non-SFT stage: its memory with the plan's method (reference
    model, sequences per step, longest sequence) and, for GRPO, how it generates (TRL's vLLM colocate mode)."""
    from ftagent.tools.llamafactory.memory import spec_from_config
    from ftagent.tools.llamafactory.stage_memory import stage_estimate
    from ftagent.tools.trl.config import TRL_VLLM_VERSION

    spec = spec_from_config(model_config, "model")
    notes = []
    for stage in stages:
        if stage == "sft":
            continue
        e = stage_estimate(spec, stage, method, per_gpu_gb, max(1, gpu_count))  # type: ignore[arg-type]
        ref = f"reference {e.reference_gb_per_gpu:.1f} GB per GPU" if e.reference_gb_per_gpu else "no reference copy"
        note = (f"stage {stage} ({method}): {'fits' if e.fits else 'does not fit'}, {e.static_gb_per_gpu:.1f} GB per GPU "
                f"({ref}), {e.sequences} sequence(s) a step, at most {e.max_seq_len:,} tokens each")
        if stage == "grpo":
            note += (f"; generation through vLLM in TRL's colocate mode (use_vllm) when the tool env has vLLM "
                     f"{TRL_VLLM_VERSION}, else transformers" if gpu_count else "; generation through transformers")
        notes.append(note)
    return notes
