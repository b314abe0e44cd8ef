#!/usr/bin/env python
"""Launch a recipe: `accelerate launch train.py recipe=NAME [dotted.key=value ...]` (or plain `python train.py`).

Loads `recipes/NAME.yaml`, merges the overrides, parses the result into the config dataclass of the recipe's
`method:` (a subclass of a TRL config), TRL's `ModelConfig` and the `eval:` block, then runs the method. Methods come
from one registry, `fic.trainers.methods`; this file only dispatches. Recipe mistakes (unknown recipe, method or key,
bad value, a key the method needs left empty) print one clear line and exit with status 2, before any model loads.
Other user errors (`fic.errors.FicError`: a model, file, row or chat template that cannot be used) print one line and
exit with status 1.
`python train.py recipe=NAME --help-keys` lists every key the recipe accepts; `--plan [--processes N]` prints what the
recipe will read and do without loading a model (with each evaluation's estimated minutes at `--tokens-per-second R`
generated tokens per second per process, `fic.trainers.plan_cost`), and exits 1 when it would train on its evaluation
data (`fic.trainers.plan`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from fic.distributed import cpu_backend_overrides
from fic.recipe import RecipeError, describe_keys, load_raw, parse
from fic.trainers.methods import get_method

RECIPES_DIR = Path(os.environ.get("FIC_RECIPES_DIR", Path(__file__).resolve().parent / "recipes"))
USAGE = (
    "usage: [accelerate launch] train.py recipe=NAME [key=value ...] [--help-keys] "
    "[--plan [--processes N] [--tokens-per-second R]]"
)
FLAGS = ("--help-keys", "--plan")
VALUED = ("--processes", "--tokens-per-second")  # plan options that take a value


def load(argv: list[str]):
    """(recipe, its method: a `fic.trainers.methods.Method`) for command-line arguments; raises `RecipeError` on any
    recipe mistake."""
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
    raw = load_raw(names[0], overrides, RECIPES_DIR)
    method = get_method(raw["method"])
    flat = [method.config_class(), ModelArguments]
    if "--help-keys" in argv:
        print(describe_keys(flat, nested))
        raise SystemExit(0)
    # Fixed output paths: one folder per recipe unless the recipe or an override names one.
    raw.setdefault("output_dir", str(Path("outputs") / Path(names[0]).stem))
    return parse(names[0], raw, flat, nested), method


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
        recipe, method = load(argv)
        if "--plan" not in argv:  # a plan reports unreadable data instead of failing on it
            method.check(recipe)  # what the method needs from its recipe, before any model loads
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if "--plan" in argv:
        from fic.trainers.plan import make_plan
        from fic.trainers.plan_cost import TOKENS_PER_SECOND

        processes = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--processes=")), None)
        try:
            rate = next((a.split("=", 1)[1] for a in argv if a.startswith("--tokens-per-second=")), None)
            rate = TOKENS_PER_SECOND if rate is None else _positive_rate(rate)
            print(make_plan(recipe, processes or int(os.environ.get("WORLD_SIZE", "1")), method, rate))
        except (FicError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        method.train(recipe)
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    end_launch()  # a rank that exits with a live gloo group can abort in its threads
    return 0


if __name__ == "__main__":
    sys.exit(main())
