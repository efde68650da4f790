"""The benchmark registry: key → adapter class (``"module:Class"``), plus entry-point group
``ftagent.benchmarks`` for third-party adapters (the entry point names a class or an instance)."""

from __future__ import annotations

from ftagent.core.registry import Registry

BENCHMARKS: Registry = Registry("benchmark", entry_point_group="ftagent.benchmarks")

_BUILTIN = {
    "demo_add": "ftagent.benchmarks.demo:DemoAddAdapter",
    "aime24": "ftagent.benchmarks.math:Aime24Adapter",
    "aime25": "ftagent.benchmarks.math:Aime25Adapter",
    "gsm8k": "ftagent.benchmarks.math:Gsm8kAdapter",
    "math": "ftagent.benchmarks.math:MathAdapter",
    "mmlu": "ftagent.benchmarks.knowledge:MmluAdapter",
    "FinanceIQ_gen": "ftagent.benchmarks.knowledge:FinanceIQAdapter",
    "humaneval": "ftagent.benchmarks.code:HumanEvalAdapter",
    "mbpp": "ftagent.benchmarks.code:MbppAdapter",
}
for _key, _path in _BUILTIN.items():
    BENCHMARKS.register(_key, _path)

# The 21 FT-Dojo domain keys (PANORAMA, ChemCoTBench, TableBench, BioProBench): one generic adapter each.
from ftagent.benchmarks.domain import KEY_SPECS as _DOMAIN_KEYS  # noqa: E402 - stdlib-only, light

for _key in _DOMAIN_KEYS:
    BENCHMARKS.register(_key, f"ftagent.benchmarks.domain_adapters:ADAPTERS.{_key}")
