"""Setup every fic trainer shares, so no trainer copies it: tracking, model + tokenizer + LoRA, summaries.

A trainer module exposes `CONFIG_CLASS` (its `<Method>Config`) and `main(recipe)`; `main` calls `prepare(recipe)`
for the pieces, builds its data, runs its TRL trainer, and writes `OUTPUT_DIR/eval_summary.json` with
`write_summary` when it measures before/after.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fic.modeling import ModelArguments, load_model_and_tokenizer, peft_config
from fic.recipe import Recipe

logger = logging.getLogger(__name__)

SECRET_MARKERS = ("api_key", "apikey", "token", "secret", "password")


@dataclass
class Run:
    """What `prepare` hands a trainer: the parsed configs, the loaded model and tokenizer, and the LoRA config."""

    recipe: Recipe
    args: Any  # the method's <Method>Config
    model_args: ModelArguments
    eval: Any  # fic.eval.config.EvalConfig
    model: Any
    tokenizer: Any
    peft_config: Any


def configure_tracking(args) -> None:
    """wandb through `report_to`; offline mode when no API key is set, so runs never block on a login."""
    report_to = args.report_to if isinstance(args.report_to, list) else [args.report_to]
    if "wandb" in report_to or "all" in report_to:
        has_key = bool(os.environ.get("WANDB_API_KEY")) or Path.home().joinpath(".netrc").exists()
        if not has_key and "WANDB_MODE" not in os.environ:
            os.environ["WANDB_MODE"] = "offline"
            logger.info("no WANDB_API_KEY: wandb runs offline; sync later with `wandb sync %s/wandb`", args.output_dir)
        os.environ.setdefault("WANDB_PROJECT", "fic")
        os.environ.setdefault("WANDB_DIR", str(args.output_dir))
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)


def public_config(raw: dict) -> dict:
    """The recipe mapping with every secret-looking value removed (for logging and wandb config)."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out[key] = public_config(value)
        elif any(marker in key.lower() for marker in SECRET_MARKERS) and value:
            out[key] = "<redacted>"
        else:
            out[key] = value
    return out


def prepare(recipe: Recipe, config_class: type) -> Run:
    """Parsed configs, model, tokenizer and LoRA config for `recipe`, with tracking configured."""
    from fic.eval.config import EvalConfig

    args = recipe.get(config_class)
    model_args = recipe.get(ModelArguments)
    configure_tracking(args)
    if not args.run_name or args.run_name == args.output_dir:
        args.run_name = recipe.name
    model, tokenizer = load_model_and_tokenizer(model_args)
    return Run(
        recipe=recipe,
        args=args,
        model_args=model_args,
        eval=recipe.get(EvalConfig),
        model=model,
        tokenizer=tokenizer,
        peft_config=peft_config(model_args),
    )


def write_summary(output_dir: str | Path, before: dict, after: dict, **extra) -> Path:
    """Write `OUTPUT_DIR/eval_summary.json` with `before` and `after` metric dicts (atomically)."""
    path = Path(output_dir) / "eval_summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"before": before, "after": after, **extra}, indent=2, sort_keys=True))
    os.replace(tmp, path)
    logger.info("wrote %s", path)
    return path


def default_callbacks(run: Run) -> list:
    """Callbacks every fic trainer installs: SIGTERM preemption, and checkpoint evaluation when `eval.enabled`."""
    from .preemption import PreemptionCallback

    callbacks = [PreemptionCallback()]
    if run.eval is not None and run.eval.enabled:
        from .callbacks import EvalCallback

        callbacks.append(EvalCallback(run.eval, tokenizer=run.tokenizer, recipe=run.recipe))
    return callbacks
