from pathlib import Path

from ftagent.core.types import EvalResult
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.cache import EvalCache, artefact_digest, cache_key

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "opencompass"


def test_list_layout_real_run():
    run = parse.latest_run(FIX / "list_layout")
    assert parse.failure_reason(run) is None
    metrics = parse.read_metrics(run)
    assert metrics == {"demo_add": {"accuracy": 0.0}}
    assert parse.core_score(metrics, "accuracy") == 0.0
    samples = parse.error_samples(run)
    assert len(samples) == 10  # 20 wrong, capped
    assert samples == parse.error_samples(run)  # seeded
    s = samples[0]
    assert "What is" in s["question"] and s["gold"].isdigit() and set(s) >= {"question", "gold", "model_output"}


def test_dict_layout_counts_correct_items():
    run = parse.latest_run(FIX / "dict_layout")
    assert parse.read_metrics(run)["demo_add"]["accuracy"] == 10.0
    samples = parse.error_samples(run, max_samples=100)
    assert len(samples) == 18
    golds = {s["gold"] for s in samples}
    assert "93" not in golds  # item 0 (gold 93) is correct in this fixture


def test_failure_detected_from_dash_summary():
    run = parse.latest_run(FIX / "failed")
    reason = parse.failure_reason(run)
    assert reason is not None and "no results" in reason
    assert parse.failure_reason(None) is not None


def test_dash_summary_with_results(tmp_path):
    import shutil

    run = tmp_path / "20260101_000000"
    shutil.copytree(parse.latest_run(FIX / "list_layout"), run)
    for csv in (run / "summary").glob("*.csv"):
        csv.write_text("dataset,version,metric,mode,m\ndemo_add,-,-,-,-\n")
    assert "demo_add" in parse.failure_reason(run)
    assert parse.read_metrics(run) == {}


def test_is_correct_variants():
    assert parse.is_correct({"correct": [True, True]})
    assert not parse.is_correct({"correct": [True, False]})
    assert parse.is_correct({"cascade_correct": "A", "correct": False})
    assert parse.is_correct({"llm_evaluation": [{"llm_correct": "CORRECT"}]})
    assert not parse.is_correct({"pred": "x"})


def test_cache_roundtrip_and_key_sensitivity(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"abc")
    d1 = artefact_digest(model)
    k1 = cache_key(d1, "demo_add", "validation", {"limit": 20}, {"t": 0}, "1")
    assert k1 == cache_key(d1, "demo_add", "validation", {"limit": 20}, {"t": 0}, "1")
    assert k1 != cache_key(d1, "demo_add", "test", {"limit": 20}, {"t": 0}, "1")
    assert k1 != cache_key(d1, "demo_add", "validation", {"limit": 30}, {"t": 0}, "1")
    assert k1 != cache_key(d1, "demo_add", "validation", {"limit": 20}, {"t": 1}, "1")
    (model / "model.safetensors").write_bytes(b"abd")
    assert artefact_digest(model) != d1
    cache = EvalCache(tmp_path / "eval_cache")
    assert cache.get(k1) is None
    cache.put(k1, EvalResult(benchmark="demo_add", split="validation", core_metric="accuracy", score=5.0))
    hit = cache.get(k1)
    assert hit.cached and hit.score == 5.0


def test_prediction_profile_shows_a_collapsed_model():
    """The fixture's model printed only newlines: every scored answer is the same empty string."""
    run = parse.latest_run(FIX / "list_layout")
    profile = parse.prediction_profile(run)
    assert (profile.items, profile.wrong, profile.top) == (20, 20, {"": 20})
    other = parse.prediction_profile(parse.latest_run(FIX / "dict_layout"))
    assert (other.items, other.wrong) == (20, 18)
