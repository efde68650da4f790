"""What the config prompt says of the rows a config trains on before its data exists (the data script runs after
the config is written, in the validate step)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftagent.core.types import Hypothesis, ScenarioInfo

WHY_UNKNOWN = ("the data script is written with this config and runs after it, in the validate step (its debug run, "
               "then the full run); a later round of this config, if any, shows the debug run's rows and token lengths")


def unknown_data_words(scenario: ScenarioInfo, hypothesis: Hypothesis) -> str:
    """The rows this config trains on before its data exists: the count the proposal plans (issue 43: the prompt
    said "Rows: not known yet" where the task fixed 2,000), else the cap and the raw data (issue 35: the planner
    could not compute steps per epoch)."""
    from ftagent.datasets.catalogue import read_catalogue

    cap = scenario.upper_data_size_limit
    if hypothesis.rows is not None:
        kept = min(hypothesis.rows, cap)
        capped = f" (the proposal planned {hypothesis.rows:,}; at most {cap:,} are kept)" if hypothesis.rows > cap else ""
        return f"- Rows: {kept:,}, as the proposal plans{capped}; {WHY_UNKNOWN}."
    catalogue = read_catalogue(Path(scenario.dataset_root)) if scenario.dataset_root else {}
    raw = [f"`{n}` {catalogue[n].total_samples:,} rows" for n in scenario.datasets if n in catalogue]
    return (f"- Rows: at most {cap:,} (larger outputs are sampled down); the proposal names no count"
            + (f"; the raw data holds {', '.join(raw)}" if raw else "; no raw dataset (generated data only)")
            + f". Size the run for the rows the experiment plans (or set max_steps); {WHY_UNKNOWN}.")
