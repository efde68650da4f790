"""LLaMA-Factory: parameter catalogue, config management, the data script step, the validator,
the trainer and the memory estimate.
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['LlamaFactoryValidator', 'LlamaFactoryTrainer', 'DataProcessor', 'LFCatalogue', 'load_or_build_catalogue']
__getattr__ = lazy_exports(__name__, {
    "LlamaFactoryValidator": "ftagent.tools.llamafactory.validator",
    "LlamaFactoryTrainer": "ftagent.tools.llamafactory.trainer",
    "DataProcessor": "ftagent.tools.llamafactory.data_script",
    "LFCatalogue": "ftagent.tools.llamafactory.catalogue",
    "load_or_build_catalogue": "ftagent.tools.llamafactory.catalogue",
})
