"""Data processing around the generated ``process_data.py``: debug/full runs, reuse, size cap, and the
contamination scan against the benchmark's validation and test items (which stay in ftagent's own
process: generated code never sees them)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.trace import Trace
from ftagent.core.types import CodeResult, Hypothesis, ScenarioInfo
from ftagent.core.untrusted import UnsafeEntry, read_bytes
from ftagent.engine.events import Message
from ftagent.runners.base import Mount, Runner

DATA_FILE = "data.json"
#: the largest data.json ftagent reads (16 GiB: far above what a fine-tuning run trains on in one loop)
MAX_DATA_BYTES = 16 << 30


class DataProcessor:
    """Runs ``process_data.py`` for the debug round (validate) and the full run (train)."""

    def __init__(self, scenario: ScenarioInfo, settings: Any, runner: Runner, *,
                 input_columns: list[str], answer_column: str, llm_gateway_url: str | None = None,
                 llm_gateway_token: str | None = None) -> None:
        """Create the data step.

        Args:
            scenario: the session's scenario (dataset root, benchmark, size cap).
            settings: all settings (model pools, worker count, time limits).
            runner: runs ``process_data.py``.
            llm_gateway_url: the session's loopback LLM gateway (``http://127.0.0.1:<port>/v1``); None =
                the script gets no LLM at all. The real key and base URL never reach the script.
            llm_gateway_token: the per-session token the gateway accepts.
            input_columns: the benchmark's input columns (the resolved spec's), which the contamination
                scan compares.
            answer_column: the benchmark's gold answer column (the resolved spec's ``output_column``): the
                scan's numeric match is an item's numbers and its gold (:mod:`ftagent.datasets.numeric_scan`).
        """
        self.scenario = scenario
        self.settings = settings
        self.runner = runner
        self.llm_gateway_url = llm_gateway_url
        self.llm_gateway_token = llm_gateway_token
        self.input_columns = input_columns
        self.answer_column = answer_column
        self._bench_items: dict[str, list[str]] | None = None
        self._bench_answers: dict[str, str] = {}

    def script_env(self) -> dict[str, str]:
        """What a data script may see: dataset path, model pools, worker count, and the gateway's URL and
        token under the OpenAI SDK's names (never the real key or base URL)."""
        ft, llm = self.settings.ft, self.settings.llm
        env = {"FT_DATASETS_DIR": self.scenario.dataset_root or "",
               "STRONG_MODEL_POOL": json.dumps(ft.strong_models), "WEAK_MODEL_POOL": json.dumps(ft.weak_models),
               "EMBEDDING_MODEL": llm.embedding_model, "FT_API_MAX_WORKERS": str(ft.api_max_workers)}
        tokenizer = self._tokenizer_dir()
        if tokenizer is not None:
            env["FT_TOKENIZER_DIR"] = str(tokenizer)
        if self.llm_gateway_url and self.llm_gateway_token:
            env.update(OPENAI_API_BASE=self.llm_gateway_url, OPENAI_BASE_URL=self.llm_gateway_url,
                       OPENAI_API_KEY=self.llm_gateway_token)
        return env

    def prepare(self, code: CodeResult, hypothesis: Hypothesis, trace: Trace, ctx, *, debug: bool) -> int:
        """Produce ``data.json`` in the workspace (or reuse the parent's) and check it; returns its rows.

        Raises:
            StepError: DATA/TIMEOUT from the script, the size cap or the contamination scan.
        """
        workspace = Path(code.workspace)
        if hypothesis.skip_data_processing and self._reuse_parent(hypothesis, trace, workspace):
            ctx.emit(Message(text=f"reusing data.json of loop {hypothesis.parent} (skip_data_processing)"))
        else:
            self.run_script(workspace, ctx, debug=debug)
        rows = self._load(workspace)
        if not debug:
            rows = self._cap(rows, workspace, ctx)
        self._scan(rows, ctx, "data.json (debug)" if debug else "data.json")
        return len(rows)

    def run_script(self, folder: Path, ctx: Any, *, debug: bool) -> None:
        """``process_data.py`` in ``folder`` through the runner, with the data scripts' environment, read-only
        mounts (datasets, tokenizer) and the sandbox and decoys of every data script (:meth:`_run_watched`)."""
        ft = self.settings.ft
        limit = ft.debug_data_processing_timeout if debug else ft.data_processing_timeout
        mounts = [Mount(source=Path(self.scenario.dataset_root))] if self.scenario.dataset_root else []
        tokenizer = self._tokenizer_dir()
        if tokenizer is not None:  # read-only, so that the script counts tokens as the model does
            mounts.append(Mount(source=tokenizer))
        self._run_watched(Path(folder), ctx, ctx.limit(limit), debug=debug, mounts=mounts)

    def forbidden(self) -> list[Path]:
        """What a data script must not read: benchmark items, saved predictions, logs (see :mod:`ftagent.runners.decoys`)."""
        from ftagent.core.paths import baselines_dir, benchmarks_dir, eval_cache_dir

        file_path = Path(self.scenario.file_path or ".").absolute()
        paths = getattr(self.settings, "paths", None)
        logs = [Path(paths.log_path).absolute()] if paths is not None and getattr(paths, "log_path", None) else []
        return [benchmarks_dir(file_path), baselines_dir(file_path), eval_cache_dir(file_path),
                Path(self.scenario.workspace_root).absolute(), *logs]

    def _run_watched(self, workspace: Path, ctx: Any, timeout: float, *, debug: bool, mounts: list[Mount]) -> None:
        """The script under the sandbox, with decoys of :meth:`forbidden` where the runner confines it; what
        it tried to read is recorded outside the workspace (:func:`record_attempts`) and said in a warning."""
        from ftagent.runners.decoys import Decoys, record_attempts
        from ftagent.tools.llamafactory.trainer import run_data_processing

        if getattr(self.runner, "sandboxed", False) is not True:  # unconfined: nothing to detect (or docker's own)
            run_data_processing(workspace, self.runner, timeout, debug=debug, env=self.script_env(), mounts=mounts)
            return
        _set_aside_old_output(workspace)
        tools = getattr(self.runner, "tools_env", None)
        bound = [workspace, *(m.source for m in mounts), *([Path(tools)] if tools else [])]
        decoys = Decoys(self.forbidden(), bound=bound, workdir=workspace)
        try:
            decoys.__enter__()
        except OSError as exc:  # no inotify here: the folders stay invisible, attempts go unrecorded
            if ctx is not None:
                ctx.emit(Message(level="warning", text=f"sandbox decoys unavailable ({exc}): a data script's "
                                                       "reads of forbidden folders are not recorded"[:500]))
            run_data_processing(workspace, self.runner, timeout, debug=debug, env=self.script_env(), mounts=mounts)
            return
        try:
            run_data_processing(workspace, self.runner, timeout, debug=debug, env=self.script_env(),
                                mounts=[*mounts, *decoys.mounts])
        finally:  # a script that failed after an attempt is recorded too
            decoys.__exit__(None, None, None)
            record_attempts(workspace, "debug" if debug else "full", decoys.attempts)
        if decoys.attempts and ctx is not None:
            ctx.emit(Message(level="warning", text=f"process_data.py{' --debug' if debug else ''} tried to read "
                                                   f"outside its sandbox: {'; '.join(decoys.attempts[:3])}"[:500]))

    def _tokenizer_dir(self) -> Path | None:
        """The base model's folder (its tokenizer files) when it exists on this machine."""
        path = getattr(self.scenario, "base_model_path", None)
        return Path(path).absolute() if path and Path(path).is_dir() else None

    def _reuse_parent(self, hypothesis: Hypothesis, trace: Trace, workspace: Path) -> bool:
        """Copy the parent's training data: the data it trained on (its frozen ``data/loop_<n>/data.json``,
        checked against the hash recorded when it trained), else its workspace's ``data.json``; never the data
        of a stage with another row format (issue 40: SFT rows for a DPO loop)."""
        from ftagent.core.stage_specs import stage_spec

        parent = trace.get(hypothesis.parent) if hypothesis.parent is not None else None
        if parent is not None and parent.hypothesis is not None and (
                stage_spec(parent.hypothesis.stage).data != stage_spec(hypothesis.stage).data):
            return False  # the script writes this stage's rows
        if parent is None:
            return False
        if parent.approved is not None and parent.approved.data is not None:
            changed = parent.approved.data.changes()
            if changed:
                raise StepError(f"the data of loop {parent.loop} changed since it trained on it: {'; '.join(changed)}",
                                error_type=ErrorType.ENV, suggestion="Process the data again (skip_data_processing "
                                                                      "false).")
            src = parent.approved.data_file
        else:
            src = Path(parent.artefacts.get("workspace", "")) / DATA_FILE
        if not src.is_file() or src.parent == workspace:
            return False
        (workspace / DATA_FILE).write_bytes(read_bytes(src.parent, src.name, limit=MAX_DATA_BYTES))
        return True

    def _load(self, workspace: Path) -> list[dict]:
        try:  # written by the data script: read without following a link, bounded (issue 39 item 1)
            rows = json.loads(read_bytes(workspace, DATA_FILE, limit=MAX_DATA_BYTES).decode("utf-8"))
        except UnicodeDecodeError as exc:  # a ValueError, not a JSONDecodeError: once an UNKNOWN failure
            raise StepError(f"data.json is not valid UTF-8 (byte {exc.start}: {exc.reason}); write it with "
                            "encoding='utf-8' (json.dump(..., ensure_ascii=False) into a file opened so)",
                            error_type=ErrorType.DATA) from exc
        except UnsafeEntry as exc:
            raise StepError(f"data.json: {exc.strerror}", error_type=ErrorType.DATA,
                            suggestion="Write data.json as a regular file in the current directory (no link).") from exc
        except (OSError, json.JSONDecodeError) as exc:
            raise StepError(f"data.json is not readable JSON: {exc}", error_type=ErrorType.DATA) from exc
        if not isinstance(rows, list):
            raise StepError("data.json must be a JSON list of Alpaca rows", error_type=ErrorType.DATA)
        return rows

    def _cap(self, rows: list[dict], workspace: Path, ctx) -> list[dict]:
        cap = self.scenario.upper_data_size_limit
        if len(rows) <= cap:
            return rows
        kept = random.Random(0).sample(rows, cap)
        tmp = workspace / (DATA_FILE + ".tmp")
        tmp.write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, workspace / DATA_FILE)
        ctx.emit(Message(level="warning", text=f"data.json had {len(rows)} rows; sampled {cap} "
                                               "(FT_UPPER_DATA_SIZE_LIMIT)"))
        return kept

    def scan(self, rows: list[dict], ctx: Any = None, dataset: str = "data.json") -> None:
        """The contamination scan of ``rows`` (:meth:`_scan`): data.json, and the sampling step's prompts."""
        self._scan(rows, ctx, dataset)

    def _scan(self, rows: list[dict], ctx: Any = None, dataset: str = "data.json") -> None:
        """The contamination scan; its result is a ``contamination`` event whether it passes or not (issue 35).

        Every row is read as LLaMA-Factory trains it (:mod:`ftagent.datasets.trained_text`: system, history,
        instruction + input, and every answer: ``output``, a pair's ``chosen`` and ``rejected``); flagged rows are
        named by their index in ``rows``."""
        from ftagent.datasets.contamination import check_contamination
        from ftagent.engine.events import ContaminationScan

        if not self._items():
            return
        items = self._items()
        event = ContaminationScan(dataset=dataset, rows_checked=len(rows), items_checked=len(items))
        try:
            check_contamination(rows, items, answers=self._bench_answers)
        except StepError as exc:
            details = exc.details or {}
            event = event.model_copy(update={"flagged_rows": details.get("flagged_rows", 0), "passed": False,
                                             "examples": details.get("examples", []),
                                             "input_spaces": details.get("input_spaces", [])})
            raise
        finally:
            if ctx is not None:
                ctx.emit(event)

    def _items(self) -> dict[str, list[str]]:
        """The benchmark's validation and test items (and their gold answers), read once."""
        if self._bench_items is None:
            self._bench_items = benchmark_items(self.scenario, self.input_columns)
            self._bench_answers = benchmark_answers(self.scenario, self.answer_column)
        return self._bench_items

    def scan_config(self, config_path: Path) -> None:
        """The validated train.yaml's ``default_system`` (LLaMA-Factory renders it in every training prompt whose
        row has no ``system``, and a template that writes its Jinja puts it in every evaluation prompt) against
        the items, like a row's ``system``. ``config_path``: written by ftagent (validation's frozen copy).

        Raises:
            StepError: DATA, naming the item id only.
        """
        import yaml

        from ftagent.datasets.contamination import scan_system_texts

        config = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) if Path(config_path).is_file() else {}
        text = str((config or {}).get("default_system") or "") if isinstance(config, dict) else ""
        hits = scan_system_texts([text], self._items(), self._bench_answers) if text and self._items() else []
        if hits:
            raise StepError(f"train.yaml's default_system holds benchmark item {hits[0].item_id}",
                            error_type=ErrorType.DATA, suggestion="drop default_system or write one without "
                            "benchmark questions or answers: it is in every training and evaluation prompt",
                            details={"examples": [o.model_dump(exclude={"row_excerpt"}) for o in hits[:3]]})


