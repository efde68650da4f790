"""`ftagent doctor`: what this machine offers (GPUs, Docker, bubblewrap, tool env, LLM). Never prints keys.

It ends with one verdict line and exits 1 when something the configured setup *requires* is broken
(the tool env of the local runner, the Docker engine of the docker runner, bubblewrap when
``FT_SANDBOX=bwrap``), 0 otherwise. A probe that fails is reported in its row, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from pydantic import BaseModel, Field

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
    cuda: str = "no GPU: not checked"
    builtin_models: str
    llm: str
    problems: list[str] = Field(default_factory=list)  # required things that are broken (exit 1)

    @property
    def ok(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        """One line: ready, or what is broken."""
        if self.ok:
            return f"verdict: ready ({self.runner})"
        return "verdict: NOT READY: " + "; ".join(self.problems)


T = TypeVar("T")


def _guard(what: str, probe: Callable[[], T], default: T) -> tuple[T, str | None]:
    """``probe()``, or ``default`` and one line naming the failure (doctor shows no tracebacks)."""
    try:
        return probe(), None
    except Exception as exc:  # noqa: BLE001 - reported in its row, not raised
        return default, f"cannot check {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _docker_status(settings, gpu: bool) -> tuple[str, str, bool]:
    """(engine line, tool image line, engine reachable)."""
    try:
        from ftagent.runners.docker import connect

        client = connect()
        version = client.version().get("Version", "?")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return str(exc).split(". Start Docker")[0], "engine not reachable", False
    try:
        from ftagent.runners.images import describe_images, spec_from_settings

        spec = spec_from_settings(settings, flavour="gpu" if gpu else "cpu", client=client)
        images = describe_images(client, spec)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        images = f"cannot list images: {exc}"
    return f"engine reachable (Docker {version})", images, True


class _ToolsStatus(BaseModel):
    shown: str = ""  # versions, or the errors
    ok: bool = False
    cuda: str | None = None  # torch against the driver, on a GPU machine
    cuda_ok: bool = True


def _tools_status(env, check_tools: bool) -> _ToolsStatus:
    from ftagent.runners.toolenv import check_tools_env

    if not check_tools:
        present = (env / "bin" / "python").exists()
        return _ToolsStatus(shown="present (not checked)" if present else "missing: run `ftagent env setup`",
                            ok=present)
    report = check_tools_env(env)
    shown = ", ".join(f"{k} {v}" for k, v in report.versions.items())
    if report.errors:
        shown = "; ".join([*([shown] if shown else []), *report.errors])
    status = _ToolsStatus(shown=shown, ok=report.ok)
    if report.cuda is not None:
        status.cuda_ok = report.cuda.ok
        status.cuda = "; ".join([report.cuda.summary, *([report.cuda.message] if not report.cuda.ok else []),
                                 *report.cuda.notes])
    return status


def collect(check_tools: bool = True) -> DoctorReport:
    """Gather the report (the tool env import check takes ~10-40 s; skip it with ``check_tools=False``)."""
    from ftagent.core.errors import UserInputError
    from ftagent.core.hardware import detect_gpus
    from ftagent.core.settings import load_settings
    from ftagent.models.base_model import list_models
    from ftagent.runners.base import RunnerCapabilities, capabilities
    from ftagent.runners.factory import runner_class
    from ftagent.runners.sandbox import INSTALL_HINT, probe_bwrap
    from ftagent.runners.toolenv import tools_env_path

    settings = load_settings()
    problems: list[str] = []
    (works, why), err = _guard("bubblewrap", probe_bwrap, (False, "probe failed"))
    sandbox = (f"bubblewrap works (FT_SANDBOX={settings.ft.sandbox})" if works
               else f"no sandbox: {err or why} ({INSTALL_HINT})")
    if settings.ft.sandbox == "bwrap" and not works:
        problems.append(f"FT_SANDBOX=bwrap but {sandbox}")
    env = tools_env_path(settings)
    tools, err = _guard("the tool env", lambda: _tools_status(env, check_tools), _ToolsStatus())
    tools_line, cuda = err or tools.shown, tools.cuda
    runner = settings.ft.env_type
    try:
        caps = capabilities(runner_class(runner))  # what the runner declares, not its name
    except UserInputError as exc:
        caps = RunnerCapabilities()
        problems.append(str(exc))
    if caps.uses_tools_env and not tools.ok:
        why = "`ftagent env setup` creates or repairs it" if tools.cuda_ok else \
            "its torch cannot use this machine's GPUs: see cuda"
        problems.append(f"the {runner} runner's tool env {env} is not usable ({why})")
    llm = settings.llm
    planner = (f"{llm.chat_model} (key set)" if llm.openai_api_key else f"{llm.chat_model} via {llm.openai_api_base}") \
        if llm.configured else "not configured: the heuristic planner is used"
    models, err = _guard("the built-in models", lambda: ", ".join(
        f"{r['name']} ({r['status']})" for r in list_models(settings.ft.file_path)), "")
    gpus = detect_gpus()
    docker, docker_images, reachable = _docker_status(settings, gpus.gpu_count > 0)
    if runner == "docker" and not reachable:
        problems.append(f"FT_ENV_TYPE=docker but {docker}")
    return DoctorReport(
        gpus=gpus.summary(), docker=docker, docker_images=docker_images, sandbox=sandbox,
        runner=f"FT_ENV_TYPE={runner}", tools_env=f"{env}: {tools_line}", tools_ok=tools.ok,
        cuda=cuda or ("not checked (tool env not checked)" if gpus.gpu_count else "no GPU: not checked"),
        builtin_models=err or models, llm=planner, problems=problems,
    )


def run_doctor(check_tools: bool = True) -> DoctorReport:
    """Print the report as a table and its verdict line, and return it."""
    from rich.console import Console
    from rich.table import Table

    report = collect(check_tools)
    table = Table(title="ftagent doctor", show_header=False)
    for field, value in report.model_dump().items():
        if field not in ("tools_ok", "problems"):
            table.add_row(field.replace("_", " "), str(value))
    console = Console()
    console.print(table)
    console.print(report.verdict(), style="green" if report.ok else "bold red", highlight=False, soft_wrap=True)
    return report


def doctor() -> None:
    """Report what this machine offers: GPUs, Docker, bubblewrap, tool envs, LLM settings; end with a verdict
    (exit 1 when something the configured runner needs is broken)."""
    prepare_env()
    if not run_doctor().ok:
        raise typer.Exit(1)
