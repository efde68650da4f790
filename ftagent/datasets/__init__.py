"""Raw training datasets: registry, preparation, catalogue, token counting, contamination scan.

Kept light on purpose: import the submodules you need (``ftagent.datasets.prepare`` ...).
"""