REPLACED_DIR = ".replaced"  # beside the loop workspaces: earlier runs' outputs of a loop run again


def _set_aside_old_output(workspace: Path) -> None:
    """A loop run again (a resume from an earlier step) still holds its earlier run's ``output/`` -- the model
    and its evaluation: validation (selection part included) and test predictions. The data script's
    sandbox binds the workspace, so that folder is moved out of it first, beside the loop workspaces
    (``WORKSPACE_PATH/<session>/.replaced/<loop>-<time>``), where no sandbox looks (issue 39 item 5)."""
    import time

    old = workspace / "output"
    if old.is_dir() and not old.is_symlink():
        dest = workspace.parent / REPLACED_DIR / f"{workspace.name}-{time.strftime('%Y%m%d_%H%M%S')}-{os.getpid()}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(old, dest)


def benchmark_items(scenario: ScenarioInfo, input_columns: list[str]) -> dict[str, list[str]]:
    """The input fields (question first) of the benchmark's validation and test items, keyed by
    ``subset/split:index``."""
    return items_of(scenario.items_root() / scenario.benchmark, input_columns)


def benchmark_answers(scenario: ScenarioInfo, answer_column: str) -> dict[str, str]:
    """The gold answers of :func:`benchmark_items`, keyed the same."""
    from ftagent.benchmarks.frozen import scan_answers

    return scan_answers(scenario.items_root() / scenario.benchmark, answer_column)


def benchmark_items_for(benchmark: str, file_path: Path, input_columns: list[str]) -> dict[str, list[str]]:
    """:func:`benchmark_items` before a scenario exists (a user's training file is scanned at start-up).

    ``input_columns``: the resolved benchmark spec's.
    """
    from ftagent.core.paths import benchmark_data_dir

    return items_of(benchmark_data_dir(file_path, benchmark), input_columns)


def items_of(root: Path, input_columns: list[str]) -> dict[str, list[str]]:
    """:func:`benchmark_items` of one prepared benchmark folder (a session's frozen copy, or the shared one)."""
    from ftagent.benchmarks.frozen import scan_items

    return scan_items(root, input_columns)


def keyed_items(where: str, split: str, rows: list[dict], input_columns: list[str]) -> dict[str, list[str]]:
    """The scan's items of one split file's rows: ``<where>/<split>:<index>`` → the input fields.

    ``where``: the folder of the split file (the benchmark's key for its merged ``<split>.jsonl``).
    """
    from ftagent.benchmarks.frozen import keyed_items as keyed

    return keyed(where, split, rows, input_columns)
