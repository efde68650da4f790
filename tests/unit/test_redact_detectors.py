"""Issue 43, "Secrets": detect-secrets' detectors behind the one masker (``ftagent.core.redact``).

Before: a ``ghp_…`` GitHub token and ``password=…`` in a run file's ``user_target_scenario`` reached
``events.jsonl`` and the snapshots in clear; ``core/redact.py`` masked ``sk-``, ``hf_`` and URL credentials
only. Each kind is tested here on free text and inside a JSON line (which must stay JSON); honest text
(hashes, model names, paths, ids, real tool logs) is left alone; a real session's files are grepped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.core.redact import REDACTED, mask_obj, mask_text

REPO = Path(__file__).resolve().parents[2]
# fakes shaped like the real thing (none of them is a live credential)
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
KINDS = {
    "github": (f"push with {GITHUB} please", GITHUB),
    "github fine-grained": ("gho_" + "x" * 36, "gho_" + "x" * 36),
    "gitlab": ("token glpat-" + "Ab3dE6gH9jK2mN5pQ8sT" + " here", "glpat-Ab3dE6gH9jK2mN5pQ8sT"),
    "aws access key": ("AWS key AKIAIOSFODNN7EXAMPLE in the env", "AKIAIOSFODNN7EXAMPLE"),
    "aws secret key": ("aws_secret_access_key = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'",
                       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "slack token": ("bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp ok", "xoxb-123456789012-1234567890123"),
    "slack webhook": ("post to https://hooks.slack.com/services/T0123ABCD/B0123ABCD/abcdefghijklmnopqrstuvwx",
                      "abcdefghijklmnopqrstuvwx"),
    "stripe": ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    "private key": ("key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzd3\nq9Zr\n-----END RSA PRIVATE KEY----- end",
                    "MIIEowIBAAKCAQEAzd3"),
    "openssh key, cut": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU", "b3BlbnNzaC1rZXkt"),
    "basic auth": ("db at postgres://bob:s3cr3tpass@db.example.com:5432/x", "s3cr3tpass"),
    "password=": ("log in with password=hunter2xyz for the db", "hunter2xyz"),
    "quoted secret": ('db_password: "correct horse battery" then', "correct horse battery"),
    "pwd in upper case": ("PWD=Tr0ub4dor&3 ok", "Tr0ub4dor"),
    "jwt": ("Authorization eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "eyJhbGciOiJIUzI1NiJ9"),
    "sendgrid": ("SG." + "a" * 22 + "." + "B" * 43, "SG." + "a" * 22),
    "high-entropy token": ("my key is 8fJk2LmQ9xZr4TbW1cVy7NpAqR3sTuV5 ok", "8fJk2LmQ9xZr4TbW1cVy7NpAqR3sTuV5"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_masked_in_text_and_in_a_json_line(kind):
    text, secret = KINDS[kind]
    assert secret not in mask_text(text) and REDACTED in mask_text(text)
    line = json.dumps({"type": "message", "text": text, "nested": {"user_target_scenario": text}})
    masked = mask_text(line)
    assert secret not in masked and json.loads(masked)["nested"]["user_target_scenario"] == mask_text(text)
    assert mask_text(masked) == masked  # masking twice changes nothing


def test_the_rest_of_the_sentence_stays():
    out = mask_text(f"Target: be exact. Use {GITHUB} and password=hunter2xyz for the db; keep answers short.")
    assert out == f"Target: be exact. Use {REDACTED} and password={REDACTED} for the db; keep answers short."


HONEST = [
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # sha256
    "d350dfe1c2a4b5e6f708192a3b4c5d6e7f809a1b",  # a git commit
    "Qwen/Qwen2.5-7B-Instruct meta-llama/Meta-Llama-3.1-8B-Instruct builtin/tiny-qwen2",
    "/tmp/pytest-of-root/pytest-277/test_resources_report_and_even0/log/2026-12-06_03-13-14_4a9abf/workspace/loop_1/output",
    "session 2026-12-06_02-07-45_a74c21, run ftjob-2026-12-06_02-01-39, id 3f2b8c1e-9d4a-4b7e-8f21-0c5d6e7a8b9c",
    "learning_rate: 2.0e-4, per_device_train_batch_size: 16, lora_target: all, cutoff_len: 1024",
    "What is 37 + 45? \\boxed{82}",
    "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg" * 4,
    "OpenCompass - INFO - Current exp folder: outputs/20260101_000001; accuracy: 50.00",
    "no secrets found: 0 of 12 files; the secret is safe",
]


@pytest.mark.parametrize("text", HONEST)
def test_honest_text_is_left_alone(text):
    assert mask_text(text) == text


def test_real_tool_logs_and_fixtures_are_left_alone():
    """Every text fixture (real LLaMA-Factory and OpenCompass logs, configs, data) comes out unchanged."""
    files = [p for p in (REPO / "tests" / "fixtures").rglob("*") if p.is_file() and p.stat().st_size < 2_000_000]
    changed = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if mask_text(text) != text:
            changed.append(str(path.relative_to(REPO)))
    assert len(files) > 50 and changed == []


def test_keys_of_json_objects_are_masked_too():
    assert mask_obj({GITHUB: "x", "k": ["password=hunter2xyz"]}) == {REDACTED: "x", "k": [f"password={REDACTED}"]}


def test_speed_on_an_event_line_and_a_snapshot():
    """The masker runs on every event and every snapshot. Measured here (2 loaded cores): ~1 ms for a 700-byte
    event line, ~35 ms for a 68 KB snapshot; the bounds below are 20x that, for a loaded machine."""
    line = json.dumps({"type": "step_end", "text": KINDS["password="][0], "config": {f"k{i}": f"v{i}" for i in range(40)}})
    mask_text(line)  # the detectors load once (detect-secrets imports requests)
    started = time.perf_counter()
    for _ in range(100):
        mask_text(line)
    per_line = (time.perf_counter() - started) / 100
    snapshot = json.dumps({"trace": [{"loop": i, "plan": {"learning_rate": 2e-4, "note": HONEST[3]},
                                      "errors": [HONEST[6]] * 40} for i in range(60)]})
    started = time.perf_counter()
    mask_text(snapshot)
    whole = time.perf_counter() - started
    print(f"{per_line * 1000:.2f} ms per {len(line)}-byte line, {whole * 1000:.0f} ms for {len(snapshot):,} bytes")
    assert per_line < 0.05 and whole < 1.5


def test_a_run_files_scenario_never_reaches_the_session_files_in_clear(tmp_path):
    """The issue's case, through the real CLI: ``--config run.yaml`` whose ``user_target_scenario`` holds a
    GitHub token and ``password=…``; every file of the session (events, snapshots, report) is grepped."""
    run = tmp_path / "run.yaml"
    run.write_text(f"benchmark: demo_add\nbase_model: builtin/tiny-qwen2\nloop_n: 1\n"
                   f"user_target_scenario: 'push results with {GITHUB}; the db needs password=hunter2xyz'\n")
    from tests.unit.test_honest_endings import _env

    env = {**_env(tmp_path), "LOG_PATH": str(tmp_path / "log")}
    proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--config", str(run), "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    files = [p for p in (tmp_path / "log").rglob("*") if p.is_file()]
    assert any(p.name == "events.jsonl" for p in files) and any("__session__" in p.parts for p in files), proc.stderr
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)
    assert "push results with" in text  # the scenario is recorded ...
    assert GITHUB not in text and "hunter2xyz" not in text  # ... without its secrets
    assert GITHUB not in proc.stdout + proc.stderr and "hunter2xyz" not in proc.stdout + proc.stderr


def test_a_json_keys_literal_value_stays_json_and_free_text_numbers_are_masked():
    line = json.dumps({"judge_api_key": None, "db_password": 1234, "use_secret": True, "api_key": "k3y-v4lue-x"})
    masked = json.loads(mask_text(line))  # before the rule: "judge_api_key": ***REDACTED*** (not JSON)
    assert masked == {"judge_api_key": None, "db_password": 1234, "use_secret": True, "api_key": REDACTED}
    assert mask_text("pin password=123456 ok") == f"pin password={REDACTED} ok"


@pytest.mark.parametrize("text", [
    "first line\n8fJk2LmQ9xZr4TbW1cVy7NpAqR3sTuV5 after a newline",  # JSON: \n then the token
    "//registry.npmjs.org/:_authToken=npm_Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2 then more \"quoted\" text",
    'cut key "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7',
    "password=\\tab\\ and secret='x\\\\y'",
])
def test_masking_keeps_every_json_line_json(text):
    line = json.dumps({"text": text, "after": "kept"})
    masked = json.loads(mask_text(line))
    assert masked["after"] == "kept" and REDACTED in masked["text"]
