"""Benchmarks of ftagent (``make bench``); see docs/benchmarks-perf.md."""
