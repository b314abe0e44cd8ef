"""Evaluate checkpoints: one model under an `EvalConfig`, or every checkpoint of a run (`fic eval-checkpoints`).

`evaluate(backend, tokenizer, config, out_dir)` runs the configured evaluations (user-turn probe, LiC, regret) into
`out_dir/<evaluation>/` (each with its JSONL, summary.json, plots and report.html) and writes `out_dir/metrics.json`
last, with the flat metrics (`probe/<dataset>/genuine_rate@t<T>`, `lic/p_sharded`, `regret/mean_regret`, ...,
all named by `fic.metric_names`). That file marks the checkpoint as evaluated. The training callback calls
`evaluate` on the model in memory; `fic eval-checkpoints RUN_DIR` loads each finished `checkpoint-N` folder from
disk (LoRA adapters on their base model), skips those already evaluated or being evaluated by another process, and
can use vLLM, so evaluation can run on another node while training goes on.

Run-level files, in `RUN_DIR/eval/`: `history.jsonl` (one row per evaluated checkpoint; it survives the Trainer
deleting old checkpoints), `comparison.json` / `comparison.csv` (step x metric), `plots/*.png` (each metric against
the step) and `report.html`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import logging
import os
import re
import shutil
import socket
import time
from pathlib import Path

from fic import metric_names
from fic.checkpoint_state import INTERRUPTED, checkpoint_problem
from fic.jsonl import append_rows, load_done, write_json
from fic.tracking import redact

from .config import EvalConfig

logger = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
EVAL_DIR = "eval"
METRICS_FILE = "metrics.json"
LOCK_FILE = ".lock"
STALE_LOCK_S = 6 * 3600


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a `checkpoint-N` folder, or None for any other name."""
    m = CHECKPOINT_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """`checkpoint-N` folders of a run, by step (complete or not)."""
    run_dir = Path(run_dir)
    found = [p for p in run_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step)


def is_evaluated(checkpoint: Path) -> bool:
    return (checkpoint / EVAL_DIR / METRICS_FILE).is_file()


# --- the evaluations -------------------------------------------------------------------------------------------


def _probe(backend, tokenizer, config: EvalConfig, out_dir: Path, model_path, progress) -> dict:
    from fic.followup_summary import flat_metrics
    from fic.judges import make_judge

    from .probe import run_probe

    judge = make_judge(config.judge, base_url=config.judge_base_url, model=config.judge_model)
    summary = run_probe(
        backend, tokenizer, list(config.datasets), out_dir, temperatures=config.temperatures, samples=config.samples,
        perturbations=config.perturbations, judge=judge, limit=config.limit, max_new_tokens=config.max_new_tokens,
        response_tokens=config.response_tokens, responses=config.responses, seed=config.seed, progress=progress,
        allow_judge_overlap=config.allow_judge_overlap,
    )  # fmt: skip
    metrics = flat_metrics(summary, perturbations=tuple(config.perturbations))
    for pert, cells in (summary.get("percent_changed") or {}).items():
        metrics[metric_names.probe_pct_changed(pert)] = cells["overall"]["changed"]
    if summary.get("n_samples"):
        metrics[metric_names.PROBE_JUDGE_ERROR_RATE] = summary.get("judge_errors", 0) / summary["n_samples"]
    return metrics


def _lic(backend, tokenizer, config: EvalConfig, out_dir: Path, model_path, progress) -> dict:
    from . import lic
    from .report import report_dir

    if config.lic_data == "synthetic":
        tasks = lic.tasks_from_synthetic(config.lic_limit, seed=config.seed)
    else:
        tasks = lic.tasks_from_source(config.lic_data, limit=config.lic_limit)
    if not tasks:
        raise ValueError(f"eval.lic_data={config.lic_data!r}: no task with shards and an automatic checker")
    summary = lic.run_lic(
        backend, tokenizer, tasks, out_dir, modes=config.lic_modes, runs=config.lic_runs,
        temperature=config.lic_temperature, max_new_tokens=config.lic_max_new_tokens, seed=config.seed,
        progress=progress,
    )  # fmt: skip
    report_dir("lic", out_dir)
    metrics = {}
    for mode, scores in summary["modes"].items():
        for score in metric_names.LIC_SCORES:
            metrics[metric_names.lic_score(score, mode)] = scores[score]
    if "recovery" in summary:
        metrics[metric_names.LIC_RECOVERY] = summary["recovery"]
    return metrics


