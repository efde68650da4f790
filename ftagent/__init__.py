"""ftagent: autonomous, benchmark-driven LLM fine-tuning agent."""

__version__ = "0.1.0"
