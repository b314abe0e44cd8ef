"""fic: interaction-aware post-training of LLMs."""

__version__ = "0.1.0"
