"""The integrity guard (issue 31 item 5, issue 39): every check a candidate passes before it may become SOTA.

Where each part lives:

* :mod:`~ftagent.integrity.guard` — :class:`~ftagent.integrity.guard.IntegrityGuard`: records the references
  at the session start and runs every check on one candidate (the workflow's feedback step calls it; a flag
  vetoes SOTA in :func:`ftagent.core.sota.decide_sota`).
* :mod:`~ftagent.integrity.references` — what every candidate is compared with, recorded before any planner
  code runs, in the session's folder.
* :mod:`~ftagent.integrity.model_files` — the tokenizer, chat template and architecture against the base's.
* :mod:`~ftagent.integrity.decoding` — the generation config and tokenizer settings the evaluation reads.
* :mod:`~ftagent.integrity.weights` — every value within what the run's optimizer can move it, every tensor
  descending from the base's (what "compared" means for a full model, a merged one and a LoRA adapter);
  :mod:`~ftagent.integrity.movement` (the optimizer's bound), :mod:`~ftagent.integrity.trained_run` (the run:
  its bound, start weights, grown vocabulary), :mod:`~ftagent.integrity.lora` (base + adapter),
  :mod:`~ftagent.integrity.lora_bounds` (where peft starts each factor),
  :mod:`~ftagent.integrity.tensor_compare` (tensors streamed side by side),
  :mod:`~ftagent.integrity.weight_prints` (the base's fingerprint), :mod:`~ftagent.integrity.safetensors_io`
  (which weight files a loader reads, and their bytes).
* :mod:`~ftagent.integrity.eval_config` — the candidate was scored with the baseline's datasets, prompts and
  scorers (the digest ftagent takes when it renders a config).
* :mod:`~ftagent.integrity.evaluation` — the benchmark files and evaluator sources unchanged, the answers
  not constant.
* :mod:`~ftagent.integrity.training_data` — what the data script's sandbox saw, the training rows free of
  the benchmark's items.
* :mod:`~ftagent.integrity.verdict` — what each check's flag means (``CHECK_KINDS``, for the planner's
  prompts) and one candidate's verdict.
* :mod:`~ftagent.integrity.hashing` — the file hashes the checks record and compare.

One check's verdict is :class:`ftagent.engine.events.CheckVerdict`, the record the ``integrity`` event stores.
The rules, with the mechanism of each: docs/benchmarks.md, "Integrity guard".
"""
