"""Experiment tracking (``FT_REPORT_TO``): one tracker run per loop, LLaMA-Factory's curves and ftagent's score.

* :func:`tracking_run` names the loop's run ``<session>-loop<n>``; for TensorBoard its event files go to
  ``LOG_PATH/<session>/tensorboard/loop_<n>`` (``tensorboard --logdir LOG_PATH/<session>/tensorboard``
  shows every loop of a session side by side). Unless the user points them elsewhere, MLflow keeps a
  local file store in ``LOG_PATH/<session>/mlruns`` (``mlflow ui --backend-store-uri ...``) and wandb
  runs offline into ``LOG_PATH/<session>/wandb`` (``wandb sync``): a tracker needs no server and no
  account, and a machine without network still trains (issue 32 item 3).
* :func:`check_at_start` starts the tracker once at a session's start-up, before anything is prepared
  (issue 43: a tracker that cannot start was found only at the first training, after the whole validate
  step, and the loop failed ``CONFIG``): exit 2 with the tracker's own words. :func:`check_tracker`
  starts it again before the first full training (with the session's own store): a failure there is one
  CONFIG step error naming its cause, not a training run that fails in transformers' callback as UNKNOWN.
* A user's own store is used as given: ``MLFLOW_TRACKING_URI`` naming a file store (``file:…`` or a plain
  path, as MLflow reads it) gets ``MLFLOW_ALLOW_FILE_STORE=true`` (MLflow 3 refuses a file store without it)
  and the default experiment, a relative path is taken from ftagent's working directory (not the
  training's), and its folder is mounted writable like the default one; ``WANDB_DIR`` likewise.
* :func:`config_overrides` is what the trainer adds to the *full* run's config only (``report_to``,
  ``run_name``, ``logging_dir``): the micro-batch run of the validator stays ``report_to: none``, so a
  tracker sees one run per loop, not one per validation round.
* :func:`tracker_env` hands the tracker's own variables (``WANDB_*``, ``MLFLOW_*``, secrets included) to
  the training command and the score logger only: the runners pass no such variable on their own
  (``passthrough_env``), so data scripts written by the planner never see ``WANDB_API_KEY``. The values
  go into the child's environment only, never into a config, an event or a snapshot.
* :func:`log_scores` writes ftagent's validation score into the same run after evaluation, by
  ``tracking_script.py`` run in the tool env (the tracker libraries and torch live there, not in ftagent's env). The test
  split's score is not logged: a tracker is where people pick runs, and picking by the held-out score
  would make it a second validation set; it stays in the report.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from ftagent.core.errors import UserInputError
from ftagent.runners.base import Mount, Runner, RunResult
from ftagent.runners.scrubbed import run_scrubbed

if TYPE_CHECKING:
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState

ReportTo = Literal["none", "tensorboard", "wandb", "mlflow"]
_ENV_PREFIXES = {"wandb": ("WANDB_",), "mlflow": ("MLFLOW_",), "tensorboard": ()}


class TrackingRun(BaseModel):
    """The tracker run of one loop's full training."""

    report_to: ReportTo
    run_name: str
    logging_dir: str  # TensorBoard event files (LLaMA-Factory's and ftagent's scalars)
    store_dir: str = ""  # the tracker's own files by default: the MLflow file store, wandb's offline runs


def run_name_of(session_id: str, loop: int | None) -> str:
    """``<session>-loop<n>``, reduced to the characters every tracker accepts in run names and ids."""
    name = f"{session_id}-loop{loop}" if loop is not None else session_id
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:128]


def mlflow_file_store(uri: str | None) -> Path | None:
    """The folder of an MLflow file store URI, else None (a server, a database, nothing given).

    MLflow reads an empty scheme and ``file:`` as its file store (``mlflow/tracking/_tracking_service/utils.py``:
    ``_tracking_store_registry.register("", _get_file_store)`` and ``"file"``; the path by
    ``mlflow.utils.file_utils.local_file_uri_to_path``). A relative path is made absolute here, from ftagent's
    working directory: the training process runs in the loop's workspace.
    """
    from urllib.parse import unquote, urlparse

    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    path = unquote(parsed.path) if parsed.scheme == "file" else uri
    return Path(path).expanduser().absolute() if path else None


