"""The two tools the loop drives: ``llamafactory`` (parameter catalogue, config management, data
script runs, validator, trainer, memory estimate) and ``opencompass`` (config rendering, runs,
parsing, cache, evaluator). Kept import-light: ``opencompass.oc_ext`` is imported inside the tool env.
"""
