"""The integrity guard (issue 31 item 5, issue 39): every check a candidate passes before it may become SOTA.

Where each part lives:

* :mod:`~ftagent.integrity.guard` — :class:`~ftagent.integrity.guard.IntegrityGuard`: records the references
  at the session start and runs every check on one candidate (the workflow's feedback step calls it; a flag
  vetoes SOTA in :func:`ftagent.core.sota.decide_sota`).
* :mod:`~ftagent.integrity.model_files` — the tokenizer, chat template and architecture against the base's.
* :mod:`~ftagent.integrity.weights` — the weights descend from the base's.
* :mod:`~ftagent.integrity.evaluation` — the benchmark files and evaluator sources unchanged, the rendered
  evaluation config equal to the baseline's, the answers not constant.
* :mod:`~ftagent.integrity.training_data` — the data script kept off the benchmark, the training rows free of
  its items.
* :mod:`~ftagent.integrity.verdict` — what each check's flag means (``CHECK_KINDS``, for the planner's
  prompts) and one candidate's verdict.
* :mod:`~ftagent.integrity.hashing` — the file hashes the checks record and compare.

One check's verdict is :class:`ftagent.engine.events.CheckVerdict`, the record the ``integrity`` event stores.
The rules, with the mechanism of each: docs/benchmarks.md, "Integrity guard".
"""
