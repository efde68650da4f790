"""Evaluation with OpenCompass (kept import-light: ``oc_ext`` is imported inside the tool env, where
ftagent's core dependencies are absent, through this package)."""
