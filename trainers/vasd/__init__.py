"""View-Asymmetric Self-Distillation, one family: `config` (`VASDConfig`), `trainer` (`VASDTrainer`), `rollout` (the
training-time generation of a step) and `recipe` (what `train.py recipe=fic_llama3b` runs: data, training, the
before/after Lost-in-Conversation evaluation)."""

from .config import VASDConfig
from .trainer import VASDTrainer

__all__ = ["VASDConfig", "VASDTrainer"]
