"""Runners: how heavy commands (data scripts, training, evaluation) are executed.

Use :func:`ftagent.runners.factory.get_runner` to get the one chosen by ``FT_ENV_TYPE``. This package
stays light: implementations are imported lazily.
"""

from ftagent.runners.base import Mount, Runner, RunResult, ToolEnv

__all__ = ["Mount", "Runner", "RunResult", "ToolEnv", "get_runner"]


def get_runner(settings, name=None):
    """See :func:`ftagent.runners.factory.get_runner`."""
    from ftagent.runners.factory import get_runner as _get

    return _get(settings, name)
