"""`fic eval-checkpoints RUN_DIR [--watch]`: evaluate every finished `checkpoint-N` of a run, now or as each is saved.

Each finished checkpoint folder is loaded from disk (LoRA adapters on their base model), those already evaluated or
being evaluated by another process are skipped, and vLLM can serve it, so evaluation can run on another node while
training goes on (`--watch`: `eval/watch.py`). The rooms behind it: `fic.eval.checkpoint_runs` (the per-checkpoint
step the training callback shares), `fic.eval.evaluate` (the evaluations of one model), `fic.eval.comparison` (the
run-level files) and `fic.eval.checkpoint_io` (loading and the lock).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fic import cli_args

from . import watch
from .checkpoint_io import (  # noqa: F401  (re-exported for callers that read them from here)
    EVAL_DIR,
    CheckpointLock,
    checkpoint_step,
    is_evaluated,
    list_checkpoints,
    make_backend,
)
from .checkpoint_runs import (  # noqa: F401  (re-exported)
    UnreadableCheckpoint,
    evaluate_checkpoint,
    evaluate_run,
    resolve_config,
)
from .evaluate import METRICS_FILE, evaluate  # noqa: F401  (re-exported)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a training output folder holding checkpoint-N folders")
    parser.add_argument("--evaluations", help="comma-separated: probe,lic,regret (default: the run's eval config)")
    parser.add_argument("--datasets", help="comma-separated NAME[:PATH] held-out sets for the probe")
    parser.add_argument("--temperatures", help="comma-separated probe temperatures, e.g. 0,0.7,1.0")
    # No defaults here: what is not given comes from the run's own eval config (RUN_DIR/eval/config.json).
    cli_args.add_samples_argument(parser, None)
    cli_args.add_limit_argument(parser, None)
    cli_args.add_judge_arguments(parser, default=None)
    cli_args.add_judge_overlap_argument(parser)
    parser.add_argument("--backend", choices=["transformers", "vllm"], help="generation backend (default: config)")
    parser.add_argument(
        "--dtype",
        help="model dtype: auto, bfloat16, float16, float32 (default: the run's training "
        "dtype, bfloat16 / float16 under bf16 / fp16, from training_args.bin; else the saved one)",
    )
    parser.add_argument("--checkpoints", help="comma-separated steps or folder names to evaluate (default: all)")
    parser.add_argument("--force", action="store_true", help="re-evaluate checkpoints that already have metrics")
    parser.add_argument("--progress", action="store_true", help="show progress bars")

    watch.add_arguments(parser)  # --watch, --poll, --idle-timeout (eval/watch.py)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False):
        return watch.run(args)
    only = [x.strip() for x in args.checkpoints.split(",")] if args.checkpoints else None
    try:
        if not Path(args.run_dir).is_dir():  # before the config, whose errors would hide this one
            raise ValueError(f"RUN_DIR {args.run_dir!r} is not a folder; pass a training output_dir")
        config = resolve_config(args)
        result = evaluate_run(args.run_dir, config, only=only, force=args.force, dtype=args.dtype,
                              progress=args.progress)  # fmt: skip
    except ValueError as err:  # input mistakes: one line, not a traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    eval_dir = Path(args.run_dir) / EVAL_DIR
    print(f"evaluated {len(result['evaluated'])} checkpoint(s): {', '.join(result['evaluated']) or '-'}")
    for name, why in result["skipped"]:
        print(f"skipped {name}: {why}")
    print(f"comparison: {eval_dir / 'comparison.csv'}\nreport: {eval_dir / 'report.html'}")
    return 0