def _user_store(report_to: str, source: dict[str, str]) -> Path | None:
    """The tracker's own folder the user chose (a file store ``MLFLOW_TRACKING_URI``, ``WANDB_DIR``), else None."""
    if report_to == "mlflow":
        return mlflow_file_store(source.get("MLFLOW_TRACKING_URI"))
    if report_to == "wandb" and source.get("WANDB_DIR"):
        return Path(source["WANDB_DIR"]).expanduser().absolute()
    return None


def tracking_run(report_to: str, workspace: Path, ctx: StepContext[SessionState] | None) -> TrackingRun | None:
    """The loop's run (None when tracking is off). Without a step context (a trainer used on its own)
    the run is named after the workspace and logs under it."""
    if report_to == "none":
        return None
    if ctx is not None:
        loop = ctx.loop.index
        name = run_name_of(ctx.state.session_id, loop)
        logging_dir = Path(ctx.session.dir) / "tensorboard" / f"loop_{loop}"
        root = Path(ctx.session.dir)
    else:
        name = run_name_of(Path(workspace).name, None)
        logging_dir = Path(workspace) / "tensorboard"
        root = Path(workspace)
    store = _user_store(report_to, dict(os.environ)) or {"mlflow": root / "mlruns", "wandb": root / "wandb"}.get(
        report_to, logging_dir)
    return TrackingRun(report_to=report_to, run_name=name, logging_dir=str(Path(logging_dir).absolute()),
                       store_dir=str(Path(store).absolute()))


CONFIG_KEYS = ("report_to", "run_name", "logging_dir")  # what a tracked full run sets (the config prompt lists them)


def config_overrides(run: TrackingRun | None) -> dict[str, str]:
    """LLaMA-Factory keys of a tracked full run (:data:`CONFIG_KEYS`)."""
    if run is None:
        return {}
    return {key: getattr(run, key) for key in CONFIG_KEYS}


def tracker_env(run: TrackingRun | None, source: dict[str, str] | None = None) -> dict[str, str]:
    """The tracker's variables from ``source`` (default ``os.environ``) for the training process.

    For wandb the run id is the run name (``WANDB_RUN_ID``), so :func:`log_scores` can reopen the run.
    Defaults where the user set nothing: MLflow's local file store under the session
    (``MLFLOW_TRACKING_URI=file:...``; MLflow 3 refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE`` is
    set, mlflow ``store/tracking/file_store.py``; experiment ``ftagent``), wandb offline (``WANDB_MODE=offline`` unless a
    ``WANDB_API_KEY`` is given) with its files under the session (``WANDB_DIR``).
    """
    if run is None:
        return {}
    source = dict(os.environ) if source is None else source
    env = {k: v for k, v in source.items() if k.startswith(_ENV_PREFIXES[run.report_to])}
    if run.report_to == "wandb":
        env.setdefault("WANDB_RUN_ID", run.run_name)
        env["WANDB_DIR"] = run.store_dir  # ours, or the user's WANDB_DIR made absolute (the training runs elsewhere)
        if not env.get("WANDB_API_KEY"):
            env.setdefault("WANDB_MODE", "offline")
    elif run.report_to == "mlflow" and ("MLFLOW_TRACKING_URI" not in env
                                        or mlflow_file_store(env["MLFLOW_TRACKING_URI"]) is not None):
        # ours under the session, or the user's file store (issue 43: a user's file: URI got no
        # MLFLOW_ALLOW_FILE_STORE, and MLflow 3 refused it at the first training)
        env["MLFLOW_TRACKING_URI"] = Path(run.store_dir).as_uri()
        env.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        # a named experiment: transformers' callback creates it (set_experiment); the store's folder exists
        # already (a mount), and MLflow's FileStore creates its "Default" experiment only in a new folder
        env.setdefault("MLFLOW_EXPERIMENT_NAME", "ftagent")
    return env


def tracker_mounts(run: TrackingRun | None) -> list[Mount]:
    """The writable folders a tracked run needs besides the workspace (TensorBoard's log dir)."""
    if run is None:
        return []
    folders = dict.fromkeys([Path(run.logging_dir), Path(run.store_dir or run.logging_dir)])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return [Mount(source=folder, read_only=False) for folder in folders]


SCRIPT = Path(__file__).with_name("tracking_script.py")


