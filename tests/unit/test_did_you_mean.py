"""Issue 34 item 12: a did-you-mean names only a close key (similarity cutoff 0.6, difflib's default)."""

from __future__ import annotations

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import UserInputError
from ftagent.core.registry import did_you_mean


def test_an_unrelated_benchmark_key_gets_no_suggestion():
    with pytest.raises(UserInputError) as info:
        get_benchmark("nope_bench")
    assert "unknown benchmark 'nope_bench'" in str(info.value) and "Did you mean" not in str(info.value)


@pytest.mark.parametrize("typo, hint", [("aime2", "aime25"), ("demo-add", "demo_add"), ("gsm8", "gsm8k"),
                                        ("humaneva", "humaneval")])
def test_close_typos_still_get_one(typo, hint):
    from ftagent.benchmarks.registry import BENCHMARKS

    assert did_you_mean(typo, BENCHMARKS.names()) == f" Did you mean '{hint}'?"
