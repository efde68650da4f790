"""Training failures through the trainer's own path (LlamaFactoryTrainer.train with a runner that fails
as LLaMA-Factory does), not only the log classifier: the StepError the loop's feedback gets (issue #22.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo, ValidationReport
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer

CUDA_OOM = """[INFO|trainer.py:2519] >> ***** Running training *****
  0%|          | 0/100 [00:00<?, ?it/s]
Traceback (most recent call last):
  File "/env/lib/python3.11/site-packages/llamafactory/train/sft/workflow.py", line 96, in run_sft
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB
"""


class FailingRunner:
    """Writes ``log`` as the run's log and returns ``exit_code`` / ``timed_out``, like a real run that failed."""

    def __init__(self, log: str, exit_code: int | None, timed_out: bool = False) -> None:
        self.log, self.exit_code, self.timed_out, self.calls = log, exit_code, timed_out, []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, stop=None):
        self.calls.append(cmd)
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        Path(log_file).write_text(self.log, encoding="utf-8")
        return RunResult(exit_code=self.exit_code, duration_s=1.0, timed_out=self.timed_out, log_file=str(log_file))


def _train(tmp_path: Path, runner: FailingRunner) -> StepError:
    ws = tmp_path / "loop_0"
    ws.mkdir()
    (ws / "data.json").write_text("[]")
    (ws / "train.yaml").write_text(yaml.safe_dump({"finetuning_type": "lora", "per_device_train_batch_size": 64,
                                                   "output_dir": str(ws / "output"), "max_steps": 100}))
    scen = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tmp_path / "m"),
                        file_path=str(tmp_path / "files"), workspace_root=str(tmp_path))
    trainer = LlamaFactoryTrainer(scen, load_settings(file_path=str(tmp_path / "files")), runner=runner)
    with pytest.raises(StepError) as info:
        trainer.train(CodeResult(workspace=str(ws)), ValidationReport(passed=True), None)
    assert runner.calls and "train" in runner.calls[0]
    return info.value


def test_cuda_oom_in_training_is_oom_with_the_advice(tmp_path) -> None:
    err = _train(tmp_path, FailingRunner(CUDA_OOM, exit_code=1))
    assert err.error_type is ErrorType.OOM and "CUDA out of memory" in str(err)
    assert "per_device_train_batch_size" in err.suggestion and "gradient_accumulation_steps" in err.suggestion
    assert "OutOfMemoryError" in err.log_tail


def test_a_silent_kill_by_the_oom_killer_is_oom(tmp_path) -> None:
    err = _train(tmp_path, FailingRunner("  3%|▎  | 3/100 [00:09<04:51,  3.00s/it]\n", exit_code=-9))
    assert err.error_type is ErrorType.OOM and "likely out of memory" in str(err)


def test_a_timeout_wins_over_what_the_log_says(tmp_path) -> None:
    log = CUDA_OOM + "ValueError: something else went wrong too\n"
    err = _train(tmp_path, FailingRunner(log, exit_code=None, timed_out=True))
    assert err.error_type is ErrorType.TIMEOUT and "did not finish within" in str(err)
    assert "Train fewer steps" in err.suggestion
