"""The session's final evaluation (issue 31 item 3, FT_FINAL_EVAL): which items, which results are
reused, the paired interval, and the report / card / forecast lines."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.final_record import FINAL_FILE, FinalEvaluation, load_final
from ftagent.core.stats import ItemScores
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import EvalResult
from ftagent.finetune import final_evaluation as final_mod
from ftagent.finetune.state import FinetuneSessionState


def _items(tmp: Path, name: str, values: list[float]) -> str:
    rec = ItemScores(benchmark="b", split="x", core_metric="accuracy",
                     items={"b": {f"i{k}": v for k, v in enumerate(values)}})
    return str(rec.save(tmp / f"{name}.items.json"))


def _bench(tmp: Path, test_n: int, full_n: int) -> Path:
    data = tmp / "files" / "benchmarks" / "b"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text("{}\n" * test_n)
    (data / "full.jsonl").write_text("{}\n" * full_n)
    return data


def _session(tmp: Path, *, best: bool = True):
    base_test = _items(tmp, "base_test", [0.0] * 10)
    exp = Experiment(loop=1, decision=True, test_score=80.0, test_items=_items(tmp, "best_test", [1.0] * 8 + [0.0] * 2),
                     artefacts={"model": str(tmp / "model"), "output_dir": str(tmp / "out")})
    trace = Trace(core_metric="accuracy", baseline_test=0.0, baseline_test_items=base_test,
                  experiments=[exp], sota_loop=1 if best else None)
    scenario = SimpleNamespace(base_model_path=str(tmp / "base"), base_model="builtin/tiny-qwen2",
                               hardware=SimpleNamespace(gpu_count=0),
                               items_root=lambda: tmp / "files" / "benchmarks")  # the session's items (_bench)
    (tmp / "sess").mkdir()
    # the real state class (final.py checks it), built unvalidated around the fake scenario
    state = FinetuneSessionState.model_construct(trace=trace, scenario=scenario)
    return SimpleNamespace(state=state, dir=tmp / "sess")


def _run(data: Path):
    return SimpleNamespace(data_dir=data, benchmark="b", adapter=None, model=SimpleNamespace(inference=None))


def _settings(tmp: Path, mode: str):
    return SimpleNamespace(ft=SimpleNamespace(final_eval=mode, file_path=tmp / "files", benchmark_timeout_s=60))


def test_full_equals_test_reuses_the_recorded_test_scores_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr("ftagent.tools.opencompass.runs.evaluate_splits_of_path",
                        lambda *a, **k: pytest.fail("nothing may run when full equals test"))
    session, msgs = _session(tmp_path), []
    res = final_mod.final_evaluation(session, _settings(tmp_path, "full"), _run(_bench(tmp_path, 10, 10)), None,
                                     msgs.append)
    assert res.split == "test" and res.items == 10 and res.best_loop == 1
    assert res.base_score == 0.0 and res.best_score == 80.0
    assert res.difference.has_interval and res.difference.items == 10 and res.difference.diff == pytest.approx(80.0)
    assert "full equals test here" in res.note
    assert load_final(session.dir) == res and "final evaluation on test (10 items)" in msgs[-1].text


def test_split_mode_and_none(tmp_path):
    session = _session(tmp_path)
    data = _bench(tmp_path, 10, 30)
    res = final_mod.final_evaluation(session, _settings(tmp_path, "split"), _run(data), None, lambda e: None)
    assert res.split == "test" and res.note == ""  # the test split, though more items exist
    (session.dir / FINAL_FILE).unlink()
    assert final_mod.final_evaluation(session, _settings(tmp_path, "none"), _run(data), None, lambda e: None) is None
    assert not (session.dir / FINAL_FILE).exists()


def test_full_scores_base_and_best_on_every_item_outside_validation(tmp_path, monkeypatch):
    calls = []

    def fake(model_path, template, *, splits, **kw):
        calls.append((Path(model_path).name, tuple(splits), kw.get("base_path")))
        good = Path(model_path).name == "model"
        values = [1.0] * 20 + [0.0] * 10 if good else [1.0] * 5 + [0.0] * 25
        out = SimpleNamespace()
        res = EvalResult(benchmark="b", split="full", core_metric="accuracy", score=100 * sum(values) / 30,
                         items_file=_items(tmp_path, f"{Path(model_path).name}_full", values))
        out.require = lambda split: res
        return out

    monkeypatch.setattr("ftagent.tools.opencompass.runs.evaluate_splits_of_path", fake)
    session, msgs = _session(tmp_path), []
    res = final_mod.final_evaluation(session, _settings(tmp_path, "full"), _run(_bench(tmp_path, 10, 30)), None,
                                     msgs.append)
    assert [c[:2] for c in calls] == [("base", ("full",)), ("model", ("full",))]
    assert res.split == "full" and res.items == 30 and res.test_items == 10
    assert res.best_score == pytest.approx(66.667, abs=0.01) and res.base_score == pytest.approx(16.667, abs=0.01)
    assert res.difference.items == 30 and res.difference.low > 0
    assert "on 30 items" in msgs[0].text or "30 items" in msgs[0].text
    assert "full (30 items: every item outside validation)" in res.line()


def test_final_eval_json_is_replaced_whole_never_rewritten_in_place(tmp_path):
    """Issue 43: ``final_eval.json`` was written in place (``Path.write_text``: truncate, then write), so a
    reader (the UI, ``ftagent report``) could read it half-written, and a kill or a full disk mid-write left
    a cut file. Now a temp file renamed over it: a reader that opened the previous file still reads it
    whole (in place, the same file would read truncated/new), and no temp file stays."""
    session = _session(tmp_path)
    previous = '{"mode": "split", "split": "test", "items": 10, "note": "the previous result"}'
    (session.dir / FINAL_FILE).write_text(previous)
    with open(session.dir / FINAL_FILE, encoding="utf-8") as reader:  # opened before the write
        final_mod.final_evaluation(session, _settings(tmp_path, "split"), _run(_bench(tmp_path, 10, 10)), None,
                                   lambda e: None)
        assert reader.read() == previous
    assert load_final(session.dir).best_loop == 1
    assert sorted(p.name for p in session.dir.iterdir()) == [FINAL_FILE]


def test_no_best_loop_scores_the_base_only(tmp_path):
    session = _session(tmp_path, best=False)
    res = final_mod.final_evaluation(session, _settings(tmp_path, "full"), _run(_bench(tmp_path, 10, 10)), None,
                                     lambda e: None)
    assert res.best_loop is None and res.difference is None and res.best_score == res.base_score
    assert "no loop beat it" in res.line()


def test_the_report_and_the_card_show_the_final_column_with_its_items():
    from ftagent.core.stats import Difference
    from ftagent.views.report import Report, render_markdown

    fin = FinalEvaluation(mode="full", split="full", items=400, test_items=100, base_score=10.0, best_loop=2,
                          best_score=30.0, difference=Difference(against="baseline", split="full", diff=20.0, low=14.0,
                                                                 high=26.0, items=400, resamples=2000))
    md = render_markdown(Report(session="s", baseline_val=1.0, baseline_test=2.0, best_loop=2, best_val=3.0,
                                best_test=4.0, final=fin))
    assert "| | validation | test | final: full (400 items: every item outside validation) |" in md
    assert "| baseline | 1.00 | 2.00 | 10.00 |" in md
    assert "30.00 (+20.0 [+14.0, +26.0] on 400 items vs baseline) |" in md
    plain = render_markdown(Report(session="s"))
    assert "| | validation | test |\n|---|---|---|\n" in plain  # no final evaluation: the table as before
    noted = render_markdown(Report(session="s", final=fin.model_copy(update={"split": "test", "items": 100,
                                                                              "note": "full equals test here: x"})))
    assert "final: test (100 items)" in noted and "Final evaluation (FT_FINAL_EVAL=full): full equals test here" in noted
    json.loads(Report(session="s", final=fin).model_dump_json())


def test_the_forecast_counts_the_final_evaluation(tmp_path):
    from ftagent.core.forecast_arithmetic import EvalProbe, Forecast
    from ftagent.finetune.session_forecast import final_items
    from ftagent.views.forecast_text import forecast_table_rows

    _bench(tmp_path, 100, 400)
    scenario, notes = SimpleNamespace(benchmark="b"), []
    assert final_items(scenario, _settings(tmp_path, "full"), notes) == 400 and "400 items" in notes[0]
    assert final_items(scenario, _settings(tmp_path, "split"), []) == 0
    probe = EvalProbe(key="k", fixed_s=10.0, s_per_item=0.5, items=200)
    from ftagent.core.forecast_arithmetic import TrainPlan, TrainProbe, build_forecast

    plan = TrainPlan.model_validate({"method": "full", "rows": 10, "effective_batch": 1})
    train = TrainProbe(key="t", s_per_step=1.0, startup_s=1.0, validate_s=1.0, steps=3)
    with_final = build_forecast(planner="heuristic", loop_n=1, plan=plan, train=train, evaluation=probe,
                                final_items=400)
    without = build_forecast(planner="heuristic", loop_n=1, plan=plan, train=train, evaluation=probe)
    assert with_final.final_eval_s == 2 * (10.0 + 400 * 0.5) and without.final_eval_s is None
    assert with_final.total_s == pytest.approx(without.total_s + 420.0)
    assert any(r[0].startswith("final evaluation (400 items") for r in forecast_table_rows(with_final))
    assert isinstance(with_final, Forecast)


def test_the_model_card_has_the_final_row_with_its_items(tmp_path):
    from ftagent.core.stats import Difference
    from tests.unit.test_export import _card, _export
    from tests.unit.test_export_sessions import exportable_session

    session = exportable_session(tmp_path)
    fin = FinalEvaluation(mode="full", split="full", items=400, test_items=100, base_score=0.1, best_loop=0,
                          best_score=0.3, difference=Difference(against="baseline", split="full", diff=0.2, low=0.1,
                                                                high=0.3, items=400, resamples=2000))
    (session / FINAL_FILE).write_text(fin.model_dump_json(), encoding="utf-8")
    folder, _ = _export(session)
    meta, body = _card(folder)
    assert "| full (400 items: every item outside validation) | 0.10 | 0.30 | +0.2 [+0.1, +0.3] on 400 items |" in body
    assert "full" in {r["dataset"]["split"] for r in meta["model-index"][0]["results"]}
    other = fin.model_copy(update={"best_loop": 2})  # the final evaluation scored another loop: not this card's
    (session / FINAL_FILE).write_text(other.model_dump_json(), encoding="utf-8")
    folder, _ = _export(session, to=tmp_path / "again")
    assert "items: every item outside validation" not in _card(folder)[1]
