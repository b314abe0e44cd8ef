"""Setup every fic method shares, so no method copies it: tracking, model + tokenizer + LoRA, summaries, and the
skeleton of a method measured on held-out follow-ups.

A method's `main(recipe)` (`fic.trainers.methods`) calls `prepare(recipe, <Method>Config)` for the pieces and builds
its data and its TRL trainer; `train_and_measure` then runs the held-out evaluation before, the training, the
evaluation after and writes `OUTPUT_DIR/eval_summary.json` (`write_summary`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from fic.chat import set_template_kwargs
from fic.checkpoint_state import checkpoint_problem
from fic.data.sources import check_specs
from fic.eval_config import EvalConfig
from fic.followup_summary import compare
from fic.jsonl import write_rows
from fic.modeling import ModelArguments, load_model_and_tokenizer, peft_config
from fic.recipe import Recipe, RecipeError
from fic.tracking import configure_wandb

from .callbacks import EvalCallback, WatchCommandCallback
from .heldout import check_heldout_judge, eval_judge, evaluate_after_training, evaluate_followups, training_precision
from .preemption import PreemptionCallback

logger = logging.getLogger(__name__)


@dataclass
class Run:
    """What `prepare` hands a trainer: the parsed configs, the loaded model and tokenizer, and the LoRA config."""

    recipe: Recipe
    args: Any  # the method's <Method>Config
    model_args: ModelArguments
    eval: Any  # fic.eval_config.EvalConfig
    model: Any
    tokenizer: Any
    peft_config: Any


def check_recipe_data(recipe: Recipe, **fields: list[str]) -> None:
    """The dataset specs a run will read, checked before any model loads: known names and local files that exist.

    Args:
        recipe: the parsed recipe; its held-out `eval.datasets` are checked when the evaluation is enabled.
        fields: the method's training specs by recipe key, e.g. `contexts=args.contexts`.
    """
    check_specs("eval.datasets", recipe.get(EvalConfig).datasets)
    for name, specs in fields.items():
        check_specs(name, specs)


def configure_tracking(args) -> None:
    """wandb through `report_to`; offline mode when no API key is set, so runs never block on a login."""
    configure_wandb(args.output_dir, args.report_to)


def prepare(recipe: Recipe, config_class: type) -> Run:
    """Parsed configs, model, tokenizer and LoRA config for `recipe`, with tracking configured."""
    args = recipe.get(config_class)
    model_args = recipe.get(ModelArguments)
    configure_tracking(args)
    if not args.run_name or args.run_name == args.output_dir:
        args.run_name = recipe.name
    model, tokenizer = load_model_and_tokenizer(model_args)
    template_kwargs = getattr(args, "chat_template_kwargs", None)
    if template_kwargs:
        set_template_kwargs(tokenizer, template_kwargs)
    check_master_weights(model, args, peft=peft_config(model_args) is not None)
    return Run(
        recipe=recipe,
        args=args,
        model_args=model_args,
        eval=recipe.get(EvalConfig),
        model=model,
        tokenizer=tokenizer,
        peft_config=peft_config(model_args),
    )


def check_master_weights(model, args, peft: bool) -> None:
    """Refuse AdamW updates of pure bf16/fp16 weights: one step at lr 1e-6 leaves ~98% of bf16 weights unchanged.

    Full-parameter training needs fp32 master weights: load the model in float32 with `bf16: true` (autocast), or
    let DeepSpeed keep them (its bf16 mode holds fp32 master weights). LoRA adapters are fp32 by default (PEFT).
    """
    if peft or getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return
    low = {p.dtype for p in model.parameters() if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16)}
    if low:
        raise RecipeError(
            f"dtype: the trainable weights are {', '.join(sorted(str(d) for d in low))} and an optimizer step on them "
            "rounds most updates away (pure low-precision AdamW); set dtype=float32 with bf16=true (fp32 master "
            "weights, bf16 autocast), train LoRA adapters (use_peft=true), or use a DeepSpeed config"
        )


def write_summary(output_dir: str | Path, before: dict, after: dict, **extra) -> Path:
    """Write `OUTPUT_DIR/eval_summary.json` with the `before` and `after` evaluations (atomically).

    Where both carry their judged turns (`rows`, from `fic.followup_eval`), the turns go to
    `OUTPUT_DIR/eval_turns/{before,after}.jsonl` (`fic review` and `fic rates` read them) and the summary gains
    `difference`: after - before, paired by item with a clustered bootstrap interval and p-value
    (`fic.followup_summary.compare`), which says "no detectable change" when the interval covers 0."""
    output_dir = Path(output_dir)
    before, after = dict(before), dict(after)
    rows = {"before": before.pop("rows", None), "after": after.pop("rows", None)}
    if rows["before"] and rows["after"]:
        for name, turns in rows.items():
            write_rows(output_dir / "eval_turns" / f"{name}.jsonl", turns)
        extra["difference"] = compare(rows["before"], rows["after"])
        logger.info("genuine follow-up rate, after - before: %s", extra["difference"]["overall"]["reading"])
    path = output_dir / "eval_summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"before": before, "after": after, **extra}, indent=2, sort_keys=True))
    os.replace(tmp, path)
    logger.info("wrote %s", path)
    return path


def train_and_measure(
    run: Run,
    method: str,
    records: list,
    heldout: list[dict],
    make_trainer: Callable[[], Any],
    summary: Callable[[Any, Any, dict, dict], dict],
    start: float,
) -> None:
    """The skeleton of a method measured on held-out follow-ups: the genuine follow-up rate of the model before
    training on the `heldout` contexts (`fic.trainers.heldout`, with the `eval:` block's judge, refused when the
    held-out items overlap the judge's fit), training (resumed where the recipe says) and the final save, the same
    rate of the trained model, and `OUTPUT_DIR/eval_summary.json` written by the main process.

    Every rank calls this; each samples and judges its share of the contexts before and after training, so every
    rank makes the same collectives and none waits alone at the trainer's first one or at the end of the launch.

    Args:
        run: what `prepare` returned.
        method: the method's registered name, the summary's `method`.
        records: the held-out items (`heldout_records`), checked against the judge's fit.
        heldout: their contexts (`heldout_contexts`); with none, nothing is evaluated and `before` / `after` are `{}`.
        make_trainer: `() -> Trainer`, called once the evaluation before training is done.
        summary: `(trainer, train_output, before, after) -> dict`: the method's own summary fields (it may add to the
            `before` / `after` dicts, e.g. follow-up RL's `mean_reward`); called on the main process only.
        start: `time.time()` when the run began, for `wall_s`.
    """
    judge = eval_judge(run.eval) if heldout else None
    overlap = check_heldout_judge(records, run.eval, judge) if heldout else None
    with training_precision(run.args):
        before = evaluate_followups(run.model, run.tokenizer, heldout, run.eval, judge) if heldout else {}
    trainer = make_trainer()
    output = trainer.train(resume_from_checkpoint=resume_point(run.args))
    trainer.save_model(run.args.output_dir)
    after = evaluate_after_training(trainer, run, heldout, judge)  # on every rank, each its share
    if not trainer.is_world_process_zero():
        return
    fields = summary(trainer, output, before, after)
    measured = {"contexts": len(heldout), "datasets": run.eval.datasets, "answers": run.eval.responses,
                "judge": getattr(judge, "name", None)}  # fmt: skip
    write_summary(run.args.output_dir, before, after, judge_overlap=overlap, method=method, heldout=measured,
                  **fields, wall_s=round(time.time() - start, 1))  # fmt: skip


def default_callbacks(run: Run) -> list:
    """Callbacks every fic trainer installs: SIGTERM preemption, and checkpoint evaluation when `eval.enabled` (when
    it is off, the command that evaluates the checkpoints elsewhere is logged)."""
    callbacks = [PreemptionCallback()]
    if run.eval is not None and run.eval.enabled:
        callbacks.append(EvalCallback(run.eval, tokenizer=run.tokenizer, recipe=run.recipe))
    elif run.eval is not None:
        callbacks.append(WatchCommandCallback(run.eval))
    return callbacks


def resume_point(args) -> str | bool | None:
    """What to pass as `trainer.train(resume_from_checkpoint=...)`.

    `resume_from_checkpoint` in a recipe may be a checkpoint folder, or `true` / `auto` for the latest checkpoint in
    `output_dir` that is whole: folders cut off by a kill during a save, or with damaged files, are skipped with a
    warning (nothing to resume from is fine: the run starts fresh). A named folder that is not whole is an error.
    """
    value = getattr(args, "resume_from_checkpoint", None)
    if value in (None, "", "false", "False", False):
        return None
    if value in ("auto", "true", "True", True):
        out = Path(args.output_dir)
        found = [p for p in out.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir()] if out.is_dir() else []
        found = [p for p in found if p.name.split("-")[-1].isdigit()]
        for checkpoint in sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
            problem = checkpoint_problem(checkpoint)
            if problem is None:
                logger.info("resume_from_checkpoint=%s: resuming from %s", value, checkpoint)
                return str(checkpoint)
            logger.warning("resume_from_checkpoint=%s: skipping %s: %s", value, checkpoint, problem)
        logger.info("resume_from_checkpoint=%s: no usable checkpoint in %s, starting fresh", value, args.output_dir)
        return None
    if not Path(value).is_dir():
        raise RecipeError(f"resume_from_checkpoint: {value!r} is not a checkpoint folder; use a path or `auto`")
    problem = checkpoint_problem(value)
    if problem is not None:
        raise RecipeError(
            f"resume_from_checkpoint: cannot resume from {value!r}: {problem}; pass an earlier checkpoint-N folder "
            "or `auto` (the latest whole checkpoint)"
        )
    return value
