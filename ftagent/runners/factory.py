"""Choose the runner from ``FT_ENV_TYPE`` through a registry (``local`` | ``conda`` | ``docker``).

Third parties add runners with the entry-point group ``ftagent.runners`` or by setting
``FT_ENV_TYPE`` to a dotted path ``"package.module:MyRunner"``. A runner class is built with its
``from_settings(settings)`` classmethod when it has one, else called with no arguments. This registry
is the one list of runners: ``FT_ENV_TYPE`` is checked against it (:func:`runner_class`, a did-you-mean
:class:`UserInputError`) when a run starts, and what a runner does is read from its class
(:func:`ftagent.runners.base.capabilities`), never from its name.
"""

from __future__ import annotations

from typing import Any

from ftagent.core.registry import Registry, load_object
from ftagent.runners.base import Runner

RUNNERS: Registry[Any] = Registry("FT_ENV_TYPE runner", entry_point_group="ftagent.runners")
RUNNERS.register("local", "ftagent.runners.local:LocalRunner")
RUNNERS.register("conda", "ftagent.runners.conda:CondaRunner")
RUNNERS.register("docker", "ftagent.runners.docker:DockerRunner")


def runner_class(name: str) -> Any:
    """The class (or factory) registered as ``name``, or the object at a ``"module:Object"`` path.

    Raises:
        UserInputError: for an unknown name (with the closest registered one) or a path that does not import.
    """
    return load_object(name) if ":" in name else RUNNERS.get(name)


def get_runner(settings, name: str | None = None) -> Runner:
    """The runner for ``settings.ft.env_type`` (or ``name``: a registered name or ``"module:Object"``).

    Raises:
        UserInputError: for an unknown runner name.
        EnvironmentFailure: when the chosen runner cannot work here (e.g. no Docker engine).
    """
    key = name or settings.ft.env_type
    factory = runner_class(key)
    runner = factory.from_settings(settings) if hasattr(factory, "from_settings") else factory()
    return runner