def _regret(backend, tokenizer, config: EvalConfig, out_dir: Path, model_path, progress) -> dict:
    """`fic regret` on the checkpoint folder (the regret evaluation loads its model from a path)."""
    from .clarify import regret
    from .report import report_dir

    if model_path is None:
        raise ValueError("eval.evaluations includes regret, which loads the model from its checkpoint folder; "
                         "no folder was given (evaluate a saved checkpoint)")  # fmt: skip
    parser = argparse.ArgumentParser()
    regret.add_arguments(parser)
    argv = ["--scenario", config.regret_scenario, "--policy", config.regret_policy, "--model", str(model_path),
            "--limit", str(config.regret_episodes), "--seed", str(config.seed), "--out", str(out_dir)]  # fmt: skip
    if config.regret_data:
        argv += ["--data", config.regret_data]
    status = regret.run(parser.parse_args(argv))
    if status:
        raise RuntimeError(f"regret evaluation failed (exit status {status}); see the error above")
    summary = json.loads((out_dir / "summary.json").read_text())
    report_dir("regret", out_dir)
    metrics = {metric_names.REGRET_MEAN: summary["regret"], metric_names.REGRET_VALUE: summary["value"]}
    for key in ("resolution_rate", "turns_mean", "abstain_rate"):
        if key in summary:
            metrics[metric_names.regret_metric(key)] = summary[key]
    for key, name in (("ineffective_clarification", "ineffective_rate"), ("stopping_errors", "stopping_error_rate")):
        if isinstance(summary.get(key), dict) and "rate" in summary[key]:
            metrics[metric_names.regret_metric(name)] = summary[key]["rate"]
    return metrics


EVALUATORS = {"probe": _probe, "lic": _lic, "regret": _regret}


def evaluate(backend, tokenizer, config: EvalConfig, out_dir: str | Path, *, model_path: str | Path | None = None,
             step: int | None = None, progress: bool = False) -> dict:  # fmt: skip
    """Run `config.evaluations` with `backend` into `out_dir`; write `out_dir/metrics.json` last and return it.

    The returned record: {"step", "checkpoint", "metrics": {name: value}, "config", "elapsed_s", "evaluated_at"}.
    Each evaluation resumes from its own files, so an interrupted evaluation reruns only what is missing.
    """
    config.check_probe_datasets()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    metrics: dict[str, float] = {}
    previous = out_dir / METRICS_FILE
    if previous.is_file():  # a later pass (another evaluation, --force) adds to what is there
        metrics.update(json.loads(previous.read_text()).get("metrics", {}))
    for name in config.evaluations:
        t0 = time.time()
        metrics.update(EVALUATORS[name](backend, tokenizer, config, out_dir / name, model_path, progress))
        logger.info("%s evaluation of %s took %.1f s", name, model_path or "the model", time.time() - t0)
    record = {
        "step": step,
        "checkpoint": Path(model_path).name if model_path else None,
        "metrics": metrics,
        "config": redact(config.to_dict()),
        "elapsed_s": round(time.time() - started, 3),
        "evaluated_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
    }
    write_json(out_dir / METRICS_FILE, record)
    return record


# --- loading a checkpoint from disk ----------------------------------------------------------------------------


def adapter_base(checkpoint: Path) -> str | None:
    """The base model of a LoRA checkpoint (from adapter_config.json), or None for a full checkpoint."""
    path = checkpoint / "adapter_config.json"
    if not path.is_file():
        return None
    base = json.loads(path.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path}: no base_model_name_or_path; cannot tell which model the adapter belongs to")
    return base


def load_checkpoint(checkpoint: str | Path, dtype: str | None = None, device: str | None = None):
    """(model, tokenizer) of a checkpoint folder; a LoRA adapter is loaded on its base model and merged."""
    import torch

    from fic.modeling import load_model, load_tokenizer

    checkpoint = Path(checkpoint)
    base = adapter_base(checkpoint)
    has_tokenizer = (checkpoint / "tokenizer_config.json").is_file()
    tokenizer = load_tokenizer(str(checkpoint) if has_tokenizer or base is None else base)
    if base is None:
        model = load_model(str(checkpoint), dtype=dtype or "auto")
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(load_model(base, dtype=dtype or "auto"), str(checkpoint))
        model = model.merge_and_unload()
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.eval()
    return model, tokenizer


