"""Batch jobs: ``tasks.json`` validation and the plan that ``job/run_ft_job.sh`` executes."""
