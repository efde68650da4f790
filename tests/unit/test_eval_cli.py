"""`ftagent eval` (issue 31 item 4): bad input is one clear line and exit 2 before anything runs; the
model a session directory names; the score's interval; the JSON's default place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.weights import safetensors_bytes
from tests.unit.test_export_sessions import exportable_session, no_sota_plan

REPO = Path(__file__).resolve().parents[2]


def run_eval(args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "HF_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(Path(cwd) / "files")})
    return subprocess.run([sys.executable, "-m", "ftagent", "eval", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _refused(res, fragment: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines and fragment in "\n".join(lines), res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_benchmark_has_a_did_you_mean(tmp_path):
    res = run_eval(["--model", "builtin/tiny-qwen2", "--benchmark", "demo_ad"], tmp_path)
    _refused(res, "Did you mean 'demo_add'?")
    assert not (tmp_path / "files").exists()  # refused before anything was written


def test_missing_model_folder_and_a_folder_that_is_no_model(tmp_path):
    _refused(run_eval(["--model", tmp_path / "nope", "--benchmark", "demo_add"], tmp_path), "no such folder")
    (tmp_path / "empty").mkdir()
    _refused(run_eval(["--model", tmp_path / "empty", "--benchmark", "demo_add"], tmp_path), "no config.json")


def test_bad_split_and_unknown_builtin(tmp_path):
    _refused(run_eval(["--model", "builtin/tiny-qwen2", "--benchmark", "demo_add", "--split", "train"], tmp_path),
             "one of validation, test, full")
    _refused(run_eval(["--model", "builtin/nope", "--benchmark", "demo_add"], tmp_path), "nope")


def test_a_session_without_a_best_model(tmp_path):
    session = exportable_session(tmp_path, plan=no_sota_plan())
    _refused(run_eval(["--model", session], tmp_path), "no best model")


def test_a_session_names_its_best_model_and_benchmark(tmp_path):
    from ftagent.finetune.score import resolve_model

    session = exportable_session(tmp_path)
    ref = resolve_model(str(session))
    assert ref.benchmark == "demo_add" and ref.name == "builtin/tiny-qwen2"
    assert ref.path is not None and ref.path.is_dir() and "loop 0" in ref.what
    export = session / "export" / "loop_0"  # an export, when there is one, is what is scored
    export.mkdir(parents=True)
    (export / "config.json").write_text("{}")
    assert resolve_model(str(session)).path == export.absolute()


def test_the_score_interval_is_the_bootstrap_of_the_mean(tmp_path):
    from ftagent.core.stats import ItemScores
    from ftagent.core.types import EvalResult
    from ftagent.finetune.score import ModelRef, default_out, score_of

    items = ItemScores(benchmark="demo_add", split="test", core_metric="accuracy",
                       items={"demo_add": {str(i): float(i % 2) for i in range(100)}})
    path = items.save(tmp_path / "x.items.json")
    res = EvalResult(benchmark="demo_add", split="test", core_metric="accuracy", score=50.0, items_file=str(path))
    s = score_of(ModelRef(given="m", name="m"), res, "test")
    assert s.score == pytest.approx(50.0) and s.items == 100
    assert 38 < s.low < 45 and 55 < s.high < 62  # ~ ±10 points on 100 coin flips
    assert "[" in s.text() and "on 100 items" in s.text()
    none = score_of(ModelRef(given="m", name="m"), res.model_copy(update={"items_file": None}), "test")
    assert none.score == 50.0 and none.low is None and "no interval" in none.text()
    assert default_out("/a/b/export/loop_0/", "demo_add") == Path("ftagent-eval-loop_0-demo_add.json")
    assert default_out("builtin/tiny-qwen2", "./my.yaml").name == "ftagent-eval-tiny-qwen2-my.json"
    json.loads(s.model_dump_json())


def test_a_hub_id_with_dots_is_a_model_id_not_a_missing_folder(tmp_path):
    """Issue 32 (README run as a new user): `ftagent eval --model Qwen/Qwen2.5-1.5B-Instruct` said 'no such
    folder': the '.5-1' of the version was read as a file suffix. It is an HF id; offline and not downloaded,
    the one message says so (exit 2)."""
    from ftagent.finetune.score import resolve_model

    ref = resolve_model("Qwen/Qwen2.5-1.5B-Instruct")
    assert (ref.name, ref.what) == ("Qwen/Qwen2.5-1.5B-Instruct", "base model")
    res = run_eval(["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--benchmark", "demo_add"], tmp_path)
    _refused(res, "HF_HUB_OFFLINE")
    assert "no such folder" not in res.stderr
    _refused(run_eval(["--model", "./Qwen2.5-1.5B", "--benchmark", "demo_add"], tmp_path), "no such folder")


def test_eval_computes_each_base_models_folder_once(tmp_path, monkeypatch):
    """Issue 33 item 1: ``eval`` builds/downloads a base model into the folder its start-up resolved
    (ResolvedModel), not through a second resolution; ``--against`` is resolved once the same way."""
    from ftagent.core.types import EvalResult, SplitResults
    from ftagent.finetune import score
    from ftagent.models import base_model
    from ftagent.tools.opencompass import runs

    for key in [k for k in os.environ if k.startswith("FT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (folder / "tokenizer.json").write_text("{}")
    computed: list[str] = []
    real_dir = base_model.base_model_dir
    monkeypatch.setattr(base_model, "base_model_dir", lambda name, fp: computed.append(name) or real_dir(name, fp))
    fetched: list[tuple[str, Path]] = []
    monkeypatch.setattr(base_model, "fetch_base_model",
                        lambda name, target, runner, fp=None: fetched.append((name, target)) or target)
    evaluated: list[tuple[Path, object]] = []

    def fake_eval(path, template, *, benchmark, splits, inference, **_):
        evaluated.append((Path(path), inference))
        return SplitResults(results={"test": EvalResult(benchmark="demo_add", split="test",
                                                        core_metric="accuracy", score=1.0)})

    monkeypatch.setattr(runs, "evaluate_splits_of_path", fake_eval)
    report = score.run_eval("builtin/tiny-qwen2", "demo_add", "test", against=str(folder), make_runner=lambda: None)
    assert report.model.score == 1.0 and report.against is not None
    assert computed.count("builtin/tiny-qwen2") == 1  # before: resolve_run and again resolve_base_model
    assert fetched == [("builtin/tiny-qwen2", real_dir("builtin/tiny-qwen2", (tmp_path / "files").absolute()))]
    assert [p for p, _ in evaluated] == [fetched[0][1], folder.absolute()]
    assert all(inf is not None for _, inf in evaluated)


# -- issue 43: eval's endings -------------------------------------------------------------------------
def test_a_session_without_a_best_model_suggests_what_eval_can_do(tmp_path):
    """Issue 43: the message suggested ``--loop N``, an option of ``export`` that ``eval`` does not have. It
    names the loop's model folder to pass as --model instead (and the export of that loop)."""
    session = exportable_session(tmp_path, plan=no_sota_plan())
    res = run_eval(["--model", session], tmp_path)
    _refused(res, "no best model")
    assert "--loop N" not in res.stderr and "pass --loop" not in res.stderr, res.stderr
    model = tmp_path / "ws" / "loop_0" / "output"
    assert f"--model {model}" in res.stderr and f"ftagent export {session} --loop 0" in res.stderr, res.stderr


