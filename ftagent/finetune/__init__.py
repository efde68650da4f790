"""The fine-tuning application: ``app`` (the one owner of a session's start), ``workflow`` (the six
steps over the typed loop state of ``state``), ``scenario`` (facts before loop 0) and ``protocols``
(the six component Protocols). May import every layer below it.
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['FinetuneOptions', 'run_finetune', 'run_demo', 'FinetuneWorkflow', 'Components', 'build_components', 'FinetuneLoop', 'FinetuneSessionState', 'FinetuneScenario', 'Proposer', 'Coder', 'DataStep', 'Validator', 'Trainer', 'Evaluator', 'Feedback']
__getattr__ = lazy_exports(__name__, {
    "FinetuneOptions": "ftagent.finetune.app",
    "run_finetune": "ftagent.finetune.app",
    "run_demo": "ftagent.finetune.demo",
    "FinetuneWorkflow": "ftagent.finetune.workflow",
    "Components": "ftagent.finetune.workflow",
    "build_components": "ftagent.finetune.workflow",
    "FinetuneLoop": "ftagent.finetune.state",
    "FinetuneSessionState": "ftagent.finetune.state",
    "FinetuneScenario": "ftagent.finetune.scenario",
    "Proposer": "ftagent.finetune.protocols",
    "Coder": "ftagent.finetune.protocols",
    "DataStep": "ftagent.finetune.protocols",
    "Validator": "ftagent.finetune.protocols",
    "Trainer": "ftagent.finetune.protocols",
    "Evaluator": "ftagent.finetune.protocols",
    "Feedback": "ftagent.finetune.protocols",
})
