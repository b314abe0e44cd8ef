"""The evaluations of one model under an `EvalConfig`: `evaluate(backend, tokenizer, config, out_dir)` runs the
configured evaluations (user-turn probe, LiC, regret) into `out_dir/<evaluation>/` (each with its JSONL,
summary.json, plots and report.html) and writes `out_dir/metrics.json` last, with the flat metrics
(`probe/<dataset>/genuine_rate@t<T>`, `lic/p_sharded`, `regret/mean_regret`, ..., all named by `fic.metric_names`).
That file marks the checkpoint as evaluated. `EVALUATORS` maps each evaluation's name to the function that runs it.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from pathlib import Path

from fic import metric_names
from fic.eval_config import EvalConfig
from fic.jsonl import write_json
from fic.tracking import redact

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


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
    """The regret evaluation (`fic.eval.clarify.regret.run_regret`) on the checkpoint folder (it loads its model from a
    path)."""
    from .clarify import regret
    from .report import report_dir

    if model_path is None:
        raise ValueError("eval.evaluations includes regret, which loads the model from its checkpoint folder; "
                         "no folder was given (evaluate a saved checkpoint)")  # fmt: skip
    extra = {"data": config.regret_data} if config.regret_data else {}
    summary = regret.run_regret(regret.settings(config.regret_scenario, config.regret_policy, out_dir,
                                                model=str(model_path), limit=config.regret_episodes,
                                                seed=config.seed, **extra))  # fmt: skip
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
