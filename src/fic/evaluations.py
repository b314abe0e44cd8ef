"""The evaluations fic knows, one row each: adding an evaluation is one module plus one `register` row here.

An evaluation's module provides three functions:

- `add_arguments(parser)` and `run(args) -> int`: the `fic NAME` command (`fic.cli` lists every registered one);
- `evaluate(backend, tokenizer, config, out_dir, model_path, progress) -> dict[str, float]`: the evaluation of one
  model under an `EvalConfig` into `out_dir`, returning flat metrics in the namespace of its registered name
  (`NAME/...`; checkpoint evaluation refuses others). Checkpoint evaluation (the training callback,
  `fic eval-checkpoints`, its `--watch`) runs it for each name in `eval.evaluations`, which accepts exactly the
  registered names.

An evaluation with settings of its own names a config dataclass in its row: the recipe block `eval.NAME` (e.g.
`eval.lic.runs`) parses into it, `--help-keys` lists its fields, and `evaluate` reads it as `config.block(NAME)`.
The probe's settings are the `eval:` block's own keys (`eval.datasets`, `eval.temperatures`, ...).

Modules and config classes are named by their import path (`"package.module"`, `"package.module:Class"`) and
loaded on first use, so the core imports no evaluation.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Evaluation:
    """One registered evaluation: its name (the `fic` command, the `eval.evaluations` entry, the `eval.NAME` config
    block and the metrics' namespace), the module that implements it, the command's one-line help, and the config
    dataclass of its block (`"module:Class"`, or `None` when it has no settings of its own)."""

    name: str
    module: str
    help: str
    config: str | None = None

    def load(self):
        """The implementing module (imported on first use)."""
        return importlib.import_module(self.module)

    def config_class(self) -> type | None:
        """The dataclass of the `eval.NAME` block (imported on first use), or `None`."""
        if self.config is None:
            return None
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)


EVALUATIONS: dict[str, Evaluation] = {}


def register(name: str, module: str, help: str, config: str | None = None) -> Evaluation:
    """Add (or replace) the evaluation `name`, implemented by the module at import path `module`, with settings in
    the dataclass at `config` (`"module:Class"`) if it has any."""
    if config is not None and ":" not in config:
        raise ValueError(f"evaluation {name!r}: config {config!r} is not of the form 'package.module:Class'")
    EVALUATIONS[name] = Evaluation(name, module, help, config)
    return EVALUATIONS[name]


def config_blocks() -> dict[str, type]:
    """`{name: config dataclass}` of the registered evaluations that have a config block."""
    return {name: cls for name, e in EVALUATIONS.items() if (cls := e.config_class()) is not None}


def get_evaluation(name: str) -> Evaluation:
    """The registered evaluation `name`; `ValueError` naming the valid ones otherwise."""
    if name not in EVALUATIONS:
        raise ValueError(f"evaluation {name!r} is unknown; valid: {', '.join(EVALUATIONS)}")
    return EVALUATIONS[name]


register("probe", "fic.eval.probe", "user-turn probe: generate and judge the next user turn")
# The blocks of the shipped evaluations live in the core (`fic.eval_config`) because recipe plans read them too.
register("lic", "fic.eval.lic", "Lost-in-Conversation FULL / CONCAT / SHARDED simulation", "fic.eval_config:LicConfig")
register("regret", "fic.eval.clarify.regret", "hidden-intent clarification episodes and regret",
         "fic.eval_config:RegretConfig")  # fmt: skip