def materialize(checkpoint: Path, dtype: str | None = None) -> Path:
    """A folder with full weights for engines that take a path (vLLM): the checkpoint itself, or for a LoRA
    checkpoint the merged model written to `checkpoint/eval/.merged` (removed by the caller after use)."""
    if adapter_base(checkpoint) is None:
        return checkpoint
    target = checkpoint / EVAL_DIR / ".merged"
    if not (target / "config.json").is_file():
        model, tokenizer = load_checkpoint(checkpoint, dtype=dtype, device="cpu")
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        del model
    return target


def make_backend(checkpoint: Path, backend: str, batch_size: int = 8, dtype: str | None = None):
    """(backend, tokenizer, cleanup) for a checkpoint folder."""
    from fic.generation import get_backend

    if backend == "transformers":
        model, tokenizer = load_checkpoint(checkpoint, dtype=dtype)
        return get_backend("transformers", model, tokenizer=tokenizer, batch_size=batch_size), tokenizer, None
    from fic.modeling import load_tokenizer

    path = materialize(checkpoint, dtype=dtype)
    engine = get_backend("vllm", model=str(path))
    cleanup = (lambda: shutil.rmtree(path, ignore_errors=True)) if path != checkpoint else None
    return engine, getattr(engine, "tokenizer", None) or load_tokenizer(str(path)), cleanup


# --- a simple cross-process lock (shared filesystems included) ---------------------------------------------------


class CheckpointLock:
    """`checkpoint/eval/.lock`, created exclusively; held by host:pid. A lock older than `STALE_LOCK_S`, or held by
    a dead process on this host, is taken over (a crashed evaluator must not block a checkpoint forever)."""

    def __init__(self, checkpoint: Path):
        self.path = checkpoint / EVAL_DIR / LOCK_FILE
        self.held = False

    def _stale(self) -> bool:
        try:
            owner = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return time.time() - self.path.stat().st_mtime > 60 if self.path.exists() else True
        if time.time() - owner.get("time", 0) > STALE_LOCK_S:
            return True
        if owner.get("host") == socket.gethostname():
            try:
                os.kill(int(owner.get("pid", -1)), 0)
            except ProcessLookupError:
                return True
            except (PermissionError, ValueError):
                return False
        return False

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale():
                    return False
                logger.warning("%s: taking over a stale lock", self.path)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}, f)
            self.held = True
            return True
        return False

    def owner(self) -> str:
        try:
            owner = json.loads(self.path.read_text())
            return f"{owner.get('host')}:{owner.get('pid')}"
        except (OSError, ValueError):
            return "another process"

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


# --- run-level comparison ----------------------------------------------------------------------------------------


def record_history(run_dir: str | Path, record: dict) -> None:
    append_rows(Path(run_dir) / EVAL_DIR / "history.jsonl", [record])


def collect(run_dir: str | Path) -> list[dict]:
    """One record per evaluated step, from the history and the checkpoint folders still present; when a step was
    evaluated more than once, its metrics are merged and the latest value of each wins."""
    run_dir = Path(run_dir)
    by_step: dict = {}
    rows = load_done(run_dir / EVAL_DIR / "history.jsonl")
    for checkpoint in list_checkpoints(run_dir):
        if is_evaluated(checkpoint):
            rows.append(json.loads((checkpoint / EVAL_DIR / METRICS_FILE).read_text()))
    for row in sorted(rows, key=lambda r: r.get("evaluated_at", "")):
        if row.get("step") is None:
            continue
        merged = by_step.setdefault(row["step"], {"metrics": {}})
        merged.update({k: v for k, v in row.items() if k != "metrics"})
        merged["metrics"].update(row.get("metrics", {}))  # a later evaluation of a metric wins
    return [by_step[s] for s in sorted(by_step)]


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "metric"


