"""Choose the runner from ``FT_ENV_TYPE`` through a registry (``local`` | ``conda`` | ``docker``).

Third parties add runners with the entry-point group ``ftagent.runners`` or by setting
``FT_ENV_TYPE`` to a dotted path ``"package.module:MyRunner"``. A runner class is built with its
``from_settings(settings)`` classmethod when it has one, else called with no arguments.
"""

from __future__ import annotations

from typing import Any

from ftagent.core.registry import Registry, load_object
from ftagent.runners.base import Runner

RUNNERS: Registry[Any] = Registry("runner", entry_point_group="ftagent.runners")
RUNNERS.register("local", "ftagent.runners.local:LocalRunner")
RUNNERS.register("conda", "ftagent.runners.conda:CondaRunner")
RUNNERS.register("docker", "ftagent.runners.docker:DockerRunner")


def get_runner(settings, name: str | None = None) -> Runner:
    """The runner for ``settings.ft.env_type`` (or ``name``: a registered name or ``"module:Object"``).

    Raises:
        UserInputError: for an unknown runner name.
        EnvironmentFailure: when the chosen runner cannot work here (e.g. no Docker engine).
    """
    key = name or settings.ft.env_type
    factory = load_object(key) if ":" in key else RUNNERS.get(key)
    runner = factory.from_settings(settings) if hasattr(factory, "from_settings") else factory()
    return runner
