"""Log ftagent's scores into a loop's tracker run; run in the tool env by :mod:`ftagent.tools.llamafactory.tracking`.

``python tracking_script.py REPORT_TO RUN_NAME LOGGING_DIR STEP JSON_SCALARS``. A script, not an import of
ftagent: the tracker libraries (and torch, for TensorBoard's writer) live in the tool env only.
``python tracking_script.py check REPORT_TO RUN_NAME LOGGING_DIR``: import the tracker and open its store
as the training's callback will (exit 1 with the cause when it cannot), logging nothing.

* tensorboard: a second event file in the run's ``logging_dir`` (the one LLaMA-Factory's
  ``TensorBoardCallback`` writes), so the scores show in the same run as the loss;
* wandb: reopens the run by its id (``WANDB_RUN_ID``, set by ftagent for the training process);
* mlflow: finds the run by its name in ``MLFLOW_EXPERIMENT_NAME`` (transformers' ``MLflowCallback``
  names it ``run_name``) and logs the metrics to it.
"""

import json
import os
import sys


def check(report_to: str) -> int:
    """The tracker can start: its library imports and its store opens (nothing is logged)."""
    if report_to == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    elif report_to == "wandb":
        import wandb

        wandb.Settings(mode=os.environ.get("WANDB_MODE") or "online")  # a bad WANDB_MODE fails here
        if getattr(wandb, "run", "missing") == "missing":  # what transformers' is_wandb_available checks
            raise ImportError("wandb imports but is incomplete (no wandb.run)")
    elif report_to == "mlflow":
        import mlflow

        mlflow.MlflowClient().search_experiments(max_results=1)  # opens the store
        if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])  # as transformers' callback will
    else:
        print(f"unknown tracker {report_to!r}", file=sys.stderr)
        return 2
    print("tracker", report_to, "can start", flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Write the scalars; exit 2 on a malformed command line."""
    if len(argv) == 4 and argv[0] == "check":
        return check(argv[1])
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    report_to, run_name, logging_dir, step, scalars = argv[0], argv[1], argv[2], int(argv[3]), json.loads(argv[4])
    if report_to == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=logging_dir, filename_suffix=".ftagent")
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, global_step=step)
        writer.close()
    elif report_to == "wandb":
        import wandb

        run = wandb.init(project=os.environ.get("WANDB_PROJECT", "huggingface"), id=os.environ["WANDB_RUN_ID"],
                         name=run_name, resume="allow")
        run.log({**scalars, "train/global_step": step})
        run.summary.update(scalars)
        run.finish()
    elif report_to == "mlflow":
        import mlflow

        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "Default")
        found = mlflow.search_runs(experiment_names=[experiment], filter_string=f"tags.mlflow.runName = '{run_name}'",
                                   order_by=["start_time DESC"], max_results=1, output_format="list")
        with mlflow.start_run(run_id=found[0].info.run_id if found else None, run_name=None if found else run_name):
            for tag, value in scalars.items():
                mlflow.log_metric(tag.replace("/", "_"), value, step=step)
    else:
        print(f"unknown tracker {report_to!r}", file=sys.stderr)
        return 2
    print("logged", sorted(scalars), "to", report_to, run_name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