def test_a_missing_against_folder_is_named_as_against(tmp_path):
    """Issue 43: a missing ``--against`` folder was reported as ``--model``."""
    res = run_eval(["--model", "builtin/tiny-qwen2", "--benchmark", "demo_add", "--against", tmp_path / "gone"],
                   tmp_path)
    _refused(res, f"--against {tmp_path / 'gone'}: no such folder")
    assert "--model" not in res.stderr
    (tmp_path / "empty").mkdir()
    _refused(run_eval(["--model", "builtin/tiny-qwen2", "--benchmark", "demo_add", "--against", tmp_path / "empty"],
                      tmp_path), f"--against {tmp_path / 'empty'}: the folder has no config.json")


@pytest.mark.parametrize("out", ["a_file/eval.json", "a_file/deeper/eval.json", "a_folder"])
def test_an_out_that_cannot_be_written_is_refused_before_the_evaluation(tmp_path, monkeypatch, capsys, out):
    """Issue 43: ``eval --out`` into a folder that cannot be created failed with a traceback *after* the
    evaluation (the result lost). Checked first: exit 2, one line, nothing evaluated."""
    from ftagent.finetune import score

    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "a_folder").mkdir()
    monkeypatch.chdir(tmp_path)
    ran = []
    monkeypatch.setattr(score, "run_eval", lambda *a, **k: ran.append(a))
    code, err = _main(monkeypatch, capsys, "--out", out)
    assert code == 2 and not ran, (code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --out {out}: "), err


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """``ftagent eval --model builtin/tiny-qwen2 --benchmark demo_add ARGS`` through the console script's
    ``main`` (its error handling): (exit code, stderr)."""
    import importlib

    cli_main = importlib.import_module("ftagent.cli.main")  # the module (ftagent.cli exports the function)

    monkeypatch.setattr(sys, "argv", ["ftagent", "eval", "--model", "builtin/tiny-qwen2", "--benchmark", "demo_add",
                                      *args])
    code = 0
    try:
        cli_main.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_a_step_error_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    """Issue 43: a StepError (an evaluation that failed outside a session) printed a traceback (rc 1);
    ``cli.main`` prints one line with its type, message, suggestion and log file."""
    from ftagent.core.errors import ErrorType, StepError
    from ftagent.finetune import score

    def failing(*_a, **_k):
        raise StepError("OpenCompass evaluation of demo_add/test failed:\nno results", error_type=ErrorType.EVAL,
                        suggestion="see the log", details={"log_file": "/x/oc.log"})

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(score, "run_eval", failing)
    code, err = _main(monkeypatch, capsys)
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["error: [EVAL] OpenCompass evaluation of demo_add/test failed: no results; see the log "
                     "(log: /x/oc.log)"], err
