"""The evaluations of one model under an `EvalConfig`: `evaluate(backend, tokenizer, config, out_dir)` runs the
configured evaluations (user-turn probe, LiC, regret) into `out_dir/<evaluation>/` (each with its JSONL,
summary.json, plots and report.html) and writes `out_dir/metrics.json` last, with the flat metrics
(`probe/<dataset>/genuine_rate@t<T>`, `lic/p_sharded`, `regret/mean_regret`, ...: each evaluation's metrics under its
registered name; the shipped ones spelt by `fic.metric_names`).
That file marks the checkpoint as evaluated. Each evaluation is the `evaluate` function of its module, found through
the registry `fic.evaluations`.
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import time
from pathlib import Path

from fic.distributed import launch_state, on_main
from fic.eval_config import EvalConfig
from fic.evaluations import get_evaluation
from fic.jsonl import write_json
from fic.tracking import redact

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


def evaluate(backend, tokenizer, config: EvalConfig, out_dir: str | Path, *, model_path: str | Path | None = None,
             step: int | None = None, progress: bool = False, split: bool = False) -> dict:  # fmt: skip
    """Run `config.evaluations` with `backend` into `out_dir`; write `out_dir/metrics.json` last and return it.

    `split`: every process of a launch calls this with its own backend and runs its share of each evaluation whose
    `evaluate` takes `split` (probe, LiC); one that does not (regret) runs on the main process while the others wait
    for its metrics. The main process writes the files; every process returns the same record.

    The returned record: {"step", "checkpoint", "metrics": {name: value}, "config", "dtype" (the model's, as
    evaluated), "elapsed_s", "evaluated_at"}.
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
        module = get_evaluation(name).load()  # fic.evaluations: one registry row per evaluation

        def run(module=module, name=name, **kw):
            return module.evaluate(backend, tokenizer, config, out_dir / name, model_path, progress, **kw)

        if split and "split" in inspect.signature(module.evaluate).parameters:
            found = run(split=True)
        else:
            found = on_main(run, split)
        metrics.update(_namespaced(name, found))
        logger.info("%s evaluation of %s took %.1f s", name, model_path or "the model", time.time() - t0)
    record = {
        "step": step,
        "checkpoint": Path(model_path).name if model_path else None,
        "metrics": metrics,
        "config": redact(config.to_dict()),
        "dtype": backend_dtype(backend),
        "elapsed_s": round(time.time() - started, 3),
        "evaluated_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
    }
    if not split or launch_state().is_main_process:
        write_json(out_dir / METRICS_FILE, record)
    return record


def backend_dtype(backend) -> str | None:
    """The dtype the evaluated model computes in (`bfloat16`, ...): the transformers model's, or the vLLM engine's;
    None where the backend does not say (a remote endpoint)."""
    model = getattr(backend, "model", None)
    dtype = getattr(model, "dtype", None)
    if dtype is not None and getattr(getattr(model, "device", None), "type", None) == "cuda":
        import torch

        if torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") != dtype:
            name = str(torch.get_autocast_dtype("cuda")).removeprefix("torch.")
            return f"{name} (autocast over {str(dtype).removeprefix('torch.')} weights)"
    if dtype is None:
        engine = getattr(getattr(backend, "llm", None), "llm_engine", None)
        dtype = getattr(getattr(engine, "model_config", None), "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def _namespaced(name: str, metrics: dict[str, float]) -> dict[str, float]:
    """An evaluation's metrics live under its registered name (`lic/p_sharded`), so two evaluations never write the
    same key and a metric's name says which evaluation made it."""
    stray = [key for key in metrics if not key.startswith(f"{name}/")]
    if stray:
        raise ValueError(f"evaluation {name!r} returned metrics outside its namespace {name}/: {stray[:3]}")
    return metrics