def plot_metrics(records: list[dict], out_dir: Path) -> list[Path]:
    """One PNG per metric family (the name before `@`), each condition after `@` a line, against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families: dict[str, dict[str, list]] = {}
    for record in records:
        for name, value in record["metrics"].items():
            if isinstance(value, (int, float)):
                family, _, condition = name.partition("@")
                families.setdefault(family, {}).setdefault(condition or family, []).append((record["step"], value))
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):
        old.unlink()
    paths = []
    for family, lines in sorted(families.items()):
        fig, ax = plt.subplots(figsize=(4.5, 3))
        for condition, points in sorted(lines.items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=condition)
        ax.set_xlabel("step")
        ax.set_title(family, fontsize=9)
        if len(lines) > 1:
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out_dir / f"{_safe_name(family)}.png")
        fig.savefig(paths[-1], dpi=90)
        plt.close(fig)
    return paths


def probe_differences(run_dir: Path, records: list[dict]) -> list[dict]:
    """Each evaluated checkpoint's genuine rate against the first one's: the paired, item-clustered difference
    (`fic.followup_summary.compare`) from the probe turns of both, where both checkpoint folders still hold them."""
    from fic.followup_summary import compare

    def turns(record: dict) -> list[dict]:
        path = run_dir / str(record.get("checkpoint") or "") / EVAL_DIR / "probe" / "samples.jsonl"
        return load_done(path) if record.get("checkpoint") and path.is_file() else []

    with_turns = [(r, turns(r)) for r in records]
    with_turns = [(r, rows) for r, rows in with_turns if rows]
    if len(with_turns) < 2:
        return []
    (first, base), out = with_turns[0], []
    for record, rows in with_turns[1:]:
        out.append({"step": record["step"], "against_step": first["step"], **compare(base, rows)})
    return out


def write_comparison(run_dir: str | Path, config: dict | None = None) -> dict:
    """Write `RUN_DIR/eval/comparison.{json,csv}`, the metric plots and the run report; return the comparison."""
    from .report import run_report

    run_dir = Path(run_dir)
    eval_dir = run_dir / EVAL_DIR
    records = collect(run_dir)
    names = sorted({n for r in records for n in r["metrics"]})
    if config is None and (eval_dir / "config.json").is_file():
        config = json.loads((eval_dir / "config.json").read_text())
    comparison = {
        "checkpoints": [{k: r.get(k) for k in ("step", "checkpoint", "metrics", "evaluated_at")} for r in records],
        "metrics": names,
        "config": redact(config or (records[-1].get("config") if records else None)),
        "differences": probe_differences(run_dir, records),
    }
    write_json(eval_dir / "comparison.json", comparison)
    tmp = eval_dir / "comparison.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "checkpoint", *names])
        for r in records:
            writer.writerow([r["step"], r.get("checkpoint") or "", *[r["metrics"].get(n, "") for n in names]])
    os.replace(tmp, eval_dir / "comparison.csv")
    plot_metrics(records, eval_dir / "plots")
    run_report(run_dir, comparison)
    return comparison


# --- the command -------------------------------------------------------------------------------------------------


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
    from safetensors import SafetensorError

    from fic.modeling import ModelLoadError

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
        lock = CheckpointLock(checkpoint)
        if not lock.acquire():
            skipped.append((checkpoint.name, f"being evaluated by {lock.owner()}"))
            continue
        cleanup = None
        try:
            logger.info("evaluating %s", checkpoint)
            try:
                backend, tokenizer, cleanup = make_backend(checkpoint, config.backend, config.batch_size, dtype)
            except (ModelLoadError, SafetensorError, OSError) as err:  # damaged files: skip it, evaluate the rest
                logger.warning("%s: cannot load it, skipped: %s", checkpoint, err)
                skipped.append((checkpoint.name, f"unreadable ({str(err).splitlines()[0]})"))
                continue
            record = evaluate(backend, tokenizer, config, checkpoint / EVAL_DIR, model_path=checkpoint,
                              step=checkpoint_step(checkpoint), progress=progress)  # fmt: skip
            record_history(run_dir, record)
            done.append(checkpoint.name)
            del backend
        finally:
            lock.release()
            if cleanup:
                cleanup()
    for name, why in skipped:
        logger.info("skipped %s: %s", name, why)
    write_comparison(run_dir, config.to_dict())
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
