"""Evaluating a run's checkpoints: `evaluate_checkpoint`, the one per-checkpoint step (lock -> backend -> `evaluate` ->
history -> comparison) that `fic eval-checkpoints`, its `--watch` and the training callback all take, and
`evaluate_run`, every finished and not yet evaluated checkpoint of a run; `resolve_config` reads the run's saved
`eval:` block with the command-line flags on top."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from safetensors import SafetensorError

from fic.checkpoint_state import INTERRUPTED, checkpoint_problem
from fic.distributed import launch_state, on_main
from fic.errors import ModelLoadError
from fic.eval_config import EvalConfig
from fic.tracking import redact

from .checkpoint_io import EVAL_DIR, CheckpointLock, checkpoint_step, is_evaluated, list_checkpoints, make_backend
from .comparison import record_history, write_comparison
from .evaluate import evaluate

logger = logging.getLogger(__name__)


class UnreadableCheckpoint(Exception):
    """A checkpoint whose files cannot be loaded (damaged, partial); the message says why."""


def evaluate_checkpoint(checkpoint: Path, config: EvalConfig, open_backend, run_dir: str | Path, *,
                        step: int | None, progress: bool = False, split: bool = False) -> dict | None:  # fmt: skip
    """The one per-checkpoint step: take the checkpoint's lock, open a backend (`open_backend() -> (backend,
    tokenizer, cleanup)`), run `evaluate`, then append the run's history and rewrite its comparison. Returns the
    record, or None when another process holds the lock; a backend that cannot load raises `UnreadableCheckpoint`.

    `split`: every process of a launch (the training callback's ranks) calls this with its own backend and evaluates
    its share; the main process takes the lock (every rank learns whether it did) and writes the run's files, and
    every process returns the same record."""
    main = not split or launch_state().is_main_process
    lock = CheckpointLock(checkpoint)
    if not on_main(lambda: lock.acquire(), split):
        return None
    cleanup = None
    try:
        try:
            backend, tokenizer, cleanup = open_backend()
        except (ModelLoadError, SafetensorError, OSError) as err:  # damaged files: the caller skips it
            raise UnreadableCheckpoint(str(err).splitlines()[0]) from err
        record = evaluate(backend, tokenizer, config, checkpoint / EVAL_DIR, model_path=checkpoint, step=step,
                          progress=progress, split=split)  # fmt: skip
        del backend
    finally:
        if main:
            lock.release()
        if cleanup:
            cleanup()
    if main:
        record_history(run_dir, record)
        write_comparison(run_dir, redact(config.to_dict()))
    return record


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
        "judge_contrast": True if getattr(args, "contrast", False) else None,
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
