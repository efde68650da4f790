"""Issue 39 item 4: ``eval_config`` cannot be sidestepped.

The configs are rendered by ftagent's real renderer through the real evaluation path
(``evaluate_baseline`` / ``evaluate_splits_of_path`` with tests/unit/test_oc_splits.py's fake OpenCompass, which
writes what OpenCompass 0.5.4 writes): the baseline's digests are recorded when it runs, every result carries
its own (a cached one too), and the guard compares them. At d350dfe the check compared the files' text before
``models = [`` and reported "not applicable" when the header lines differed or no file was rendered (a cached
evaluation); the cheats below passed it, and are now flagged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.settings import load_settings
from ftagent.integrity.eval_config import eval_config_check, file_digests, split_digests
from ftagent.tools.opencompass.evaluator import evaluate_baseline
from ftagent.tools.opencompass.inference import inference_settings
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_oc_splits import FakeOpenCompass, _scenario
from tests.unit.test_oc_splits import model as model  # noqa: F401 - the fixture


@pytest.fixture
def session(model: Path, tmp_path: Path):
    """The baseline's evaluation and a candidate's, through the real path; the digests they recorded."""
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner, bench = FakeOpenCompass(), get_benchmark("demo_add")
    baseline = evaluate_baseline(_scenario(model), settings, runner, benchmark=bench,
                                 inference=inference_settings("builtin/tiny-qwen2"))
    recorded = {s: r.config_sha256 for s, r in baseline.items()}
    cand = tmp_path / "cand"
    cand.mkdir()
    for name in ("config.json", "chat_template.jinja"):
        (cand / name).write_bytes((model / name).read_bytes())
    (cand / "model.safetensors").write_bytes(safetensors_bytes(b"trained"))  # other bytes: no cache hit on the base's

    def evaluate(folder: Path = cand, work: Path = cand / "oc", **kw):
        out = evaluate_splits_of_path(folder, None, benchmark=bench, settings=settings, runner=runner, work_dir=work,
                                      model_name="builtin/tiny-qwen2", **kw)
        return {s: r.config_sha256 for s, r in out.results.items()}, out

    return recorded, evaluate, cand, tmp_path / "ft" / "baseline" / "demo_add"


def test_every_result_records_its_config_digest_and_the_cache_keeps_it(session) -> None:
    baseline, evaluate, cand, _ = session
    assert set(baseline) == {"validation", "test"} and all(baseline.values())
    first, out = evaluate()
    assert first == baseline  # same datasets, prompts and scorers; another model
    again, cached = evaluate()
    assert all(r.cached for r in cached.results.values()) and again == first  # a cached result carries its digest
    assert eval_config_check(first, cand / "oc", baseline).passed is True


def test_the_isolated_layout_hashes_alike(session, tmp_path: Path) -> None:
    """One OpenCompass run per split, abbrs without ``@split``: the same digests."""
    baseline, evaluate, cand, _ = session
    digests, _ = evaluate(work=tmp_path / "isolated", isolate_tasks=True)
    assert digests == baseline and file_digests(tmp_path / "isolated") == baseline


# -- cheats ----------------------------------------------------------------------------------------------
def test_cheat_swapped_evaluator_with_a_changed_header(session) -> None:
    """The project's own cheat (another evaluator) plus a header line that no longer matches the baseline's."""
    baseline, evaluate, cand, _ = session
    evaluate()
    cfg = cand / "oc" / "oc_validation_test.py"
    text = cfg.read_text().replace("template_version='3'", "template_version='4'")
    cfg.write_text(text.replace("type=BoxedIntAccEvaluator", "type=ExactMatchEvaluator"))
    check = eval_config_check({}, cand / "oc", baseline)  # what is on disk, no recorded digest
    assert check.passed is False and "differ from the baseline's" in check.detail, check.detail


def test_cheat_the_same_edit_to_the_candidates_and_the_baselines_configs(session) -> None:
    baseline, evaluate, cand, baseline_dir = session
    evaluate()
    for cfg in (cand / "oc" / "oc_validation_test.py", baseline_dir / "oc_validation_test.py"):
        cfg.write_text(cfg.read_text().replace("type=BoxedIntAccEvaluator", "type=ExactMatchEvaluator"))
    assert file_digests(cand / "oc") == file_digests(baseline_dir)  # the files agree with each other ...
    check = eval_config_check({}, cand / "oc", baseline)  # ... not with what the baseline was scored with
    assert check.passed is False, check.detail


def test_cheat_config_edited_after_it_was_rendered(session) -> None:
    baseline, evaluate, cand, _ = session
    recorded, _ = evaluate()
    cfg = cand / "oc" / "oc_validation_test.py"
    cfg.write_text(cfg.read_text().replace("max_out_len=", "max_out_len=1 + "))
    check = eval_config_check(recorded, cand / "oc", baseline)
    assert check.passed is False and "edited after ftagent rendered it" in check.detail, check.detail


def test_cheat_a_cached_result_computed_with_another_config(session, tmp_path: Path) -> None:
    """No file on disk (a cache hit renders nothing): the result's own digest decides, never "not applicable"."""
    baseline, _, _, _ = session
    other = {s: "0" * 64 for s in baseline}
    check = eval_config_check(other, tmp_path / "no_oc_folder", baseline)
    assert check.passed is False, check.detail
    honest = eval_config_check(dict(baseline), tmp_path / "no_oc_folder", baseline)
    assert honest.passed is True and "cached result" in honest.detail


# -- honest variations and the two true "not applicable" cases ----------------------------------------------
def test_honest_differences_that_do_not_change_a_score(session, tmp_path: Path) -> None:
    """Comments, formatting, the model block, and a data file at another path with the same items."""
    baseline, evaluate, cand, _ = session
    evaluate()
    text = (cand / "oc" / "oc_validation_test.py").read_text()
    data = text.split("path='", 1)[1].split("'", 1)[0]
    moved = tmp_path / "session_copy" / Path(data).name
    moved.parent.mkdir()
    moved.write_bytes(Path(data).read_bytes())
    text = "# rendered again\n" + text.replace(f"path='{data}'", f"path = '{moved}'").replace("batch_size=", "batch_size=1+")
    assert split_digests(text)["validation"] == baseline["validation"]
    moved.write_text(moved.read_text() + '{"question": "1+1", "answer": "2"}\n')  # other items: another config
    assert split_digests(text)["validation"] != baseline["validation"]


def test_honest_judge_gateway_port_is_not_the_config() -> None:
    source = ("from m import J\ndatasets = [dict(abbr='b@validation', path='/nope', eval_cfg=dict(judge_cfg=dict("
              "type=J, openai_api_base='{}')))]\n")
    one, two = (split_digests(source.format(f"http://127.0.0.1:{p}/v1/")) for p in (4100, 4200))
    assert one == two
    assert split_digests(source.format("https://judge.example/v1/")) != one


def test_not_applicable_only_with_its_reason(tmp_path: Path) -> None:
    no_baseline = eval_config_check({"validation": "a" * 64}, None, {})
    assert no_baseline.passed is None and "baseline's evaluation config was not recorded" in no_baseline.detail
    plug_in = eval_config_check({}, tmp_path, {"validation": "a" * 64})
    assert plug_in.passed is None and "recorded no config digest and rendered no config" in plug_in.detail
