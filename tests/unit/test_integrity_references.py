"""Issue 39: the guard's references (the base's weight fingerprints, tokenizer, template, decoding files, the
baseline's config digests) are recorded before any planner code runs, in the session's folder, and a resumed
session compares with those, never with base files changed since. At d350dfe the guard read the base's files
at every check: a base edited after the start moved the reference with it.
"""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.integrity.references import FILE_NAME, References
from tests.helpers.model_files import base_weights, candidate, finetuned, guard_for, write_model


def test_references_are_recorded_at_the_start_in_the_session_folder(tmp_path: Path) -> None:
    base = write_model(tmp_path / "base", base_weights(2))
    guard = guard_for(tmp_path, base, baseline_configs={"validation": "a" * 64})
    path = tmp_path / "session" / FILE_NAME
    refs = References.model_validate_json(path.read_text())
    assert refs.base == str(base) and refs.baseline_configs == {"validation": "a" * 64}
    assert len(refs.weights.tensors) == 26 and set(refs.weights.files) == {"model.safetensors"}
    assert refs.files.chat_template and refs.files.tokenizer_sha256 and "generation_config.json" in refs.files.configs
    assert guard.references == refs


def test_a_resumed_session_compares_with_what_its_start_recorded(tmp_path: Path) -> None:
    """The base's template and generation config edited after the start, the candidate made to match them."""
    base_w = base_weights(2)
    base = write_model(tmp_path / "base", base_w)
    guard_for(tmp_path, base)  # the session's start
    (base / "chat_template.jinja").write_text("{{ 'Answer: 42' }}")
    gen = json.loads((base / "generation_config.json").read_text())
    (base / "generation_config.json").write_text(json.dumps({**gen, "num_beams": 8}))
    cand = write_model(tmp_path / "cand", finetuned(base_w, 0.1, 1), generation={**gen, "num_beams": 8})
    (cand / "chat_template.jinja").write_text("{{ 'Answer: 42' }}")
    resumed = guard_for(tmp_path, base)  # reads the references file the start wrote
    flags = {c.name for c in resumed.check(candidate(cand)).flagged}
    assert flags == {"chat_template", "decoding"}, flags
