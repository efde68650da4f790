"""What the OpenCompass tool layer provides to benchmark definitions, registered at import.

Benchmarks name evaluators and post-processors of ftagent's OpenCompass extension as ``"@Name"``
(:mod:`ftagent.benchmarks.components`); this module tells the benchmarks layer where each one lives,
so the reference goes down (tools → benchmarks) and import-linter sees it. :mod:`.render`, the one
place that turns a reference into an import of the rendered config, imports this module.
"""

from __future__ import annotations

from ftagent.benchmarks.components import PROVIDED, ProvidedComponent

OC_EXT = "ftagent.tools.opencompass.oc_ext"
OC_DOMAIN = "ftagent.tools.opencompass.oc_domain"
OC_MATH = "ftagent.tools.opencompass.oc_math"
OC_REWARD = "ftagent.tools.opencompass.oc_reward"

#: name -> module of its implementation (inside the tool env)
COMPONENTS = {
    # post-processors (oc_ext)
    "strip_answer": OC_EXT, "last_boxed": OC_EXT, "option_letter": OC_EXT, "last_number": OC_EXT,
    "extract_code": OC_EXT,
    # evaluators
    "ExactMatchEvaluator": OC_EXT, "BoxedIntAccEvaluator": OC_EXT, "OptionLetterEvaluator": OC_EXT,
    "NumericToleranceEvaluator": OC_EXT, "ContainsEvaluator": OC_EXT, "PythonTestsEvaluator": OC_EXT,
    "DomainEvaluator": OC_DOMAIN, "MathVerifyEvaluator": OC_MATH,
    # a training gold read as the benchmark reads a reply (the sampling step, issue 40)
    "gold_as_answer": OC_REWARD,
}


def register() -> None:
    """Register every component (idempotent: done once at import)."""
    for name, module in COMPONENTS.items():
        PROVIDED.register(name, ProvidedComponent(path=f"{module}:{name}"))


register()
