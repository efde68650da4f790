"""Red team of issue 39 (branch ``redteam``, c08c4f7 and 9cbd05d): the train.yaml keys that decide which weights are
trained and how they are saved.

Cheat (fails on the code attacked, main at c7fcfe4, and on 3106b5b):

* **The trainer resumes from weights planner code wrote** (B1). ``resume_from_checkpoint`` is a key LLaMA-Factory
  knows, so the validator kept it; ``transformers.Trainer.train`` loads that folder's weights
  (``_load_from_checkpoint``, ``load_state_dict(strict=False)``) before the first step. The debug data run can write
  such a folder into the workspace (``tests/integration/test_redteam39_session.py`` shows it end to end).

False flag (an honest variation; fails on 3106b5b):

* ``save_safetensors: false`` (a key the validator kept): the trainer writes ``pytorch_model.bin``, which trust.md
  lists as the trainer's own, and the guard flags ``weights``: "no safetensors weights in the candidate". The test
  asserts the by-construction side: the validated config always saves safetensors.

The red team's B6 (a model 99 % another checkpoint) and grown-vocabulary tests are helper ``fixweights``'s
(ftagent/integrity/), in its own file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.hardware import HardwareInfo
from ftagent.tools.llamafactory.catalogue import LFCatalogue, read_catalogue
from ftagent.tools.llamafactory.config import filter_config, manage_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"


@pytest.fixture(scope="module")
def catalogue() -> LFCatalogue:
    return read_catalogue(FIXTURES)


def test_no_train_yaml_key_makes_the_trainer_load_a_checkpoint(catalogue, tmp_path):
    """Rule: the trained model starts from the base model, whatever train.yaml says (paths are system-managed)."""
    planner = {"finetuning_type": "full", "learning_rate": 1e-5, "resume_from_checkpoint": str(tmp_path / "ckpt")}
    kept, _ = filter_config(planner, catalogue)
    final = manage_config(kept, workspace=tmp_path, base_model_path="/models/base", hardware=HardwareInfo(),
                          n_samples=100).config
    assert final.get("resume_from_checkpoint") in (None, False), (
        f"the validated config resumes from {final['resume_from_checkpoint']}: the trainer loads those weights")


def test_the_validated_config_saves_what_the_guard_reads(catalogue, tmp_path):
    """Rule: a config the validator accepts never yields a model the guard cannot compare (an honest
    ``save_safetensors: false`` is flagged ``weights``)."""
    kept, _ = filter_config({"finetuning_type": "full", "save_safetensors": False}, catalogue)
    final = manage_config(kept, workspace=tmp_path, base_model_path="/models/base", hardware=HardwareInfo(),
                          n_samples=100).config
    assert final.get("save_safetensors", True) is True, "the validated config writes pytorch_model.bin"
