"""The training methods fic knows, one row each: adding a method is one module, one `register` row here and a recipe.

A method's module provides:

- its config dataclass (`<Method>Config`, a TRL config subclass with HF-style docstrings), named in the row as
  `"package.module:Class"`: a recipe's top-level keys parse into it and TRL's `ModelConfig` (`--help-keys` lists
  them);
- `check_recipe(recipe)`: what the method needs from its recipe (its data named, local files that exist), checked by
  `train.py` before any model loads. The config dataclass cannot check it in `__post_init__`: it is also built
  directly, with the data passed in memory. Raises `fic.recipe.RecipeError` or `fic.data.records.DataError`;
- `main(recipe)`: the run. It calls `fic.trainers.common.prepare` for the model, tokenizer and configs, builds its
  data and its TRL trainer; a method measured on held-out follow-ups before and after training hands both to
  `fic.trainers.common.train_and_measure`, which writes `OUTPUT_DIR/eval_summary.json`;
- `PLAN`: a `fic.trainers.plan.MethodPlan`, what `train.py --plan` reads and counts for it.

A recipe names its method (`method: NAME`); `train.py` dispatches through this table only. Modules and config
classes are named by import path and imported on first use, so `train.py --plan` imports only its recipe's method.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from fic.recipe import RecipeError

PROTOCOL = ("check_recipe", "main", "PLAN")  # what a method's module provides besides its config class


@dataclass(frozen=True)
class Method:
    """One registered method: its name (a recipe's `method:`, the summary's `method`), the module that implements it
    and its config dataclass (`"package.module:Class"`)."""

    name: str
    module: str
    config: str

    def load(self):
        """The implementing module (imported on first use); `TypeError` naming what it lacks of `PROTOCOL`."""
        module = importlib.import_module(self.module)
        missing = [name for name in PROTOCOL if not hasattr(module, name)]
        if missing:
            raise TypeError(
                f"method {self.name!r}: module {self.module} has no {', '.join(missing)}; a method module provides "
                "check_recipe(recipe), main(recipe) and PLAN (fic.trainers.methods)"
            )
        return module

    def config_class(self) -> type:
        """The method's config dataclass (imported on first use)."""
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)

    def plan(self):
        """The method's `MethodPlan` (what `train.py --plan` needs)."""
        return self.load().PLAN

    def check(self, recipe) -> None:
        """What the method needs from `recipe`, before any model loads."""
        self.load().check_recipe(recipe)

    def train(self, recipe) -> None:
        """Run `recipe` with this method."""
        self.load().main(recipe)


METHODS: dict[str, Method] = {}


def register(name: str, module: str, config: str) -> Method:
    """Add (or replace) the method `name`, implemented by the module at import path `module`, configured by the
    dataclass at `config` (`"package.module:Class"`)."""
    if ":" not in config:
        raise ValueError(f"method {name!r}: config {config!r} is not of the form 'package.module:Class'")
    METHODS[name] = Method(name, module, config)
    return METHODS[name]


def get_method(name: str) -> Method:
    """The registered method `name`; `RecipeError` naming the valid ones otherwise."""
    if name not in METHODS:
        raise RecipeError(f"method: unknown method {name!r}; valid methods are {', '.join(METHODS)}")
    return METHODS[name]


register("collab_sft", "fic.trainers.collab_sft", "fic.trainers.collab_sft:CollabSFTConfig")
register("followup_rl", "fic.trainers.followup_rl", "fic.trainers.followup_rl:FollowupRLConfig")
register("vasd", "fic.trainers.vasd.recipe", "fic.trainers.vasd.config:VASDConfig")
