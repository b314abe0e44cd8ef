"""`fic eval-checkpoints RUN_DIR`: evaluate every finished `checkpoint-N` of a run, and the one per-checkpoint step
the training callback shares (`evaluate_checkpoint`: lock -> backend -> `evaluate` -> history -> comparison).

Each finished checkpoint folder is loaded from disk (LoRA adapters on their base model), those already evaluated or
being evaluated by another process are skipped, and vLLM can serve it, so evaluation can run on another node while
training goes on (`--watch`, `eval/watch.py`). The evaluations are `fic.eval.evaluate`; the run-level files
`fic.eval.comparison`; loading and the lock `fic.eval.checkpoint_io`.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from fic.checkpoint_state import INTERRUPTED, checkpoint_problem
from fic.tracking import redact

from .checkpoint_io import (  # noqa: F401  (re-exported: the names the watch and tests read from here)
    EVAL_DIR,
    CheckpointLock,
    checkpoint_step,
    is_evaluated,
    list_checkpoints,
    make_backend,
)
from .comparison import record_history, write_comparison
from .config import EvalConfig
from .evaluate import EVALUATORS, METRICS_FILE, evaluate  # noqa: F401  (re-exported)

logger = logging.getLogger(__name__)


class UnreadableCheckpoint(Exception):
    """A checkpoint whose files cannot be loaded (damaged, partial); the message says why."""


def evaluate_checkpoint(checkpoint: Path, config: EvalConfig, open_backend, run_dir: str | Path, *,
                        step: int | None, progress: bool = False) -> dict | None:  # fmt: skip
    """The one per-checkpoint step: take the checkpoint's lock, open a backend (`open_backend() -> (backend,
    tokenizer, cleanup)`), run `evaluate`, then append the run's history and rewrite its comparison. Returns the
    record, or None when another process holds the lock; a backend that cannot load raises `UnreadableCheckpoint`."""
    from safetensors import SafetensorError

    from fic.errors import ModelLoadError

    lock = CheckpointLock(checkpoint)
    if not lock.acquire():
        return None
    cleanup = None
    try:
        try:
            backend, tokenizer, cleanup = open_backend()
        except (ModelLoadError, SafetensorError, OSError) as err:  # damaged files: the caller skips it
            raise UnreadableCheckpoint(str(err).splitlines()[0]) from err
        record = evaluate(backend, tokenizer, config, checkpoint / EVAL_DIR, model_path=checkpoint, step=step,
                          progress=progress)  # fmt: skip
        del backend
    finally:
        lock.release()
        if cleanup:
            cleanup()
    record_history(run_dir, record)
    write_comparison(run_dir, redact(config.to_dict()))
    return record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a training output folder holding checkpoint-N folders")
    parser.add_argument("--evaluations", help="comma-separated: probe,lic,regret (default: the run's eval config)")
    parser.add_argument("--datasets", help="comma-separated NAME[:PATH] held-out sets for the probe")
    parser.add_argument("--temperatures", help="comma-separated probe temperatures, e.g. 0,0.7,1.0")
    from fic import cli_args

    # No defaults here: what is not given comes from the run's own eval config (RUN_DIR/eval/config.json).
    cli_args.add_samples_argument(parser, None)
    cli_args.add_limit_argument(parser, None)
    cli_args.add_judge_arguments(parser, default=None)
    cli_args.add_judge_overlap_argument(parser)
    parser.add_argument("--backend", choices=["transformers", "vllm"], help="generation backend (default: config)")
    parser.add_argument("--dtype", help="model dtype: auto, bfloat16, float16, float32")
    parser.add_argument("--checkpoints", help="comma-separated steps or folder names to evaluate (default: all)")
    parser.add_argument("--force", action="store_true", help="re-evaluate checkpoints that already have metrics")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    from .watch import add_arguments as add_watch_arguments

    add_watch_arguments(parser)  # --watch, --poll, --idle-timeout (eval/watch.py)


def resolve_config(args: argparse.Namespace) -> EvalConfig:
    """The run's saved eval config (`RUN_DIR/eval/config.json`, written by the training callback), or the defaults,
    with the command-line options on top."""
    path = Path(args.run_dir) / EVAL_DIR / "config.json"
    values = json.loads(path.read_text()) if path.is_file() else {}
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    overrides = {
        "evaluations": split(args.evaluations) if args.evaluations else None,
        "datasets": split(args.datasets) if args.datasets else None,
        "temperatures": [float(t) for t in split(args.temperatures)] if args.temperatures else None,
        "samples": args.samples, "limit": args.limit, "judge": args.judge, "judge_base_url": args.judge_base_url,
        "judge_model": args.judge_model, "backend": args.backend,
        "allow_judge_overlap": True if getattr(args, "allow_judge_overlap", False) else None,
    }  # fmt: skip
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["enabled"] = True
    try:
        return EvalConfig.from_dict(values)
    except ValueError as err:
        hint = "" if path.is_file() else f" ({path} not found: the run was trained without the eval callback)"
        raise ValueError(f"fic eval-checkpoints: {err}{hint}") from None


def evaluate_run(run_dir: str | Path, config: EvalConfig, only: list[str] | None = None, force: bool = False,
                 dtype: str | None = None, progress: bool = False) -> dict:  # fmt: skip
    """Evaluate the complete, not yet evaluated checkpoints of `run_dir`; return {"evaluated", "skipped"}."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR {str(run_dir)!r} is not a folder; pass a training output_dir")
    checkpoints = list_checkpoints(run_dir)
    if only:
        wanted = {o if o.startswith("checkpoint-") else f"checkpoint-{o}" for o in only}
        missing = wanted - {c.name for c in checkpoints}
        if missing:
            raise ValueError(
                f"--checkpoints: {sorted(missing)} not in {run_dir}; have {[c.name for c in checkpoints]}"
            )
        checkpoints = [c for c in checkpoints if c.name in wanted]
    if not checkpoints:
        raise ValueError(f"{run_dir}: no checkpoint-N folder; is this a training output_dir with save_steps set?")
    done, skipped = [], []
    for checkpoint in checkpoints:
        problem = checkpoint_problem(checkpoint)
        if problem:
            still = problem == INTERRUPTED
            skipped.append(
                (
                    checkpoint.name,
                    "still being written (no trainer_state.json)" if still else f"unreadable ({problem})",
                )
            )
            continue
        if is_evaluated(checkpoint) and not force:
            skipped.append((checkpoint.name, "already evaluated"))
            continue
        logger.info("evaluating %s", checkpoint)
        try:
            record = evaluate_checkpoint(
                checkpoint, config, lambda c=checkpoint: make_backend(c, config.backend, config.batch_size, dtype),
                run_dir, step=checkpoint_step(checkpoint), progress=progress,
            )  # fmt: skip
        except UnreadableCheckpoint as err:
            logger.warning("%s: cannot load it, skipped: %s", checkpoint, err)
            skipped.append((checkpoint.name, f"unreadable ({err})"))
            continue
        if record is None:
            skipped.append((checkpoint.name, f"being evaluated by {CheckpointLock(checkpoint).owner()}"))
            continue
        done.append(checkpoint.name)
    for name, why in skipped:
        logger.info("skipped %s: %s", name, why)
    write_comparison(run_dir, redact(config.to_dict()))
    return {"evaluated": done, "skipped": skipped}


def run(args: argparse.Namespace) -> int:
    import sys

    if getattr(args, "watch", False):
        from .watch import run as watch

        return watch(args)
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
