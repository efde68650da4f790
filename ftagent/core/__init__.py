"""Core: what every layer may use. Errors, settings, the component registry, paths (the
FT_FILE_PATH layout, the shipped configs/), hardware facts and the shared typed values (step results,
ScenarioInfo, the experiment trace). Imports nothing else of ftagent.
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['ErrorType', 'StepFailure', 'StepError', 'UserInputError', 'EnvironmentFailure', 'BudgetExhausted', 'Settings', 'load_settings', 'Registry', 'load_object', 'Hypothesis', 'CodeResult', 'ValidationReport', 'TrainResult', 'EvalResult', 'FeedbackResult', 'ScenarioInfo', 'ModelInfo', 'Scores', 'Trace', 'Experiment', 'HardwareInfo', 'detect_gpus']
__getattr__ = lazy_exports(__name__, {
    "ErrorType": "ftagent.core.errors",
    "StepFailure": "ftagent.core.errors",
    "StepError": "ftagent.core.errors",
    "UserInputError": "ftagent.core.errors",
    "EnvironmentFailure": "ftagent.core.errors",
    "BudgetExhausted": "ftagent.core.errors",
    "Settings": "ftagent.core.settings",
    "load_settings": "ftagent.core.settings",
    "Registry": "ftagent.core.registry",
    "load_object": "ftagent.core.registry",
    "Hypothesis": "ftagent.core.types",
    "CodeResult": "ftagent.core.types",
    "ValidationReport": "ftagent.core.types",
    "TrainResult": "ftagent.core.types",
    "EvalResult": "ftagent.core.types",
    "FeedbackResult": "ftagent.core.types",
    "ScenarioInfo": "ftagent.core.types",
    "ModelInfo": "ftagent.core.types",
    "Scores": "ftagent.core.types",
    "Trace": "ftagent.core.trace",
    "Experiment": "ftagent.core.trace",
    "HardwareInfo": "ftagent.core.hardware",
    "detect_gpus": "ftagent.core.hardware",
})
