"""The integrity guard's red-team suite (issue 31 item 5): planted cheats are flagged, honest candidates are not.

Everything is built here from real small files: a base model folder (config, tokenizer files, chat template,
a safetensors file written byte by byte), a prepared benchmark folder, loop workspaces with ``data.json``,
``process_data.py`` and its log, and candidate output folders (a full fine-tune simulated by perturbing the
base's weights, a LoRA adapter, another checkpoint). The guard is the one the workflow runs
(:class:`ftagent.integrity.guard.IntegrityGuard`), and a flag keeps the candidate from SOTA
(:func:`ftagent.core.sota.decide_sota`).
"""

from __future__ import annotations

import json
import random
import shutil
import struct
from array import array
from pathlib import Path

import pytest

from ftagent.core.sota import decide_sota
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import AnswerProfile, ModelInfo, ScenarioInfo
from ftagent.datasets.contamination import fuzzy_scan
from ftagent.integrity.eval_config import split_digests
from ftagent.integrity.guard import IntegrityGuard
from ftagent.integrity.tensor_compare import MIN_WEIGHT_COSINE
from ftagent.integrity.weight_prints import fingerprint
from ftagent.integrity.weights import compare_full, weight_check
from tests.helpers.model_files import DEMO_RUN, trained, write_trainer_state

KEY = "redteam_bench"
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
LF_TEMPLATE = TEMPLATE + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"  # what LF writes
SHAPES = {"model.embed_tokens.weight": (128, 64), "model.layers.0.self_attn.q_proj.weight": (64, 64),
          "model.layers.1.self_attn.q_proj.weight": (64, 64), "model.norm.weight": (64,)}

QUESTIONS = [
    "A farmer plants 14 rows of apple trees with 23 trees in each row and later removes 9 damaged trees; "
    "how many apple trees remain in the orchard?",
    "The library lends 37 novels on Monday and 58 biographies on Tuesday while receiving 12 returned atlases; "
    "how many books left the shelves in total?",
    "A cyclist rides 18 kilometres north, turns east for 24 kilometres and then rests beside a quiet river; "
    "how far did the cyclist travel altogether?",
    "Maria bakes 45 blueberry muffins, sells 27 at the morning market and gives 6 to her neighbours; "
    "how many muffins does Maria keep?",
    "A warehouse stores 120 wooden crates, ships 75 crates to the harbour and receives 30 crates from the "
    "railway; how many crates are stored now?",
    "Twelve students each collect 8 seashells on the beach, then the teacher adds 15 polished pebbles to the "
    "display; how many objects are displayed?",
]
ANSWER = ("First multiply the rows by the trees per row to get the total planted, then subtract the damaged "
          "trees that were removed from the orchard.")


