"""Sub-command groups of the CLI, one module per area. Keep module-level imports light."""

from ftagent.commands import datasets, env, job, models  # noqa: F401
