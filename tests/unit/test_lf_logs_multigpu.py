"""Issue 30 finding 4: a failed multi-GPU (torchrun) run is classified by the failing rank's own error.

Fixtures: real logs from public LLaMA-Factory / NCCL issues (sources in the fixtures' README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType
from ftagent.tools.llamafactory.logs import classify_failure, relevant_lines, split_launcher

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory" / "logs" / "multigpu"


@pytest.mark.parametrize(("name", "expected", "message_has"), [
    ("oom_rank5_lf9510.log", ErrorType.OOM, "CUDA out of memory"),
    ("nccl_watchdog_timeout_lf6269.log", ErrorType.ENV, "Watchdog caught collective operation timeout"),
    ("config_processor_lf8799.log", ErrorType.CONFIG, "ValueError: Processor was not found"),
    ("data_no_samples_lf8323.log", ErrorType.DATA, "Cannot find valid samples"),
    ("host_oom_sigkill_lf1235.log", ErrorType.OOM, "SIGKILL"),
])
def test_real_torchrun_failures_read_the_rank_not_the_wrapper(name: str, expected: ErrorType,
                                                              message_has: str) -> None:
    log = (LOGS / name).read_text(encoding="utf-8")
    info = classify_failure(log, exit_code=1)
    assert info.error_type is expected, info
    assert message_has in info.message
    assert "CalledProcessError" not in info.message and "ChildFailedError" not in info.message
    # the lines the planner sees are the rank's, not the launcher's traceback
    assert "CalledProcessError" not in info.log_tail and "ChildFailedError" not in info.log_tail
    if expected is not ErrorType.OOM or "SIGKILL" not in message_has:
        assert message_has.split(": ")[-1] in info.log_tail


def test_one_rank_oom_beats_the_other_ranks_nccl_timeouts() -> None:
    oom = (LOGS / "oom_rank5_lf9510.log").read_text(encoding="utf-8").splitlines()[0]
    nccl = (LOGS / "nccl_watchdog_timeout_lf6269.log").read_text(encoding="utf-8")
    body, wrapper = split_launcher(nccl)
    log = oom + "\n" + body + "\n" + wrapper  # rank 5 died first, the others then timed out waiting for it
    assert classify_failure(log, exit_code=1).error_type is ErrorType.OOM


def test_root_cause_summary_kept_and_single_process_logs_unchanged() -> None:
    tail = relevant_lines((LOGS / "host_oom_sigkill_lf1235.log").read_text(encoding="utf-8"))
    assert "exitcode  : -9" in tail and "rank      : 4" in tail
    single = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value for lr\n"
    assert split_launcher(single) == (single, "")
    assert classify_failure(single, exit_code=1).error_type is ErrorType.CONFIG


def test_through_the_trainer_a_rank_oom_is_oom_with_the_batch_advice(tmp_path) -> None:
    from tests.unit.test_trainer_failures import FailingRunner, _train

    err = _train(tmp_path, FailingRunner((LOGS / "oom_rank5_lf9510.log").read_text(encoding="utf-8"), exit_code=1))
    assert err.error_type is ErrorType.OOM and "CUDA out of memory" in str(err)
    assert "per_device_train_batch_size" in err.suggestion
    assert "[rank6]" in err.log_tail and "CalledProcessError" not in err.log_tail