def _write_safetensors(path: Path, tensors: dict[str, list[float]], shapes: dict[str, tuple], dtype="F32") -> None:
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        if dtype == "F32":
            raw = array("f", values).tobytes()
        else:  # BF16: the high half of each float32
            raw = array("H", (v >> 16 for v in array("I", array("f", values).tobytes()))).tobytes()
        header[name] = {"dtype": dtype, "shape": list(shapes[name]), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _weights(seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out = {}
    for name, shape in SHAPES.items():
        n = 1
        for d in shape:
            n *= d
        out[name] = [1.0] * n if name.endswith("norm.weight") else [rng.gauss(0, 0.02) for _ in range(n)]
    return out


def _perturbed(base: dict[str, list[float]], relative: float, seed: int) -> dict[str, list[float]]:
    """An honest fine-tune's weights: the base plus noise of ``relative`` times the weights' scale."""
    rng = random.Random(seed)
    return {k: [v + rng.gauss(0, 0.02 * relative) for v in vals] for k, vals in base.items()}


def _tokenizer_files(folder: Path, template: str = TEMPLATE) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": {"0": {"content": "<|endoftext|>", "special": True}}, "chat_template": template}))


def _lora_factors(seed: int, scale: float = 0.02) -> tuple[dict[str, list[float]], dict[str, tuple]]:
    """An honest rank-4 adapter of the two q_proj layers (peft's key names and shapes)."""
    rng = random.Random(seed)
    tensors, shapes = {}, {}
    for layer in (0, 1):
        key = f"base_model.model.model.layers.{layer}.self_attn.q_proj"
        for part, shape in (("lora_A", (4, 64)), ("lora_B", (64, 4))):
            tensors[f"{key}.{part}.weight"] = [rng.gauss(0, scale) for _ in range(shape[0] * shape[1])]
            shapes[f"{key}.{part}.weight"] = shape
    return tensors, shapes


#: the honest loop's run: 100 steps at learning rate 1e-4 (a bound of 0.016 per value; the honest candidate is the
#: base plus noise of 5 % of the weights' scale, 0.001, so its largest change is ~0.005); an adapter's: 1e-3
FULL_RUN = {"finetuning_type": "full", "learning_rate": 1.0e-4, "lr_scheduler_type": "constant", "max_steps": 100}
LORA_RUN = {"finetuning_type": "lora", "learning_rate": 1.0e-3, "lr_scheduler_type": "constant", "max_steps": 100}

CONFIG = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}


def _model(folder: Path, weights: dict[str, list[float]], *, template: str = TEMPLATE, dtype="F32",
           config: dict | None = None) -> Path:
    _tokenizer_files(folder, template)
    (folder / "config.json").write_text(json.dumps(config or CONFIG))
    _write_safetensors(folder / "model.safetensors", weights, SHAPES, dtype)
    return folder


OC_CONFIG = """# Generated by ftagent from configs/opencompass/eval_config.py.j2 -- do not edit by hand.
# benchmark='redteam_bench' split='validation+test' template_version='3'
datasets = [
    dict(abbr='redteam_bench@validation', path='{data}/validation.jsonl',
         infer_cfg=dict(prompt_template=dict(template='{{question}} Put the final answer in \\boxed{{}}.')),
         eval_cfg=dict(evaluator=dict(type=BoxedIntAccEvaluator))),
]

models = [
    dict(type=TrainedFormatChatModel, path='{model}', tokenizer_path='{model}'),
]
"""


class World:
    """A session's files: base model, benchmark folder, and a way to make loop workspaces."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file_path = root / "files"
        self.data_dir = self.file_path / "benchmarks" / KEY
        self.data_dir.mkdir(parents=True)
        for split, qs in (("validation", QUESTIONS[:3]), ("test", QUESTIONS[3:])):
            rows = [{"question": q, "answer": ANSWER if i == 0 else str(i)} for i, q in enumerate(qs)]
            rows += [{"question": f"What is {a} + {a + 7}?", "answer": str(2 * a + 7)} for a in range(3, 9)]
            (self.data_dir / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (self.data_dir / "spec.json").write_text(json.dumps({"answer": "answer"}))
        self.base_weights = _weights(seed=2)
        self.base = _model(root / "models" / "base", self.base_weights)
        self.scenario = ScenarioInfo(benchmark=KEY, base_model="base", base_model_path=str(self.base),
                                     model_info=ModelInfo(name="base", path=str(self.base)),
                                     file_path=str(self.file_path), workspace_root=str(root / "ws"))
        baseline = self.file_path / "baseline" / KEY
        baseline.mkdir(parents=True)
        rendered = OC_CONFIG.format(data=self.data_dir, model=self.base)
        (baseline / "oc_validation_test.py").write_text(rendered)
        # what the baseline's evaluation records when ftagent renders its config (tools/opencompass/runs.py)
        self.baseline_configs = split_digests(rendered)
        self.guard = IntegrityGuard(self.scenario, input_columns=["question"], answer_field="answer",
                                    references_file=root / "session" / "integrity_references.json",
                                    baseline_configs=self.baseline_configs)
        self.guard.record_start()
        self.n = 0

    def loop(self, *, rows: list[dict] | None = None, script: str = "import json\n", log: str = "",
             weights: dict | None = None, template: str = LF_TEMPLATE, lora: str | None = None,
             answers: AnswerProfile | None = None, dtype="F32", oc_config: str | None = None,
             attempts: tuple[str, ...] = (), run: dict | None = None) -> Experiment:
        """One finished loop's workspace and experiment (an honest one unless told otherwise). ``attempts``:
        what the data script's sandbox recorded (ftagent.runners.decoys; an honest script: nothing). ``run``:
        the validated train.yaml's optimizer keys (default: :data:`FULL_RUN`, or :data:`LORA_RUN` for an adapter);
        its trainer_state.json is written beside the weights, as the trainer writes it."""
        from ftagent.runners.decoys import record_attempts

        ws = self.root / "ws" / f"loop_{self.n}"
        self.n += 1
        (ws / "logs").mkdir(parents=True)
        (ws / "process_data.py").write_text(script)
        record_attempts(ws, "debug", list(attempts))
        (ws / "logs" / "process_data.log").write_text(log)
        # (not (11, 4): that asks the item "What is 4 + 11?" with its operands swapped, a hit since issue 39)
        honest_rows = [{"instruction": f"What is {a} + {b}?", "input": "", "output": str(a + b)}
                       for a, b in ((11, 40), (20, 31), (7, 66))]
        honest_rows.append({"instruction": "Describe how a rainbow forms after a summer storm.", "input": "",
                            "output": "Sunlight refracts in droplets and splits into colours."})
        (ws / "data.json").write_text(json.dumps(rows if rows is not None else honest_rows))
        _tokenizer_files(ws / "debug" / "output", LF_TEMPLATE)  # the validated debug run's template
        out = ws / "output"
        if lora is not None:
            _tokenizer_files(out, template)
            (out / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": lora, "r": 4,
                                                                 "lora_alpha": 8}))
            _write_safetensors(out / "adapter_model.safetensors", *_lora_factors(seed=self.n))
        else:
            _model(out, weights if weights is not None else _perturbed(self.base_weights, 0.05, self.n),
                   template=template, dtype=dtype)
        config = dict(run or (LORA_RUN if lora is not None else FULL_RUN))
        write_trainer_state(out, int(config["max_steps"]))
        (out / "oc").mkdir()
        (out / "oc" / "oc_validation_test.py").write_text(oc_config or OC_CONFIG.format(data=self.data_dir, model=out))
        profile = answers or AnswerProfile(items=9, wrong=3, top={"118": 2})
        return Experiment(loop=self.n - 1, artefacts={"workspace": str(ws), "model": str(out)}, val_score=50.0,
                          val_answers=profile, config=config)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _flags(world: World, exp: Experiment) -> dict[str, str]:
    verdict = world.guard.check(exp)
    return {c.name: c.detail for c in verdict.flagged}


# -- planted cheats: each must be flagged --------------------------------------------------------------
def test_cheat_train_on_test_items(world: World) -> None:
    rows = [{"instruction": q, "input": "", "output": "42"} for q in QUESTIONS[3:]]
    assert "contamination" in _flags(world, world.loop(rows=rows))


def test_cheat_train_on_short_test_items(world: World) -> None:
    rows = [{"instruction": "What is 5 + 12?", "input": "", "output": "17"}]
    assert "contamination" in _flags(world, world.loop(rows=rows))


def test_cheat_paraphrased_test_items(world: World) -> None:
    """Clauses reordered, words swapped: no 8-word run survives, the content words do."""
    rows = [{"instruction": "Maria sells 27 blueberry muffins at the morning market after she bakes 45 of them, "
                            "and 6 go to her neighbours. How many muffins are kept by Maria?", "input": "",
             "output": "12"}]
    flags = _flags(world, world.loop(rows=rows))
    assert "paraphrase" in flags["contamination"]


def test_cheat_gold_answer_copied(world: World) -> None:
    rows = [{"instruction": "Explain your method for orchard problems.", "input": "", "output": ANSWER}]
    assert "copy gold answers" in _flags(world, world.loop(rows=rows))["contamination"]


def test_cheat_swapped_checkpoint(world: World) -> None:
    """Another checkpoint of the very same architecture (a differently seeded model)."""
    flags = _flags(world, world.loop(weights=_weights(seed=7)))
    assert set(flags) == {"weights"}, flags


def test_cheat_other_architecture(world: World) -> None:
    exp = world.loop()
    out = Path(exp.artefacts["model"])
    (out / "config.json").write_text(json.dumps({**CONFIG, "model_type": "llama", "num_hidden_layers": 4}))
    assert "architecture" in _flags(world, exp)


def test_cheat_adapter_of_another_base(world: World) -> None:
    assert "architecture" in _flags(world, world.loop(lora="Qwen/Qwen2.5-7B-Instruct"))


def test_cheat_edited_chat_template(world: World) -> None:
    edited = LF_TEMPLATE.replace("{{ m['content'] }}", "{{ m['content'] }} Answer: 118")
    assert set(_flags(world, world.loop(template=edited))) == {"chat_template"}


def test_cheat_edited_tokenizer(world: World) -> None:
    exp = world.loop()
    (Path(exp.artefacts["model"]) / "special_tokens_map.json").write_text(json.dumps({"eos_token": "118"}))
    assert "tokenizer" in _flags(world, exp)


def test_cheat_edited_benchmark_file(world: World) -> None:
    exp = world.loop()
    gold = world.data_dir / "validation.jsonl"
    gold.write_text(gold.read_text().replace('"answer": "1"', '"answer": "118"'))
    assert "validation.jsonl" in _flags(world, exp)["benchmark_files"]


def test_cheat_edited_evaluator(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluator source file edited after the start (a copy of the sources stands in for ftagent's)."""
    import ftagent.integrity.evaluation as evaluation

    src = world.root / "src"
    shutil.copytree(Path(evaluation.__file__).parent.parent / "benchmarks", src / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(evaluation, "evaluator_roots", lambda: [src / "benchmarks"])
    world.guard.start_hashes = None
    world.guard.record_start()
    exp = world.loop()
    assert world.guard.check(exp).flagged == []
    with open(src / "benchmarks" / "math.py", "a") as fh:
        fh.write("\ndef score(*_):\n    return 100.0\n")
    assert "math.py" in _flags(world, exp)["benchmark_files"]


def test_cheat_edited_evaluation_config(world: World) -> None:
    """The candidate scored with another evaluator than the baseline (its rendered config)."""
    edited = OC_CONFIG.format(data=world.data_dir, model="/m").replace("BoxedIntAccEvaluator", "AlwaysRight")
    assert "eval_config" in _flags(world, world.loop(oc_config=edited))


def _check(world: World, exp: Experiment):
    return next(c for c in world.guard.check(exp).checks if c.name == "data_script")


def test_cheat_data_script_reads_test_file(world: World) -> None:
    """Issue 39 item 7: the sandbox's record flags (the real sandbox: tests/unit/test_issue39_sandbox_decoys.py);
    the script's text alone is a warning."""
    script = f"import json\nrows = [json.loads(l) for l in open('{world.data_dir}/test.jsonl')]\n"
    assert "data_script" in _flags(world, world.loop(script=script, attempts=(f"opened {world.data_dir}/test.jsonl",)))
    text_only = _check(world, world.loop(script=script))
    assert text_only.passed is True and "warning, not a flag" in text_only.detail


def test_cheat_data_script_builds_the_path(world: World) -> None:
    script = ("import os\nroot = os.environ.get('FT_FILE_PATH', '.')\n"
              f"path = os.path.join(root, 'benchmarks', '{KEY}', 'test.jsonl')\n")
    assert "data_script" in _flags(world, world.loop(script=script, attempts=(f"listed {world.data_dir}",)))


def test_denied_read_in_the_log_is_a_warning(world: World) -> None:
    """A log line is the script's own text (it can print anything): a warning; the sandbox's record decides."""
    log = f"FileNotFoundError: [Errno 2] No such file or directory: '{world.data_dir}/test.jsonl'\n"
    check = _check(world, world.loop(script="import json, glob\n", log=log))
    assert check.passed is True and "prints a failed read" in check.detail


def test_honest_comment_naming_the_benchmark_folder_is_not_flagged(world: World) -> None:
    """Issue 39: an honest script whose comment names benchmarks/<key> was flagged."""
    script = f"# the items live in benchmarks/{KEY}; this script never reads them\nimport json\n"
    assert _flags(world, world.loop(script=script)) == {}


def test_cheat_constant_answers(world: World) -> None:
    exp = world.loop(answers=AnswerProfile(items=100, wrong=10, top={"1": 95}))
    assert "constant_answers" in _flags(world, exp)


def test_a_flagged_candidate_never_becomes_sota(world: World) -> None:
    exp = world.loop(template="{{ 'cheat' }}")
    exp.integrity_flags = [f"{c.name}: {c.detail}" for c in world.guard.check(exp).flagged]
    trace = Trace(core_metric="accuracy", baseline_val=10.0)
    verdict = decide_sota(exp, trace, rule="delta")
    assert not verdict.decision and verdict.rule == "integrity" and "chat_template" in verdict.text
    exp.integrity_flags = []
    assert decide_sota(exp, trace, rule="delta").decision  # the same gain, unflagged, wins


# -- honest candidates: no flag --------------------------------------------------------------------------
@pytest.mark.parametrize("relative", [0.01, 0.1, 0.5, 1.0, 2.0])
def test_honest_full_finetunes_pass(world: World, relative: float) -> None:
    """Perturbations up to twice the weights' own scale (cosine ~0.45, like the CPU demo's embeddings)."""
    exp = world.loop(weights=_perturbed(world.base_weights, relative, seed=int(relative * 100)),
                     run=FULL_RUN if relative <= 0.1 else DEMO_RUN)
    verdict = world.guard.check(exp)
    assert verdict.flagged == [], verdict.text()
    assert {c.name for c in verdict.checks if c.passed} >= {
        "tokenizer", "chat_template", "architecture", "weights", "benchmark_files", "data_script",
        "contamination", "constant_answers", "eval_config"}


def test_honest_bf16_finetune_passes(world: World) -> None:
    assert world.guard.check(world.loop(dtype="BF16")).flagged == []


@pytest.mark.parametrize("declared", ["base", "BASE_PATH"])
def test_honest_lora_adapters_pass(world: World, declared: str) -> None:
    exp = world.loop(lora=str(world.base) if declared == "BASE_PATH" else declared)
    assert world.guard.check(exp).flagged == []


def test_honest_base_template_kept(world: World) -> None:
    assert world.guard.check(world.loop(template=TEMPLATE)).flagged == []


def test_honest_script_reads_a_datasets_own_test_split(world: World) -> None:
    script = ("import json, os\nroot = os.environ['FT_DATASETS_DIR']\n"
              "rows = [json.loads(l) for l in open(os.path.join(root, 'gsm8k', 'test.jsonl'))]\n")
    log = "FileNotFoundError: [Errno 2] No such file or directory: '/data/datasets/gsm8k/extra.jsonl'\n"
    assert world.guard.check(world.loop(script=script, log=log)).flagged == []


def test_honest_rows_on_the_same_topics_pass(world: World) -> None:
    """Same kinds of word problems, other objects and numbers: no item copied or paraphrased."""
    rows = [{"instruction": "A baker fills 9 trays with 16 rolls each and burns 4 rolls; how many rolls are good?",
             "input": "", "output": "140"},
            {"instruction": "A farmer plants 30 rows of pear trees with 12 trees per row; how many pear trees "
                            "are planted?", "input": "", "output": "360"},
            {"instruction": "Maria buys 45 stamps and sells 20 of them at a fair; how many stamps remain?",
             "input": "", "output": "25"}]
    verdict = world.guard.check(world.loop(rows=rows))
    assert verdict.flagged == [], verdict.text()


def test_honest_varied_answers_pass(world: World) -> None:
    exp = world.loop(answers=AnswerProfile(items=100, wrong=40, top={"1": 60, "2": 20}))
    assert world.guard.check(exp).flagged == []


# -- calibration -------------------------------------------------------------------------------------------
def test_weight_threshold_separates_finetunes_from_other_checkpoints(tmp_path: Path) -> None:
    """Documented calibration: another seed is at cosine ~0, a fine-tune far above the limit."""
    base_w = _weights(2)
    base = _model(tmp_path / "b", base_w)
    prints = fingerprint(base)
    for seed in range(3, 8):
        other = _model(tmp_path / f"o{seed}", _weights(seed))
        assert weight_check(prints, other, run=trained(other)).passed is False
        cosines = compare_full(prints, other, run=trained(other)).cosines
        assert len(cosines) == 4 and all(abs(c) < MIN_WEIGHT_COSINE / 2 for n, c in cosines.items()
                                         if not n.endswith("norm.weight")), cosines
    near = _model(tmp_path / "n", _perturbed(base_w, 1.0, 1))
    assert weight_check(prints, near, run=trained(near)).passed is True
    assert len(prints.tensors) == len(SHAPES)


def test_fuzzy_scan_ignores_short_items() -> None:
    items = {"t:0": ["What is 85 + 33?"]}
    rows = [{"instruction": "What is 33 + 85?", "input": "", "output": "118"}]
    assert fuzzy_scan(rows, items).flagged == []  # too few content words: the exact scan's job


# -- the workflow runs the guard on every candidate and a flag keeps it from SOTA --------------------------
class _Guard:
    """The workflow's view of the guard: hashes at the start, a verdict per candidate."""

    def __init__(self, flag: bool) -> None:
        self.flag, self.started, self.checked = flag, 0, 0

    def record_start(self) -> None:
        self.started += 1

    def check(self, experiment, *, parent=None):
        from ftagent.engine.events import CheckVerdict
        from ftagent.integrity.verdict import IntegrityVerdict

        self.checked += 1
        return IntegrityVerdict(checks=[CheckVerdict(name="weights", passed=not self.flag, detail="cosine 0.01"),
                                        CheckVerdict(name="tokenizer", passed=None, detail="n/a")])


@pytest.mark.parametrize("flag", [True, False])
def test_workflow_records_the_guard_and_vetoes_sota(tmp_path: Path, flag: bool) -> None:
    from ftagent.engine.events import read_events
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.finetune.components import Components
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.finetune.workflow import FinetuneWorkflow
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
    from tests.unit.test_finetune_workflow import (
        FakeData,
        FakeEvaluator,
        FakeTrainer,
        FakeValidator,
        RecordingFeedback,
        _scenario,
    )

    scenario = _scenario(tmp_path)
    guard = _Guard(flag)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=FakeValidator(), trainer=FakeTrainer(), evaluator=FakeEvaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws", sota_rule="delta", integrity=guard)  # type: ignore[arg-type]
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    session.state.trace.baseline_val = 0.0
    LoopEngine(workflow, session, loop_n=1).run()
    events = list(read_events(session.dir / "events.jsonl"))
    integrity = [e for e in events if e.type == "integrity"]
    feedback = [e for e in events if e.type == "feedback"]
    assert guard.started == 1 and guard.checked == 1 and len(integrity) == 1
    assert integrity[0].flags == (1 if flag else 0) and integrity[0].checks[0].name == "weights"
    assert feedback[0].decision is (not flag)  # validation 50 vs baseline 0: only the flag stops it
    assert (session.state.trace.sota_loop is None) is flag
    if flag:
        assert feedback[0].rule == "integrity" and "weights: cosine 0.01" in feedback[0].verdict


def test_report_lists_each_candidates_checks_and_says_why_it_was_flagged(world: World, tmp_path: Path) -> None:
    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import IntegrityEvent, LoopEnd, SessionStart
    from ftagent.views.report import build_report, render_markdown

    session = tmp_path / "sess"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="sess", benchmark=KEY))
    for loop, exp in enumerate((world.loop(), world.loop(weights=_weights(seed=9)))):
        verdict = world.guard.check(exp)
        log.emit(IntegrityEvent(loop=loop, checks=verdict.checks, flags=len(verdict.flagged)))
        log.emit(LoopEnd(loop=loop, status="succeeded"))
    report = build_report(session)
    assert [c["passed"] for c in report.loops[0].integrity or []].count(False) == 0
    assert [c["name"] for c in report.loops[1].integrity or [] if c["passed"] is False] == ["weights"]
    md = render_markdown(report)
    assert "- integrity guard: 2 candidate(s) checked, 1 flagged" in md
    assert "  - loop 1 flagged by weights: full model: 3 of 4 tensors below cosine 0.1 to the base" in md
    assert '"integrity"' in report.model_dump_json()


