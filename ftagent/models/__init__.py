"""Base models: built-in offline models and resolution of ``--base-model`` (see ``builtin``)."""
