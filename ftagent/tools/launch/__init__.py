"""The launch plan: what a run will launch on given hardware, and the preflight of upstream refusals (issue 30)."""