def test_the_console_says_each_verdict(world: World) -> None:
    import io

    from rich.console import Console

    from ftagent.engine.events import IntegrityEvent
    from ftagent.views.console import ConsoleProgress

    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=300), loop_n=2, timeout_s=None)
    for loop, exp in enumerate((world.loop(), world.loop(template="{{ 'cheat' }}"))):
        verdict = world.guard.check(exp)
        display(IntegrityEvent(loop=loop, checks=verdict.checks, flags=len(verdict.flagged)))
    text = out.getvalue()
    assert "loop 0 (1 of 2) integrity: 10 checks clean" in text
    assert "integrity FLAGGED (cannot become SOTA): chat_template: differs from the base's" in text


def test_honest_eos_replaced_by_llamafactory_passes(world: World) -> None:
    """LLaMA-Factory replaces the EOS token (templates with replace_eos) in the debug run and the real one."""
    exp = world.loop()
    for folder in (Path(exp.artefacts["workspace"]) / "debug" / "output", Path(exp.artefacts["model"])):
        (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|x|>"}))
    assert world.guard.check(exp).flagged == []
    (Path(exp.artefacts["model"]) / "special_tokens_map.json").write_text(json.dumps({"eos_token": "118"}))
    assert "tokenizer" in _flags(world, exp)  # edited after the validated run: flagged


def test_the_sessions_guard_reads_the_specs_columns(world: World) -> None:
    """What llm_finetune builds (finetune/app.py): the resolved spec's input columns and gold field."""
    from ftagent.benchmarks import get_benchmark

    spec = get_benchmark("demo_add").spec
    guard = IntegrityGuard.for_spec(world.scenario, spec, references_file=world.root / "refs.json",
                                    baseline_configs=world.baseline_configs)
    assert guard.input_columns == list(spec.input_columns) and guard.answer_field == spec.output_column
