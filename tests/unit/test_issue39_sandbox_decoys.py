"""Issue 39 item 7: the sandbox is the guarantee, and its own record is what flags.

Through the real data step (:meth:`DataProcessor.prepare`) and the real local runner under bubblewrap: a
data script sees no benchmark item, no baseline or loop prediction, no eval cache and no session log (the
folders are decoys: names only, empty files); every attempt it makes -- a direct open, a glob, a split
string, a listing of the other loops -- is recorded outside the sandbox, and only that record flags the
``data_script`` check. An honest script (whose comment names ``benchmarks/<key>``) is recorded as clean.
At d350dfe the folders were invisible but nothing recorded an attempt: a script that caught the error and
printed nothing passed, and the honest comment was flagged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.types import CodeResult, ModelInfo, ScenarioInfo
from ftagent.integrity.training_data import data_script_check
from ftagent.runners import sandbox
from ftagent.runners.decoys import read_attempts
from ftagent.runners.local import LocalRunner

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()
pytestmark = pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap: {BWRAP_WHY}")
KEY = "demo_add"
SECRET = "What is 25 + 68? THE-SECRET-ITEM"


@pytest.fixture(scope="module")
def tools_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("toolenv") / "tools"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    return env


class World:
    """FT_FILE_PATH with a prepared benchmark, a baseline's predictions and an eval cache; a session with an
    earlier loop's evaluation output; logs; and loop 1's workspace."""

    def __init__(self, root: Path, tools_env: Path) -> None:
        self.ft = root / "ft"
        self.bench = self.ft / "benchmarks" / KEY
        for split in ("validation", "test"):
            (self.bench / split).mkdir(parents=True)
            (self.bench / split / "default.jsonl").write_text(json.dumps({"question": SECRET}) + "\n")
            (self.bench / f"{split}.jsonl").write_text(json.dumps({"question": SECRET}) + "\n")
        pred = self.ft / "baseline" / KEY / "eval" / "validation_test" / "20260101_000000" / "predictions" / "m"
        pred.mkdir(parents=True)
        (pred / "demo_add@test.json").write_text(json.dumps({"0": {"origin_prompt": SECRET, "gold": "93"}}))
        (self.ft / "eval_cache").mkdir()
        (self.ft / "eval_cache" / "abc.json").write_text(SECRET)
        (self.ft / "datasets" / "demo_add").mkdir(parents=True)
        (self.ft / "datasets" / "demo_add" / "train.json").write_text("[]")
        self.workspaces = root / "workspace"
        old = self.workspaces / "sess" / "loop_0" / "output" / "oc" / "eval" / "validation_test"
        old.mkdir(parents=True)
        (old / "predictions.json").write_text(SECRET)
        self.logs = root / "log"
        (self.logs / "sess").mkdir(parents=True)
        (self.logs / "sess" / "events.jsonl").write_text(SECRET)
        self.ws = self.workspaces / "sess" / "loop_1"
        self.ws.mkdir(parents=True)
        self.runner = LocalRunner(tools_env, sandbox="bwrap", gpu=False)
        self.scenario = ScenarioInfo(benchmark=KEY, base_model="b", base_model_path=str(root / "nomodel"),
                                     model_info=ModelInfo(name="b", path=""), file_path=str(self.ft),
                                     workspace_root=str(self.workspaces), dataset_root=str(self.ft / "datasets"))

    def run(self, script: str, tmp_env: dict[str, str] | None = None):
        from ftagent.core.settings import load_settings
        from ftagent.tools.llamafactory.data_script import DataProcessor

        (self.ws / "process_data.py").write_text(script)
        settings = load_settings(file_path=str(self.ft))
        settings.paths.log_path = str(self.logs)
        events: list = []
        ctx = SimpleNamespace(limit=lambda s: s, emit=events.append)
        data = DataProcessor(self.scenario, settings, self.runner, input_columns=["question"], answer_column="answer")
        data._bench_items = {}  # the scan is not under test here
        data.prepare(CodeResult(workspace=str(self.ws)), SimpleNamespace(skip_data_processing=False, parent=None),
                     None, ctx, debug=True)
        return json.loads((self.ws / "data.json").read_text()), events


@pytest.fixture
def world(tmp_path: Path, tools_env: Path) -> World:
    return World(tmp_path, tools_env)


PROBE = r'''
import glob, json, os
ds = os.environ["FT_DATASETS_DIR"]
ft = os.path.dirname(ds)
found = {}
def look(name, fn):
    try:
        found[name] = fn()
    except Exception as exc:
        found[name] = type(exc).__name__
look("bench_test", lambda: open(os.path.join(ft, "benchmarks", "demo_add", "test.jsonl")).read())
look("split_string", lambda: open("/".join([ft, "bench" + "marks", "demo_add", "validation", "default.jsonl"])).read())
look("glob", lambda: [open(p).read() for p in glob.glob(ft + "/bench*/*/*.jsonl")])
look("baseline", lambda: [open(p).read() for p in glob.glob(ft + "/baseline/**/*.json", recursive=True)])
look("eval_cache", lambda: [open(p).read() for p in glob.glob(ft + "/eval_cache/*")])
look("other_loops", lambda: os.listdir(".."))
look("logs", lambda: open(os.path.join(LOGS, "sess", "events.jsonl")).read())
json.dump([{"instruction": "probe", "input": "", "output": json.dumps(found)}], open("data.json", "w"))
'''


def test_nothing_forbidden_is_visible_and_every_attempt_is_recorded_and_flagged(world: World):
    rows, events = world.run(f"LOGS = {str(world.logs)!r}\n" + PROBE)
    found = json.loads(rows[0]["output"])
    assert SECRET not in rows[0]["output"], found  # by construction: no item, prediction or log is readable
    assert found["bench_test"] == "" and found["split_string"] == ""  # decoys: names only, empty files
    attempts = read_attempts(world.ws)["debug"]
    text = "\n".join(attempts)
    for what in (f"benchmarks/{KEY}/test.jsonl", f"benchmarks/{KEY}/validation/default.jsonl", "baseline",
                 "eval_cache/abc.json", "workspace/sess", "log/sess/events.jsonl"):
        assert what in text, (what, attempts)
    assert any("tried to read outside its sandbox" in getattr(e, "text", "") for e in events)
    check = data_script_check(world.ws, world.bench, KEY)
    assert check.passed is False and "the sandbox recorded reads" in check.detail


def test_a_script_that_hides_its_attempt_is_still_recorded(world: World):
    """It catches the error and prints nothing: the record is outside, so the flag stands."""
    script = ("import json, os\ntry:\n    open(os.path.dirname(os.environ['FT_DATASETS_DIR']) + "
              f"'/benchmarks/{KEY}/validation.jsonl').read()\nexcept Exception:\n    pass\n"
              "json.dump([{'instruction': 'q', 'input': '', 'output': 'a'}], open('data.json', 'w'))\n")
    world.run(script)
    assert data_script_check(world.ws, world.bench, KEY).passed is False


def test_an_honest_script_naming_the_benchmark_folder_is_clean(world: World):
    script = (f"# the benchmark's items (benchmarks/{KEY}) are never read here: rows come from the raw dataset\n"
              "import json, os\n"
              "rows = json.load(open(os.path.join(os.environ['FT_DATASETS_DIR'], 'demo_add', 'train.json')))\n"
              "json.dump([{'instruction': 'What is 101 + 7?', 'input': '', 'output': '108'}], open('data.json', 'w'))\n")
    world.run(script)
    assert read_attempts(world.ws) == {"debug": []}
    check = data_script_check(world.ws, world.bench, KEY)
    assert check.passed is True and "warning, not a flag" in check.detail


def test_a_loop_run_again_cannot_read_its_earlier_evaluation(world: World):
    """A resume from an earlier step of an evaluated loop: the workspace still held output/ (validation with
    its selection part, and test predictions), and the sandbox binds the workspace. It is set aside first."""
    old = world.ws / "output" / "oc" / "eval" / "validation_test"
    old.mkdir(parents=True)
    (old / "predictions.json").write_text(SECRET)
    script = ("import glob, json\nfound = [open(p).read() for p in glob.glob('output/**/*.json', recursive=True)]\n"
              "json.dump([{'instruction': 'q', 'input': '', 'output': json.dumps(found)}], open('data.json', 'w'))\n")
    rows, _ = world.run(script)
    assert SECRET not in rows[0]["output"] and not (world.ws / "output").exists()
    (kept,) = (world.workspaces / "sess" / ".replaced").iterdir()
    assert (kept / "oc" / "eval" / "validation_test" / "predictions.json").read_text() == SECRET
