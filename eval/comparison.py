"""Run-level files of checkpoint evaluation, in `RUN_DIR/eval/`: `history.jsonl` (one row per evaluated checkpoint;
it survives the Trainer deleting old checkpoints), `comparison.json` / `comparison.csv` (step x metric, and each
checkpoint's genuine rate against the first one's as a paired difference, calibrated as well where both probe
folders hold labels), `plots/*.png` (each metric against the step) and `report.html`."""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from pathlib import Path

from fic.jsonl import append_rows, load_done, write_json
from fic.tracking import redact

from .checkpoint_io import EVAL_DIR, is_evaluated, list_checkpoints
from .evaluate import METRICS_FILE
from .report import run_report

logger = logging.getLogger(__name__)


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
    import matplotlib  # matplotlib: heavy, only the plots need it

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
    (`fic.followup_summary.compare`) from the probe turns of both, where both checkpoint folders still hold them;
    where both probe folders also hold labels of their turns (`fic review FOLDER --sample N` writes
    `labels.jsonl`), `calibrated` gives the prediction-powered difference paired by item beside it
    (`fic.followup_summary.compare_calibrated`)."""

    def folder(record: dict) -> Path:
        return run_dir / str(record.get("checkpoint") or "") / EVAL_DIR / "probe"

    def turns(record: dict) -> list[dict]:
        path = folder(record) / "samples.jsonl"
        return load_done(path) if record.get("checkpoint") and path.is_file() else []

    # numpy (~70 ms, fic.estimates): `fic eval-checkpoints` starts without it
    from fic.followup_summary import compare, compare_calibrated, row_key

    from .rates import LABELS_FILE, META_FILE, RatesError, overlap_items, read_labels

    def labels(record: dict, rows: list[dict]) -> tuple[dict | None, set]:
        """The checkpoint's labels by turn (None without a usable labels file) and its items inside the judge's fit."""
        where = folder(record)
        if not (where / LABELS_FILE).is_file():
            return None, set()
        meta = json.loads((where / META_FILE).read_text()) if (where / META_FILE).is_file() else {}
        try:
            found = read_labels(where / LABELS_FILE, rows, meta.get("run_id"), where)
        except RatesError as err:
            logger.warning("no calibrated difference for step %s: %s", record["step"], err)
            return None, set()
        return {row_key(r): bool(r["genuine"]) for r in found}, overlap_items(meta)

    with_turns = [(r, turns(r)) for r in records]
    with_turns = [(r, rows) for r, rows in with_turns if rows]
    if len(with_turns) < 2:
        return []
    (first, base), out = with_turns[0], []
    base_labels, base_excluded = labels(first, base)
    for record, rows in with_turns[1:]:
        entry = {"step": record["step"], "against_step": first["step"], **compare(base, rows)}
        if base_labels:
            other_labels, excluded = labels(record, rows)
            if other_labels:
                entry["calibrated"] = compare_calibrated(base, rows, base_labels, other_labels,
                                                         base_excluded | excluded)  # fmt: skip
        out.append(entry)
    return out


def write_comparison(run_dir: str | Path, config: dict | None = None) -> dict:
    """Write `RUN_DIR/eval/comparison.{json,csv}`, the metric plots and the run report; return the comparison."""
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
