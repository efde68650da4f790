"""The small registries a benchmark YAML file refers to by name.

* :data:`LOADERS` — ``data.loader``: ``fn(bench, root) -> {subset: rows}`` (or ``{subset: {"validation":
  rows, "test": rows}}`` when the source is split already).
* :data:`ITEMS` — ``data.item``: ``fn(row, subset, bench) -> item`` (the prompt's columns + ``answer``).
* :data:`ROUNDS` — ``rounds``: ``fn(bench, root, subset) -> [{"role", "prompt"}, ...]`` (few-shot turns).
* :data:`METRICS` — ``metric``: a :class:`MetricDef` (OpenCompass evaluator, default extractor).
* :data:`EXTRACTORS` — ``extractor``: an :class:`ExtractorDef` (OpenCompass post-processor).

* :data:`PROVIDED` — the evaluation components a tool layer implements, by name: a metric or
  extractor names one as ``"@Name"`` (e.g. ``"@ExactMatchEvaluator"``), and the tool layer registers
  where it lives (``ftagent.tools.opencompass`` does so when its renderer is imported), so this layer
  never names a module of the layer above it.

Unknown names get a did-you-mean hint (:class:`ftagent.core.registry.Registry`). Third parties add
entries through the entry-point groups ``ftagent.benchmark_loaders``, ``ftagent.benchmark_items``,
``ftagent.benchmark_rounds``, ``ftagent.benchmark_metrics``, ``ftagent.benchmark_extractors`` and
``ftagent.evaluation_components``. Evaluators and post-processors are ``"@Name"`` (a provided
component) or ``"module:Name"`` (OpenCompass's own, or a plug-in's), imported by the rendered
OpenCompass config inside the tool env.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ftagent.core.registry import Registry

#: The version of the scoring rules (evaluators, their kwargs, the golds' preparation): the evaluation
#: cache key carries it (``ftagent.tools.opencompass.cache``), so a score made under older rules is
#: never served. 2: issue 31 item 7 (MBPP's type-aware asserts, math-verify timeouts re-verified,
#: ChemCoTBench retro golds, TableBench chart values). 3: a boxed gold (``\\boxed{43}``) is read by its
#: content in the boxed-integer and numeric evaluators. 4: issue 43 (TableBench's ``np.nan`` references and
#: chart timeouts run again, a one-molecule retro gold is never cut, math-verify's limits count CPU time).
SCORING_VERSION = "4"

OC_ACC = "opencompass.openicl.icl_evaluator:AccwithDetailsEvaluator"
PROVIDED_MARK = "@"


def provided(name: str) -> str:
    """The reference to a component a tool layer provides: ``"@<name>"`` (see :data:`PROVIDED`)."""
    return PROVIDED_MARK + name


class MetricDef(BaseModel):
    """An OpenCompass evaluator and what it reports."""

    evaluator: str = Field(description="'module:Class' of the OpenCompass evaluator")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    extractor: str | None = Field(None, description="default extractor name (None = raw output)")
    core_metric: str = "accuracy"
    rule: str = Field(description="one line: how an extracted answer is compared with the gold one")
    kwargs_for: str | None = Field(None, description="'module:fn(bench, subset, path) -> kwargs' per sub-dataset")
    accepts: tuple[str, ...] | None = Field(
        None, description="the keyword arguments its evaluator takes beyond OpenCompass's own "
                          "(BASE_EVALUATOR_KWARGS): a YAML's metric_kwargs are checked against them when the "
                          "benchmark is opened; None = not declared (a plug-in's): not checked")



class ExtractorDef(BaseModel):
    """An OpenCompass prediction post-processor."""

    postprocessor: str | None = Field(None, description="'module:function'; None = the raw output")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    rule: str


class ProvidedComponent(BaseModel):
    """Where a tool layer implements a named evaluation component (registered in :data:`PROVIDED`)."""

    path: str = Field(description="'module:Name' the rendered OpenCompass config imports")


# OpenCompass 0.5.4 opencompass/openicl/icl_evaluator/icl_base_evaluator.py: BaseEvaluator.__init__(self,
# pred_postprocessor=None), which every evaluator below passes its other keyword arguments to
BASE_EVALUATOR_KWARGS = ("pred_postprocessor",)

LOADERS: Registry = Registry("benchmark loader", entry_point_group="ftagent.benchmark_loaders")
ITEMS: Registry = Registry("benchmark item transform", entry_point_group="ftagent.benchmark_items")
ROUNDS: Registry = Registry("benchmark prompt builder", entry_point_group="ftagent.benchmark_rounds")
METRICS: Registry[MetricDef] = Registry("benchmark metric", entry_point_group="ftagent.benchmark_metrics")
EXTRACTORS: Registry[ExtractorDef] = Registry("answer extractor", entry_point_group="ftagent.benchmark_extractors")
PROVIDED: Registry[ProvidedComponent] = Registry("evaluation component",
                                                 entry_point_group="ftagent.evaluation_components")


def component_path(ref: str | None) -> str | None:
    """A metric's evaluator or an extractor's post-processor as the ``"module:Name"`` to import:
    ``"@Name"`` → where the tool layer registered it; a ``"module:Name"`` (OpenCompass's own) → itself.

    Raises:
        UserInputError: ``"@Name"`` that no tool layer registered (did-you-mean; none at all: the
            caller did not import the tool layer that renders the config).
    """
    if ref is None or not ref.startswith(PROVIDED_MARK):
        return ref
    return PROVIDED.get(ref[len(PROVIDED_MARK):]).path

for _name, _path in {
    "local_files": "ftagent.benchmarks.loaders:local_files",
    "hub_files": "ftagent.benchmarks.loaders:hub_files",
    "demo_add": "ftagent.benchmarks.demo:load_rows",
    "financeiq": "ftagent.benchmarks.knowledge:load_financeiq",
    "domain": "ftagent.benchmarks.domain_adapters:load_rows",
}.items():
    LOADERS.register(_name, _path)

for _name, _path in {
    "math_solution": "ftagent.benchmarks.math:math_item",
    "gsm8k": "ftagent.benchmarks.math:gsm8k_item",
    "mmlu": "ftagent.benchmarks.knowledge:mmlu_row",
    "humaneval": "ftagent.benchmarks.code:humaneval_row",
    "mbpp": "ftagent.benchmarks.code:mbpp_row",
    "domain": "ftagent.benchmarks.domain_adapters:to_item",
}.items():
    ITEMS.register(_name, _path)

for _name, _path in {
    "zero_shot": "ftagent.benchmarks.loaders:zero_shot",
    "fixed_shots": "ftagent.benchmarks.loaders:fixed_shots",
    "financeiq_dev": "ftagent.benchmarks.knowledge:financeiq_rounds",
}.items():
    ROUNDS.register(_name, _path)

_EXTRACTORS = {
    "none": ExtractorDef(rule="the raw output"),
    "strip": ExtractorDef(postprocessor=provided("strip_answer"),
                          rule="output stripped of whitespace, quotes and a trailing full stop"),
    "boxed": ExtractorDef(postprocessor=provided("last_boxed"), rule="last \\boxed{...} content"),
    "option_letter": ExtractorDef(postprocessor=provided("option_letter"),
                                  rule="first stand-alone option letter A-D"),
    "last_number": ExtractorDef(postprocessor=provided("last_number"),
                                rule="last number of the output (of its last \\boxed{} when present)"),
    "code_block": ExtractorDef(postprocessor=provided("extract_code"),
                               rule="first fenced block, any tag (stock humaneval_postprocess_v2); an unclosed "
                                    "fence's code; else the raw text"),
    "math_v2": ExtractorDef(postprocessor="opencompass.datasets:math_postprocess_v2",
                            rule="last \\boxed{} → MATH v2 normalisation"),
    "gsm8k": ExtractorDef(postprocessor="opencompass.datasets:gsm8k_postprocess",
                          rule="text before 'Question:', last number"),
    "first_option": ExtractorDef(postprocessor="opencompass.utils.text_postprocessors:first_option_postprocess",
                                 kwargs={"options": "ABCD"}, rule="first option letter A-D in the output"),
    "first_capital": ExtractorDef(postprocessor="opencompass.utils.text_postprocessors:first_capital_postprocess",
                                  rule="first upper-case letter of the output (stock FinanceIQ_gen_e0e6b5)"),
    "last_capital": ExtractorDef(postprocessor="opencompass.utils.text_postprocessors:last_capital_postprocess",
                                 rule="last upper-case letter of the output"),
}
_METRICS = {
    # the five for user benchmarks
    "exact_match": MetricDef(evaluator=provided("ExactMatchEvaluator"), extractor="strip",
                             rule="exact match with the gold answer", accepts=("ignore_case",)),
    "boxed_integer": MetricDef(evaluator=provided("BoxedIntAccEvaluator"), extractor="boxed",
                               rule="integer exact match (else exact string)", accepts=()),
    "multiple_choice": MetricDef(evaluator=provided("OptionLetterEvaluator"), extractor="option_letter",
                                 rule="letter equals the gold letter", accepts=("options",)),
    "numeric_tolerance": MetricDef(evaluator=provided("NumericToleranceEvaluator"), extractor="last_number",
                                   kwargs={"rel_tol": 1e-4, "abs_tol": 1e-6},
                                   rule="|pred - gold| <= max(abs_tol, rel_tol * |gold|)",
                                   accepts=("rel_tol", "abs_tol")),
    "contains": MetricDef(evaluator=provided("ContainsEvaluator"), extractor="none",
                          rule="gold text occurs in the output (case-insensitive)", accepts=()),
    # the published benchmarks' own
    # stock aime2024_gen_17d799 / aime2025_cascade_eval_gen_5e9f4f / math_500_gen: no dataset post-processor,
    # math-verify parses the raw output (boxed answer first), so an LLM judge behind it sees the raw text too
    # ... scored by stock MATHVerifyEvaluator's rule, with its timeouts retried wider and one details entry
    # per item (oc_math.MathVerifyEvaluator: stock drops the entry of a gold it cannot parse)
    "math_verify": MetricDef(evaluator=provided("MathVerifyEvaluator"), extractor="none",
                             rule="math-verify: the boxed answer (else a $...$ one) equivalent to the gold",
                             accepts=("attempts",)),
    # OpenCompass 0.5.4: MATHEvaluator.__init__(self, version='v1', pred_postprocessor=None) (opencompass/
    # datasets/math.py); Gsm8kEvaluator and AccEvaluator take BaseEvaluator's only
    "math_equivalence": MetricDef(evaluator="opencompass.datasets:MATHEvaluator", kwargs={"version": "v2"},
                                  extractor="math_v2", rule="equivalence", accepts=("version",)),
    "gsm8k": MetricDef(evaluator="opencompass.datasets:Gsm8kEvaluator", extractor="gsm8k",
                       rule="numeric exact match", accepts=()),
    "accuracy": MetricDef(evaluator=OC_ACC, extractor="none", rule="exact match with the gold letter", accepts=()),
    "python_tests": MetricDef(evaluator=provided("PythonTestsEvaluator"), kwargs={"timeout": 10.0},
                              extractor="code_block", core_metric="pass@1", rule="run with the tests",
                              accepts=("timeout", "type_aware")),
    "domain": MetricDef(evaluator=provided("DomainEvaluator"), extractor="none",
                        core_metric="mean_core", rule="the family's official metrics",
                        kwargs_for="ftagent.benchmarks.domain_adapters:evaluator_kwargs",
                        accepts=("metric_kwargs",)),  # the rest come from kwargs_for
}
for _name, _extractor in _EXTRACTORS.items():
    EXTRACTORS.register(_name, _extractor)
for _name, _metric in _METRICS.items():
    METRICS.register(_name, _metric)

#: The metrics a user benchmark file can name without code (docs/benchmarks.md).
USER_METRICS = ("exact_match", "boxed_integer", "multiple_choice", "numeric_tolerance", "contains")
