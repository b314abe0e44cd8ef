#!/usr/bin/env python
"""Launch a recipe: `accelerate launch train.py recipe=NAME [dotted.key=value ...]` (or plain `python train.py`).

Loads `recipes/NAME.yaml`, merges the overrides, parses the result into the method's config dataclass (a subclass of
a TRL config), TRL's `ModelConfig` and the `eval:` block, then hands the recipe to the method's trainer module.
Recipe mistakes (unknown recipe, unknown key, bad value, a key the method needs left empty) print one clear line and
exit with status 2, before any model loads; a key that has moved (`eval.lic_runs` -> `eval.lic.runs`) still parses,
with one `warning:` line naming the new key. Other user errors (`fic.errors.FicError`: a model, file, row or chat
template that cannot be used) print one line and exit with status 1.
`python train.py recipe=NAME --help-keys` lists every key the recipe accepts; `--plan [--processes N]` prints what the
recipe will read and do without loading a model (with each evaluation's estimated minutes at `--tokens-per-second R`
generated tokens per second per process, `fic.trainers.plan_cost`), and exits 1 when it would train on its evaluation
data (`fic.trainers.plan`).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

from fic.distributed import cpu_backend_overrides
from fic.recipe import RecipeError, describe_keys, load_raw, move_overrides, parse

RECIPES_DIR = Path(os.environ.get("FIC_RECIPES_DIR", Path(__file__).resolve().parent / "recipes"))
METHODS = {
    "collab_sft": "fic.trainers.collab_sft",
    "followup_rl": "fic.trainers.followup_rl",
    "vasd": "fic.trainers.vasd.recipe",
}
USAGE = (
    "usage: [accelerate launch] train.py recipe=NAME [key=value ...] [--help-keys] "
    "[--plan [--processes N] [--tokens-per-second R]]"
)
FLAGS = ("--help-keys", "--plan")
VALUED = ("--processes", "--tokens-per-second")  # plan options that take a value


def load(argv: list[str]):
    """(recipe, trainer module) for command-line arguments; raises `RecipeError` on any recipe mistake."""
    from fic.eval_config import EvalConfig
    from fic.modeling import ModelArguments

    names = [a.split("=", 1)[1] for a in argv if a.startswith("recipe=")]
    overrides = [a for a in argv if not a.startswith(("recipe=", *VALUED)) and a not in FLAGS]
    overrides += cpu_backend_overrides(overrides)  # DeepSpeed / FSDP processes without CUDA: one gloo group
    if "--plan" in argv:
        overrides += _plan_overrides(overrides)
    if len(names) != 1 or not names[0]:
        raise RecipeError(f"name exactly one recipe=NAME. {USAGE}")
    nested = {"eval": EvalConfig}
    overrides, moved = move_overrides(overrides, nested)
    raw = load_raw(names[0], overrides, RECIPES_DIR)
    method = raw["method"]
    if method not in METHODS:
        raise RecipeError(f"method: unknown method {method!r}; valid methods are {', '.join(METHODS)}")
    module = importlib.import_module(METHODS[method])
    flat = [module.CONFIG_CLASS, ModelArguments]
    if "--help-keys" in argv:
        print(describe_keys(flat, nested))
        raise SystemExit(0)
    # Fixed output paths: one folder per recipe unless the recipe or an override names one.
    raw.setdefault("output_dir", str(Path("outputs") / Path(names[0]).stem))
    recipe = parse(names[0], raw, flat, nested)
    recipe.deprecations[:0] = moved
    return recipe, module


def check(recipe, module) -> None:
    """What a method needs from its recipe (e.g. follow-up RL: at least one `contexts` dataset; local data files that
    exist), checked before any model loads. The config dataclasses cannot check it in `__post_init__`: they are also
    built directly, with the data passed in memory. Raises `RecipeError` or `DataError`."""
    method_check = getattr(module, "check_recipe", None)
    if method_check is not None:
        method_check(recipe)


def _plan_overrides(overrides: list[str]) -> list[str]:
    """A plan loads no model and runs nothing, so a GPU recipe's bf16/fp16 must not fail the Trainer's device check on
    a machine without a GPU: they are switched off for the plan only (they change no number it prints)."""
    import torch

    if torch.cuda.is_available():
        return []
    return ["bf16=false", "fp16=false"]


def _join_processes(argv: list[str]) -> list[str]:
    """`--processes N` -> `--processes=N` (and `--tokens-per-second R`)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in VALUED and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _positive_rate(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        rate = 0.0
    if rate <= 0:
        raise ValueError(
            f"--tokens-per-second: {value!r}; pass the generated tokens per second of one process, e.g. 250"
        )
    return rate


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fic.distributed import end_launch, use_cpu_group_without_gpu
    from fic.errors import FicError

    use_cpu_group_without_gpu()

    argv = sys.argv[1:] if argv is None else argv
    argv = _join_processes(argv)
    try:
        recipe, module = load(argv)
        if "--plan" not in argv:  # a plan reports unreadable data instead of failing on it
            check(recipe, module)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if os.environ.get("RANK", "0") == "0":  # once per launch, not once per process
        for line in recipe.deprecations:
            print(f"warning: {line}", file=sys.stderr)
    if "--plan" in argv:
        from fic.trainers.plan import make_plan
        from fic.trainers.plan_cost import TOKENS_PER_SECOND

        processes = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--processes=")), None)
        try:
            rate = next((a.split("=", 1)[1] for a in argv if a.startswith("--tokens-per-second=")), None)
            rate = TOKENS_PER_SECOND if rate is None else _positive_rate(rate)
            print(make_plan(recipe, processes or int(os.environ.get("WORLD_SIZE", "1")), module, rate))
        except (FicError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        module.main(recipe)
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    end_launch()  # a rank that exits with a live gloo group can abort in its threads
    return 0


if __name__ == "__main__":
    sys.exit(main())
