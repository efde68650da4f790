"""What the guard's verdicts mean: every check's name with what its flag says and whether an experiment can
cause it (:data:`CHECK_KINDS`, read by the planner's prompts), and one candidate's :class:`IntegrityVerdict`.

One check's verdict is :class:`ftagent.engine.events.CheckVerdict` (the record the ``integrity`` event stores):
``passed`` True (clean), False (flagged: the candidate cannot become SOTA) or None (the check cannot apply
here; ``detail`` says why).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ftagent.engine.events import CheckVerdict


class CheckKind(BaseModel):
    """What a flag of one check means, for the planner's prompts (issue 35: a ``benchmark_files`` flag read
    like experiment feedback, and the planner could not tell whether its own code had caused it)."""

    meaning: str  # what the flag says happened
    by_experiment: bool  # the experiment (its data script, data, config or trained model) can cause it
    advice: str  # what to do about it: a fix for the experiment's cause, else why nothing needs to change


#: Every check the guard runs (the modules of :mod:`ftagent.integrity` name them;
#: tests/unit/test_issue35_integrity.py checks that each produced name is here).
CHECK_KINDS: dict[str, CheckKind] = {
    "tokenizer": CheckKind(
        meaning="the trained model's tokenizer (vocabulary or special tokens) differs from the base model's and "
                "from the validated debug run's", by_experiment=True,
        advice="keep the keys that change the tokenizer (add_tokens, add_special_tokens, resize_vocab, "
               "split_special_tokens) as they were validated: the trained model must have the validated run's "
               "tokenizer"),
    "chat_template": CheckKind(
        meaning="the trained model's chat template differs from the base model's and from the one the validated "
                "debug run wrote, so evaluation would not use the chat format that was checked", by_experiment=True,
        advice="keep `template` and the keys that change the chat format as they were validated"),
    "architecture": CheckKind(
        meaning="the trained model's architecture (model type, layer shapes, vocabulary size) differs from the "
                "base model's, or a LoRA adapter names another base", by_experiment=True,
        advice="train the given base model; the vocabulary may only grow as the validated run grew it"),
    "weights": CheckKind(
        meaning="the trained weights do not descend from the start weights: a value moved farther than the "
                "run's optimizer can move it in the steps it took at its learning rates, or a tensor is "
                "uncorrelated with the base's, missing, extra or of another shape (another checkpoint, or weights "
                "the training destroyed)", by_experiment=True,
        advice="train the start weights as given with one of the accepted optimizers; a learning rate far too "
               "high can wreck the weights"),
    "decoding": CheckKind(
        meaning="the trained model's generation config or tokenizer settings (stop tokens, beams, penalties, "
                "how prompts are tokenized) differ from the base model's and from the validated debug run's",
        by_experiment=True,
        advice="leave generation_config.json and the tokenizer settings to the trainer; decoding is the "
               "evaluation's, not something to tune"),
    "benchmark_files": CheckKind(
        meaning="the benchmark's data files or ftagent's evaluator sources changed after the session started "
                "(they are outside your workspace)", by_experiment=False,
        advice="not caused by your code: your scripts run in a sandbox that does not mount these files, so the "
               "change came from outside the experiment (another process, or ftagent edited during the "
               "session); nothing in your plan needs to change because of it"),
    "eval_config": CheckKind(
        meaning="the evaluation config rendered for this model (datasets, prompts, scorer) differs from the one "
                "the baseline was scored with, or was edited after ftagent rendered it", by_experiment=False,
        advice="not caused by your code: ftagent renders that part from the benchmark, and nothing in your "
               "train.yaml or data reaches it; nothing in your plan needs to change because of it"),
    "data_script": CheckKind(
        meaning="process_data.py tried to read a folder it must not read (the benchmark's items, saved "
                "predictions or logs): the sandbox recorded it opening or listing their decoys", by_experiment=True,
        advice="never refer to the benchmark's files: build the training data from the raw datasets and "
               "generated samples only"),
    "contamination": CheckKind(
        meaning="the training data (data.json) holds validation or test items: copied, paraphrased, or their "
                "gold answers copied into outputs", by_experiment=True,
        advice="drop such rows in process_data.py (the contamination rule is under Training data rules)"),
    "constant_answers": CheckKind(
        meaning="the model gave (nearly) the same answer to every validation item: the score measures one "
                "guess, not a skill", by_experiment=True,
        advice="vary the training targets (data that teaches one answer collapses the model), or lower the "
               "learning rate if the model collapsed"),
}


def flag_parts(flag: str) -> tuple[str, str]:
    """``("benchmark_files", "changed since …")`` of a recorded flag (``"<check>: <detail>"``)."""
    name, _, detail = flag.partition(":")
    return name.strip(), detail.strip()


class IntegrityVerdict(BaseModel):
    """Every check of one candidate; flagged when any check failed."""

    checks: list[CheckVerdict] = Field(default_factory=list)
    seconds: float = 0.0  # what running every check took (the guard's cost, ``make bench``)

    @property
    def flagged(self) -> list[CheckVerdict]:
        return [c for c in self.checks if c.flagged]

    def text(self) -> str:
        """One line: 'integrity: 6 checks clean' or the flagged checks and why."""
        if not self.flagged:
            ran = sum(1 for c in self.checks if c.passed is not None)
            return f"integrity: {ran} check(s) clean"
        return "integrity FLAGGED: " + "; ".join(f"{c.name}: {c.detail}" for c in self.flagged)
