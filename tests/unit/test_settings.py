"""Settings: .env vs environment precedence, aliases, secrets, malformed .env."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ftagent.core.envfile import load_env_file
from ftagent.core.errors import UserInputError
from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, load_settings


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("FT_ENV_TYPE", "FT_CODER_COSTEER_ENV_TYPE", "FT_UPPER_DATA_SIZE_LIMIT", "CHAT_MODEL",
                "OPENAI_API_KEY", "LOG_PATH", "LOG_TRACE_PATH", "FT_STRONG_MODELS"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


def test_defaults_follow_the_reference(in_tmp):
    ft = FTSettings()
    assert ft.upper_data_size_limit == 2000 and ft.coder_max_loop == 10
    assert ft.file_path == in_tmp / "git_ignore_folder" / "finetune_files"
    assert ft.env_type == "local" and ft.benchmark_timeout_s == 7 * 86400
    assert PathSettings().log_path == in_tmp / "log"


def test_dotenv_is_read_and_environment_wins(in_tmp, monkeypatch):
    (in_tmp / ".env").write_text("FT_UPPER_DATA_SIZE_LIMIT=500\nCHAT_MODEL=from-dotenv\n")
    assert FTSettings().upper_data_size_limit == 500
    monkeypatch.setenv("FT_UPPER_DATA_SIZE_LIMIT", "700")
    assert FTSettings().upper_data_size_limit == 700
    loaded = load_env_file()
    assert "FT_UPPER_DATA_SIZE_LIMIT" not in loaded and loaded["CHAT_MODEL"] == "from-dotenv"
    assert LLMSettings().chat_model == "from-dotenv"


def test_explicit_overrides_beat_everything(in_tmp, monkeypatch):
    monkeypatch.setenv("FT_UPPER_DATA_SIZE_LIMIT", "700")
    assert load_settings(upper_data_size_limit=42).ft.upper_data_size_limit == 42


def test_reference_alias_for_env_type(in_tmp, monkeypatch):
    monkeypatch.setenv("FT_Coder_CoSTEER_env_type", "Docker")
    assert FTSettings().env_type == "docker"
    monkeypatch.setenv("FT_ENV_TYPE", "conda")
    assert FTSettings().env_type == "conda"


def test_log_trace_path_alias(in_tmp, monkeypatch):
    monkeypatch.setenv("LOG_TRACE_PATH", str(in_tmp / "traces"))
    assert PathSettings().log_path == in_tmp / "traces"


def test_invalid_values_are_rejected(in_tmp, monkeypatch):
    monkeypatch.setenv("FT_SANDBOX", "kubernetes")
    with pytest.raises(ValidationError):
        FTSettings()


def test_runner_and_planner_names_are_plain_strings_the_registries_check(in_tmp, monkeypatch):
    """Settings cannot see the registries (a lower layer): a name only a plug-in registers must load."""
    monkeypatch.setenv("FT_ENV_TYPE", " Kubernetes ")
    monkeypatch.setenv("FT_PLANNER", "My-Planner")
    ft = FTSettings()
    assert (ft.env_type, ft.planner) == ("kubernetes", "my-planner")


def test_list_settings_accept_json_and_csv(in_tmp, monkeypatch):
    monkeypatch.setenv("FT_STRONG_MODELS", '["a", "b"]')
    assert FTSettings().strong_models == ["a", "b"]
    monkeypatch.setenv("FT_STRONG_MODELS", "c, d")
    assert FTSettings().strong_models == ["c", "d"]


def test_secrets_are_masked_in_dumps(in_tmp, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-123")
    settings = load_settings()
    assert settings.llm.openai_api_key.get_secret_value() == "sk-very-secret-123"
    assert "sk-very-secret" not in json.dumps(settings.redacted())
    assert "sk-very-secret" not in repr(settings.llm)


@pytest.mark.parametrize("text,fragment", [
    ("GOOD=1\nthis is not a setting\n", ".env:2"),
    ("KEY='unterminated\n", ".env:1"),
    ("FT_BASE_MODEL\n", "has no value"),
])
def test_malformed_dotenv_is_a_user_error(in_tmp, text, fragment):
    (in_tmp / ".env").write_text(text)
    with pytest.raises(UserInputError, match=fragment):
        load_env_file()


def test_comments_and_blank_lines_are_fine(in_tmp, monkeypatch):
    monkeypatch.delenv("FT_DATASET", raising=False)
    (in_tmp / ".env").write_text("# comment\n\nexport FT_DATASET=demo_add  # inline\n")
    load_env_file()
    assert FTSettings().dataset == "demo_add"


def test_env_example_and_docs_list_every_setting():
    from ftagent.core import settings_doc

    repo = settings_doc.REPO
    assert (repo / ".env.example").read_text() == settings_doc.render_env_example(), \
        "run `python -m ftagent.core.settings_doc`"
    assert settings_doc.render_table() in (repo / "docs" / "configuration.md").read_text()


def test_an_invalid_setting_names_the_variable_or_flag_the_user_set(in_tmp, monkeypatch):
    """Issue 32 item 2: not the pydantic field ('benchmark_limit') but FT_BENCHMARK_LIMIT=abc; a flag keeps its name."""
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "abc")
    with pytest.raises(UserInputError, match=r"^invalid setting: FT_BENCHMARK_LIMIT=abc: Input should be a valid"):
        load_settings()
    monkeypatch.delenv("FT_BENCHMARK_LIMIT")
    monkeypatch.setenv("LOG_TRACE_PATH", str(in_tmp))
    monkeypatch.setenv("MAX_RETRY", "-1")  # LLMSettings: no prefix
    with pytest.raises(UserInputError, match=r"MAX_RETRY=-1: "):
        load_settings()
    monkeypatch.delenv("MAX_RETRY")
    with pytest.raises(UserInputError, match=r"--upper-data-size-limit=0: "):
        load_settings(upper_data_size_limit=0)
