"""The exported model folder and the loss curve, both made in the tool env through the runner.

LoRA is merged by the same script evaluation uses before vLLM (:mod:`ftagent.tools.opencompass.merge`):
the tokenizer (with the chat template LLaMA-Factory saved next to the adapter) comes from the adapter
folder, which is also the folder evaluation reads its tokenizer from. ``--no-merge`` and full models
are copied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount, Runner
from ftagent.tools.opencompass.merge import merge_command

# what LLaMA-Factory leaves next to the model that is training bookkeeping, not part of the model
TRAINING_FILES = {"trainer_log.jsonl", "trainer_state.json", "training_args.bin", "all_results.json",
                  "train_results.json", "eval_results.json", "README.md", "training_loss.png",
                  "training_eval_loss.png"}
LOSS_PNG = "loss.png"
PLOT_SCRIPT = '''\
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
points, out = json.load(open(sys.argv[1])), sys.argv[2]
fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
ax.plot([p["step"] for p in points], [p["loss"] for p in points], marker=".")
ax.set_xlabel("step"); ax.set_ylabel("training loss"); ax.grid(alpha=0.3)
fig.tight_layout(); fig.savefig(out)
'''


def copy_model(src: Path, dst: Path) -> None:
    """Copy a model or adapter folder's top-level files (no checkpoints, no training bookkeeping)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(src).iterdir()):
        # a link is never followed (issue 39: a session's output folder is written by sandboxed commands)
        if path.is_file() and not path.is_symlink() and path.name not in TRAINING_FILES:
            shutil.copyfile(path, dst / path.name)  # not copy2: training leaves some files 0600


def merge_lora(adapter: Path, base: Path, dst: Path, runner: Runner, *, log_dir: Path,
               timeout: float | None = None) -> None:
    """Merge ``adapter`` into ``base`` and write a Hugging Face model folder ``dst`` (tool env).

    Raises:
        EnvironmentFailure: the base model is gone or the merge failed (with its log tail).
    """
    if not Path(base).is_dir():
        raise EnvironmentFailure(f"the base model folder {base} is gone: the LoRA adapter cannot be merged "
                                 "(export with --no-merge to keep the adapter)")
    res = runner.run(merge_command(Path(base), Path(adapter), dst), tool="eval", workdir=log_dir,
                     mounts=[Mount(source=Path(base)), Mount(source=Path(adapter)),
                             Mount(source=log_dir, read_only=False)],
                     timeout=timeout, log_file=log_dir / "merge.log")
    if not res.ok or not (dst / "config.json").is_file():
        raise EnvironmentFailure(f"merging the LoRA adapter failed (exit {res.exit_code}):\n{res.log_tail[-2000:]}")


def plot_loss(points: list[dict[str, Any]], dst: Path, runner: Runner, *, log_dir: Path) -> bool:
    """Draw the training loss with matplotlib (tool env) into ``dst``; False when it could not be drawn."""
    points = [p for p in points if p.get("loss") is not None and p.get("step") is not None]
    if len(points) < 2:
        return False
    data = log_dir / "loss.json"
    data.write_text(json.dumps(points), encoding="utf-8")
    res = runner.run(["python", "-c", PLOT_SCRIPT, str(data), str(dst)], tool="eval", workdir=log_dir,
                     mounts=[Mount(source=log_dir, read_only=False), Mount(source=dst.parent, read_only=False)],
                     timeout=300, log_file=log_dir / "plot.log")
    return res.ok and dst.is_file()