def score_scalars(core_metric: str, score: float | None, baseline: float | None = None) -> dict[str, float]:
    """The scalars ftagent adds to a loop's run: the validation core metric (and the baseline's)."""
    out: dict[str, float] = {}
    if score is not None:
        out[f"ftagent/validation/{core_metric}"] = float(score)
    if baseline is not None:
        out[f"ftagent/baseline_validation/{core_metric}"] = float(baseline)
    return out


def check_tracker(run: TrackingRun, runner: Runner, *, workdir: Path, log_file: Path,
                  timeout: float = 300.0) -> str | None:
    """Start the tracker the way the training will (its library, its store, its mode) and stop it.

    Returns None when it starts, else its cause (the script's last error line), for a CONFIG error.
    """
    cmd = ["python", str(SCRIPT), "check", run.report_to, run.run_name, run.logging_dir]
    result = run_scrubbed(runner, cmd, tree=Path(workdir), tool="train", workdir=workdir, env=tracker_env(run),
                          mounts=[Mount(source=SCRIPT.parent), Mount(source=Path(workdir), read_only=False),
                                  *tracker_mounts(run)],
                          timeout=timeout, log_file=log_file)
    if result.ok:
        return None
    text = Path(result.log_file).read_text(encoding="utf-8", errors="replace") if result.log_file else ""
    return exception_words(text) or f"exit code {result.exit_code}"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*")


def exception_words(log: str, limit: int = 500) -> str:
    """The last exception a Python log shows, in its own words: its ``Type: message`` line and the lines of
    the message below it (a pydantic error names the field and the allowed values there), joined into one
    line; else the last line that mentions an error."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if _EXCEPTION_LINE.match(ln)]
    if starts:
        words = " ".join(lines[starts[-1]:starts[-1] + 6])
    else:
        words = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), lines[-1] if lines else "")
    return words[:limit]


def check_at_start(report_to: str, runner: Runner, timeout: float = 180.0) -> str | None:
    """Start the tracker of ``FT_REPORT_TO`` once at a session's start-up; None when it starts (or is off),
    else its own last error line.

    The user's own store is checked as it will be used; the default one (under the session, which does not
    exist yet) in a scratch folder that is removed afterwards: nothing is written under ``LOG_PATH``.
    """
    import tempfile

    if report_to == "none":
        return None
    with tempfile.TemporaryDirectory(prefix="ftagent-tracker-check-") as scratch:
        root = Path(scratch)
        store = _user_store(report_to, dict(os.environ)) or root / ("mlruns" if report_to == "mlflow" else "wandb")
        run = TrackingRun(report_to=report_to, run_name="ftagent-start-check",
                          logging_dir=str(root / "tensorboard"), store_dir=str(store))
        try:
            return check_tracker(run, runner, workdir=root, log_file=root / "tracker_check.log", timeout=timeout)
        except OSError as exc:  # the user's store folder cannot be created (tracker_mounts)
            return f"{type(exc).__name__}: {exc}"


def require_tracker(report_to: str, runner: Runner) -> None:
    """A session's start-up: ``FT_REPORT_TO``'s tracker starts, or the session does not (issue 43: it was found
    at the first training).

    Raises:
        UserInputError: it cannot start (exit 2), with its own last error line.
    """
    cause = check_at_start(report_to, runner)
    if cause is not None:
        raise UserInputError(f"FT_REPORT_TO={report_to}: the tracker cannot start: {cause}. Fix its settings (its "
                             "own variables: MLFLOW_*, WANDB_*), install it in the tool env (`ftagent env setup`), "
                             "or set FT_REPORT_TO=none")


def log_scores(run: TrackingRun, scalars: dict[str, float], step: int, runner: Runner, *, workdir: Path,
               log_file: Path, timeout: float = 300.0) -> RunResult:
    """Write ``scalars`` at ``step`` (the run's last training step) into the loop's tracker run."""
    cmd = ["python", str(SCRIPT), run.report_to, run.run_name, run.logging_dir, str(int(step)), json.dumps(scalars)]
    return run_scrubbed(runner, cmd, tree=Path(workdir), tool="train", workdir=workdir, env=tracker_env(run),
                        mounts=[Mount(source=SCRIPT.parent), Mount(source=Path(workdir), read_only=False),
                                *tracker_mounts(run)],
                        timeout=timeout, log_file=log_file)
