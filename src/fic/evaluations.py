"""The evaluations fic knows, one row each: adding an evaluation is one module plus one `register` row here.

An evaluation's module provides three functions:

- `add_arguments(parser)` and `run(args) -> int`: the `fic NAME` command (`fic.cli` lists every registered one);
- `evaluate(backend, tokenizer, config, out_dir, model_path, progress) -> dict[str, float]`: the evaluation of one
  model under an `EvalConfig` into `out_dir`, returning flat metrics named by `fic.metric_names`. Checkpoint
  evaluation (the training callback, `fic eval-checkpoints`, its `--watch`) runs it for each name in
  `eval.evaluations`, which accepts exactly the registered names.

The modules are named by their import path and loaded on first use, so the core imports no evaluation.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Evaluation:
    """One registered evaluation: its name (the `fic` command and the `eval.evaluations` entry), the module that
    implements it, and the command's one-line help."""

    name: str
    module: str
    help: str

    def load(self):
        """The implementing module (imported on first use)."""
        return importlib.import_module(self.module)


EVALUATIONS: dict[str, Evaluation] = {}


def register(name: str, module: str, help: str) -> Evaluation:
    """Add (or replace) the evaluation `name`, implemented by the module at import path `module`."""
    EVALUATIONS[name] = Evaluation(name, module, help)
    return EVALUATIONS[name]


def get_evaluation(name: str) -> Evaluation:
    """The registered evaluation `name`; `ValueError` naming the valid ones otherwise."""
    if name not in EVALUATIONS:
        raise ValueError(f"evaluation {name!r} is unknown; valid: {', '.join(EVALUATIONS)}")
    return EVALUATIONS[name]


register("probe", "fic.eval.probe", "user-turn probe: generate and judge the next user turn")
register("lic", "fic.eval.lic", "Lost-in-Conversation FULL / CONCAT / SHARDED simulation")
register("regret", "fic.eval.clarify.regret", "hidden-intent clarification episodes and regret")
