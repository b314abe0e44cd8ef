"""Evaluate a run's checkpoints while it trains, off the training nodes: `fic eval-checkpoints RUN_DIR --watch`.

Every `--poll` seconds the watch lists `RUN_DIR/checkpoint-N`. A checkpoint is taken once it is whole
(`fic.checkpoint_state.is_complete`, the test `resume_from_checkpoint=auto` uses: `trainer_state.json`, which the
Trainer writes last, and undamaged weight files) and has no `eval/metrics.json` yet, and `evaluate_run` evaluates it as a
plain `fic eval-checkpoints` would: the same files in `checkpoint-N/eval/`, the same row in `eval/history.jsonl`, the
same comparison, plots and report, and the same lock, so the in-training callback or a second watcher never
evaluates it again. Settings come from `RUN_DIR/eval/config.json`, which training writes when it starts (with the
in-training evaluation on or off), with the command-line flags on top.

Killed and restarted, the watch resumes: an evaluated checkpoint has its `metrics.json` (written last) and is never
evaluated again; one whose evaluation was cut off has none, its lock names a dead process (taken over at once on the
same host, after `STALE_LOCK_S` from another) and its evaluation resumes from its own files. SIGTERM (`scancel`, a
preemption) releases the lock before the watch exits.

The watch stops when the run has written its final model: weights in `RUN_DIR` itself (`Trainer.save_model` after
training), no older than the `trainer_state.json` of the last checkpoint, whose `global_step` reached `max_steps`
(the Trainer always saves at the last step under `save_strategy: steps`). A preempted run also writes final weights
after its SIGTERM checkpoint, but that checkpoint stopped short of `max_steps`, so the watch waits for the requeued
job. A run that saved no checkpoint is finished once it has final weights. `--idle-timeout S` also stops the watch
when no new checkpoint has appeared and none was evaluated for S seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

from fic.checkpoint_state import is_complete

from .checkpoint_io import EVAL_DIR, is_evaluated, list_checkpoints
from .checkpoint_runs import evaluate_run, resolve_config

logger = logging.getLogger(__name__)

FINAL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The watch flags of `fic eval-checkpoints`."""
    parser.add_argument("--watch", action="store_true",
                        help="keep evaluating checkpoints as training writes them; stop when the run writes its "
                             "final model (or after --idle-timeout)")  # fmt: skip
    parser.add_argument("--poll", type=float, default=30.0, help="with --watch: seconds between looks (default 30)")
    parser.add_argument("--idle-timeout", type=float, default=None,
                        help="with --watch: stop after this many seconds without a new checkpoint (default: none)")  # fmt: skip


def final_model(run_dir: Path) -> Path | None:
    """The final weights file `Trainer.save_model` wrote into the run folder, or None."""
    return next((run_dir / n for n in FINAL_WEIGHTS if (run_dir / n).is_file()), None)


def is_run(run_dir: Path) -> bool:
    """Whether `run_dir` looks like a training output folder (a started or finished run)."""
    has_checkpoint = any(True for _ in list_checkpoints(run_dir))
    return has_checkpoint or (run_dir / EVAL_DIR / "config.json").is_file() or final_model(run_dir) is not None


def finished(run_dir: Path) -> bool:
    """Whether the run has written its final model after its last step (see the module docstring)."""
    weights = final_model(run_dir)
    if weights is None:
        return False
    whole = [c for c in list_checkpoints(run_dir) if is_complete(c)]
    if not whole:
        return True
    state_path = whole[-1] / "trainer_state.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        return False  # being rewritten; look again at the next poll
    last_step = state.get("global_step", 0) >= state.get("max_steps", 0) > 0
    return last_step and weights.stat().st_mtime >= state_path.stat().st_mtime


def pending(run_dir: Path, given_up: set[str]) -> list[str]:
    """Whole checkpoints without metrics, by step (those that could not be loaded are left out)."""
    return [c.name for c in list_checkpoints(run_dir)
            if is_complete(c) and not is_evaluated(c) and c.name not in given_up]  # fmt: skip


