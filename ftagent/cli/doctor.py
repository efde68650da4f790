"""`ftagent doctor`: what this machine offers (GPUs, Docker, bubblewrap, tool env, LLM). Never prints keys."""

from __future__ import annotations

from pydantic import BaseModel

from ftagent.cli.common import prepare_env


class DoctorReport(BaseModel):
    """Everything `ftagent doctor` checks."""

    gpus: str
    docker: str
    docker_images: str = "engine not reachable"
    sandbox: str
    runner: str
    tools_env: str
    tools_ok: bool
    builtin_models: str
    llm: str


def _docker_status(settings, gpu: bool) -> tuple[str, str]:
    """(engine line, tool image line)."""
    try:
        from ftagent.runners.docker import connect

        client = connect()
        version = client.version().get("Version", "?")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return str(exc).split(". Start Docker")[0], "engine not reachable"
    try:
        from ftagent.runners.images import describe_images, spec_from_settings

        spec = spec_from_settings(settings, flavour="gpu" if gpu else "cpu", client=client)
        images = describe_images(client, spec)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        images = f"cannot list images: {exc}"
    return f"engine reachable (Docker {version})", images


def collect(check_tools: bool = True) -> DoctorReport:
    """Gather the report (the tool env import check takes ~10-40 s; skip it with ``check_tools=False``)."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.core.settings import load_settings
    from ftagent.models.builtin import list_models
    from ftagent.runners.sandbox import probe_bwrap
    from ftagent.runners.toolenv import check_tools_env, tools_env_path

    settings = load_settings()
    works, why = probe_bwrap()
    env = tools_env_path(settings)
    if check_tools:
        report = check_tools_env(env)
        tools = ", ".join(f"{k} {v}" for k, v in report.versions.items()) or "; ".join(report.errors)
        tools_ok = report.ok
    else:
        tools_ok = (env / "bin" / "python").exists()
        tools = "present (not checked)" if tools_ok else "missing: run `ftagent env setup`"
    llm = settings.llm
    planner = (f"{llm.chat_model} (key set)" if llm.openai_api_key else f"{llm.chat_model} via {llm.openai_api_base}") \
        if llm.configured else "not configured: the heuristic planner is used"
    models = ", ".join(f"{r['name']} ({r['status']})" for r in list_models(settings.ft.file_path))
    gpus = detect_gpus()
    docker, docker_images = _docker_status(settings, gpus.gpu_count > 0)
    return DoctorReport(
        gpus=gpus.summary(), docker=docker, docker_images=docker_images,
        sandbox=f"bubblewrap works (FT_SANDBOX={settings.ft.sandbox})" if works else f"no sandbox: {why}",
        runner=f"FT_ENV_TYPE={settings.ft.env_type}", tools_env=f"{env}: {tools}", tools_ok=tools_ok,
        builtin_models=models, llm=planner,
    )


def run_doctor(check_tools: bool = True) -> DoctorReport:
    """Print the report as a table and return it."""
    from rich.console import Console
    from rich.table import Table

    report = collect(check_tools)
    table = Table(title="ftagent doctor", show_header=False)
    for field, value in report.model_dump().items():
        if field != "tools_ok":
            table.add_row(field.replace("_", " "), str(value))
    Console().print(table)
    return report


def doctor() -> None:
    """Report what this machine offers: GPUs, Docker, bubblewrap, tool envs, LLM settings."""
    prepare_env()
    run_doctor()