def watch(run_dir: str | Path, config, *, poll: float = 30.0, idle_timeout: float | None = None,
          dtype: str | None = None, progress: bool = False) -> dict:  # fmt: skip
    """Evaluate the checkpoints of `run_dir` as they become whole until the run is finished or idle.

    Returns:
        `{"evaluated": [names], "skipped": [(name, why)], "stopped": why}`.
    """
    run_dir = Path(run_dir)
    evaluated, skipped, given_up, seen = [], [], set(), set()
    last_news = time.monotonic()
    while True:
        done = finished(run_dir)  # before the pass: every checkpoint of a finished run is then in this pass
        todo = pending(run_dir, given_up)
        if todo:
            result = evaluate_run(run_dir, config, only=todo, dtype=dtype, progress=progress)
            evaluated += result["evaluated"]
            for name, why in result["skipped"]:
                if why.startswith("unreadable"):  # damaged files do not heal; do not reload them every poll
                    given_up.add(name)
                    skipped.append((name, why))
            if result["evaluated"]:
                last_news = time.monotonic()
        whole = {c.name for c in list_checkpoints(run_dir) if is_complete(c)}
        if whole - seen:
            seen |= whole
            last_news = time.monotonic()
        if done:
            return {"evaluated": evaluated, "skipped": skipped, "stopped": f"the run wrote its final model "
                    f"({final_model(run_dir).name})"}  # fmt: skip
        if idle_timeout is not None and time.monotonic() - last_news > idle_timeout:
            return {"evaluated": evaluated, "skipped": skipped,
                    "stopped": f"no new checkpoint for {idle_timeout:g} s (--idle-timeout)"}  # fmt: skip
        time.sleep(poll)


def _check(args: argparse.Namespace) -> None:
    """Flag and folder mistakes, as one-line `ValueError`s."""
    if args.force or args.checkpoints:
        flag = "--force" if args.force else "--checkpoints"
        raise ValueError(f"{flag} cannot be combined with --watch, which evaluates every checkpoint once; "
                         "run without --watch to re-evaluate or pick checkpoints")  # fmt: skip
    if args.poll <= 0 or (args.idle_timeout is not None and args.idle_timeout <= 0):
        raise ValueError(f"--poll {args.poll:g} / --idle-timeout {args.idle_timeout}: give positive seconds")
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR {args.run_dir!r} is not a folder; pass a training output_dir (start the watch "
                         "once training has started)")  # fmt: skip
    if not is_run(run_dir):
        raise ValueError(f"RUN_DIR {args.run_dir!r} is not a training run: no checkpoint-N folder, no "
                         "eval/config.json (written when training starts) and no final model; pass the recipe's "
                         "output_dir")  # fmt: skip


def _stop_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through evaluate_run's `finally`, which releases the checkpoint lock


def run(args: argparse.Namespace) -> int:
    """`fic eval-checkpoints RUN_DIR --watch`: 0 when the run finished or went idle, 2 on an input mistake."""
    try:
        _check(args)
        config = resolve_config(args)  # one-line errors for settings (e.g. a probe without eval.datasets)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    logger.info("watching %s every %g s", args.run_dir, args.poll)
    result = watch(args.run_dir, config, poll=args.poll, idle_timeout=args.idle_timeout, dtype=args.dtype,
                   progress=args.progress)  # fmt: skip
    eval_dir = Path(args.run_dir) / EVAL_DIR
    print(f"evaluated {len(result['evaluated'])} checkpoint(s): {', '.join(result['evaluated']) or '-'}")
    for name, why in result["skipped"]:
        print(f"skipped {name}: {why}")
    print(f"stopped: {result['stopped']}")
    if (eval_dir / "comparison.csv").is_file():
        print(f"comparison: {eval_dir / 'comparison.csv'}\nreport: {eval_dir / 'report.html'}")
    return 0
