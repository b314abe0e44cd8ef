"""HTML reports: one per evaluation (probe, LiC, regret) and one per training run.

Each function takes plain dicts (the summary and rows an evaluation wrote to disk) and writes one self-contained
HTML file: tables shaped like the papers' (genuine follow-up by model x dataset x temperature, the label
distribution, LiC P / A90 / U90-10, regret), the PNG plots found next to it, and the samples, browsable by dataset,
temperature and control. Tables are recomputed from the sample rows where possible, so a report never depends on
the exact shape of a summary written by an older version. All model text goes through `report_html`, which escapes it.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path

from fic import metric_names
from fic.data import parse_spec
from fic.jsonl import load_done
from fic.judges.labels import JUDGE_ERROR, LABELS
from fic.judges.validity import validity_line
from fic.tracking import redact

from .report_html import (
    conversation,
    details,
    esc,
    fmt,
    join,
    link,
    page,
    plots,
    rate_cell,
    section,
    table,
    tag,
    write_page,
)

logger = logging.getLogger(__name__)

MAX_SAMPLES = 400  # samples shown per report; the JSONL next to it holds them all


def _label_order(labels) -> list[str]:
    known = [*LABELS, JUDGE_ERROR]
    return [lab for lab in known if lab in labels] + sorted(set(labels) - set(known))


def _temp(value) -> float:
    return float(value)


def spread(rows: list[dict], limit: int, key) -> list[dict]:
    """Up to `limit` rows taken round-robin across the groups of `key`, so every cell shows some samples."""
    groups: dict = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    picked, queues = [], [list(g) for _, g in sorted(groups.items(), key=lambda kv: str(kv[0]))]
    while queues and len(picked) < limit:
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
        queues = [q for q in queues if q]
    return picked


def _settings_table(settings: dict) -> str:
    rows = [[k, json.dumps(v) if isinstance(v, (list, dict)) else fmt(v)] for k, v in sorted(redact(settings).items())]
    return table(["setting", "value"], rows) if rows else ""


def probe_tables(samples: list[dict]) -> dict:
    """Genuine rate (95% interval clustered by item) per (model, dataset, perturbation) x temperature and label shares
    per (dataset, temperature), from sample rows alone. Judge errors (`genuine` None) are excluded and counted."""
    # numpy (~70 ms, fic.estimates): the light commands that write a report (regret, eval-checkpoints) skip it
    from fic.followup_summary import raw_rate

    cells: dict = defaultdict(list)
    labels: dict = defaultdict(list)
    for row in samples:
        key = (row.get("model", ""), row["dataset"], row.get("perturbation", "none"), _temp(row["temperature"]))
        cells[key].append(row)
        labels[(row.get("model", ""), row["dataset"], _temp(row["temperature"]))].append(row.get("label"))
    rates = {key: raw_rate(rows) for key, rows in cells.items()}
    shares = {k: {lab: v.count(lab) / len(v) for lab in set(v)} for k, v in labels.items()}
    return {"rates": rates, "labels": shares}


def probe_rate_table(samples: list[dict], caption: str = "Genuine follow-up rate [95% CI]") -> str:
    tables = probe_tables(samples)
    temps = sorted({k[3] for k in tables["rates"]})
    with_model = any(k[0] for k in tables["rates"])
    rows = []
    for mdp in sorted({k[:3] for k in tables["rates"]}):
        cells = [rate_cell(tables["rates"].get((*mdp, t))) for t in temps]
        rows.append(([mdp[0]] if with_model else []) + [mdp[1], mdp[2], *cells])
    headers = (["model"] if with_model else []) + ["dataset", "control", *[f"T={t:g}" for t in temps]]
    return table(headers, rows, caption)


def probe_label_table(samples: list[dict]) -> str:
    shares = probe_tables(samples)["labels"]
    order = _label_order({lab for s in shares.values() for lab in s})
    with_model = any(k[0] for k in shares)
    rows = [([k[0]] if with_model else []) + [k[1], f"{k[2]:g}", *[shares[k].get(lab, 0.0) for lab in order]]
            for k in sorted(shares)]  # fmt: skip
    headers = (["model"] if with_model else []) + ["dataset", "T", *order]
    return table(headers, rows, "Label distribution (share of generated user turns)")


def _sample_block(row: dict, blind: bool = False) -> str:
    verdict = "" if blind else f" \u00b7 {row.get('label', '?')}"
    head = f"{row.get('item_id', '?')} \u00b7 sample {row.get('sample', 0)}{verdict}"
    body = [conversation(row.get("messages") or [], row.get("user_turn", ""))]
    if not blind and row.get("rationale"):
        body.append(tag("p", f"judge ({row.get('judge', '?')}): {row['rationale']}", cls="note"))
    return details(head, *body)


def _browse(rows: list[dict], group_key, group_name, block, limit: int) -> str:
    shown = spread(rows, limit, group_key)
    groups: dict = defaultdict(list)
    for row in shown:
        groups[group_key(row)].append(row)
    parts = [details(f"{group_name(k)} ({len(v)} shown)", *[block(r) for r in v]) for k, v in sorted(groups.items())]
    if len(shown) < len(rows):
        parts.append(tag("p", f"{len(shown)} of {len(rows)} shown; all are in the JSONL file next to this report.",
                         cls="note"))  # fmt: skip
    return join(parts)


def probe_report(summary: dict, samples: list[dict], out_path: str | Path, title: str | None = None,
                 max_samples: int = MAX_SAMPLES) -> Path:  # fmt: skip
    """Write the report of one `fic probe` run: rates, labels, accuracy, % changed, plots, samples."""
    out_path = Path(out_path)
    summary = summary or {}
    parts = [section("Genuine follow-up", probe_rate_table(samples)), section("Labels", probe_label_table(samples))]
    if summary.get("by_dataset"):
        parts.insert(0, section("Estimates", estimate_table(summary)))
    if summary.get("judge_validity"):
        parts.insert(0, section("Judge", tag("p", validity_line(summary["judge_validity"]))))
    accuracy = summary.get("accuracy") or {}
    if accuracy:
        rows = [[d, a.get("accuracy"), a.get("n")] for d, a in sorted(accuracy.items())]
        by_correct = summary.get("genuine_by_correct") or {}
        extra = table(
            ["assistant answer", "genuine rate [95% CI]"], [[k, rate_cell(v)] for k, v in by_correct.items()]
        )
        parts.append(section("Task accuracy vs follow-up", table(["dataset", "accuracy", "n"], rows),
                             extra if by_correct else ""))  # fmt: skip
    changed = summary.get("percent_changed") or {}
    if changed:
        rows = [[pert, cell, v.get("changed"), v.get("n")] for pert, cells in sorted(changed.items())
                for cell, v in cells.items()]  # fmt: skip
        parts.append(section("% changed under each control", table(["control", "cell", "changed", "n"], rows)))
    figures = sorted(out_path.parent.glob("*.png"))
    if figures:
        parts.append(section("Plots", plots(figures)))
    parts.append(section("Samples", _browse(
        samples,
        lambda r: (r["dataset"], _temp(r["temperature"]), r.get("perturbation", "none")),
        lambda k: f"{k[0]} \u00b7 T={k[1]:g} \u00b7 {k[2]}",
        _sample_block, max_samples,
    )))  # fmt: skip
    if summary.get("settings"):
        parts.append(section("Settings", _settings_table(summary["settings"])))
    subtitle = (
        f"{len(samples)} generated user turns; judge errors: {sum(1 for s in samples if s.get('genuine') is None)}"
    )
    return write_page(out_path, page(title or "User-turn probe", *parts, subtitle=subtitle))


def lic_table(summary: dict) -> str:
    modes = summary.get("modes") or {}
    rows = [[m.upper(), v.get("P"), v.get("A90"), v.get("U90_10"), v.get("episodes")] for m, v in modes.items()]
    return table(["mode", "P", "A90", "U90-10", "episodes"], rows, "Lost in Conversation")


def lic_report(summary: dict, episodes: list[dict], out_path: str | Path, title: str | None = None,
               max_samples: int = MAX_SAMPLES) -> Path:  # fmt: skip
    """Write the report of one `fic lic` run: P / A90 / U90-10 per mode, P_sharded / P_full, plot, episodes."""
    out_path = Path(out_path)
    ratios = [[name, summary[key]] for key, name in (("sharded_over_full", "sharded_over_full p_sharded / p_full"),
                                                     ("concat_over_full", "concat_over_full p_concat / p_full"))
              if key in summary]  # fmt: skip
    parts = [section("Scores", lic_table(summary), table(["ratio", "value"], ratios) if ratios else "")]
    figures = sorted(out_path.parent.glob("*.png"))
    if figures:
        parts.append(section("Plots", plots(figures)))

    def block(row):
        head = f"{row.get('task_id', '?')} \u00b7 run {row.get('run', 0)} \u00b7 {'correct' if row.get('correct') else 'wrong'}"
        return details(head, conversation(row.get("messages") or []))

    parts.append(section("Episodes", _browse(
        episodes, lambda r: (r.get("mode", "?"), bool(r.get("correct"))),
        lambda k: f"{k[0]} \u00b7 {'correct' if k[1] else 'wrong'}", block, max_samples,
    )))  # fmt: skip
    settings = {k: summary[k] for k in ("runs", "temperature", "n_tasks") if k in summary}
    parts.append(section("Settings", _settings_table(settings)))
    return write_page(out_path, page(title or "Lost in Conversation", *parts))


REGRET_METRICS = (
    ("regret", "regret"), ("value", "value"), ("reference_value", "reference value"),
    ("resolution_rate", "intent resolution"), ("turns_mean", "clarification turns"),
    ("user_tokens_mean", "user tokens"), ("abstain_rate", "abstain rate"), ("out_of_turns_rate", "out of turns"),
)  # fmt: skip


def _regret_row(values: dict) -> list:
    row = [values.get(k) if k != "resolution_rate" else (values.get(k) if k in values
           else (values.get("resolution") or {}).get("rate")) for k, _ in REGRET_METRICS]  # fmt: skip
    row.append((values.get("ineffective_clarification") or {}).get("rate"))
    row.append((values.get("stopping_errors") or {}).get("rate"))
    row.append(values.get("episodes"))
    return row


def regret_table(summary: dict) -> str:
    headers = ["", *[name for _, name in REGRET_METRICS], "ineffective clarification", "stopping errors", "episodes"]
    rows = [["all", *_regret_row(summary)]]
    rows += [[p, *_regret_row(v)] for p, v in (summary.get("per_profile") or {}).items()]
    return table(headers, rows, f"Regret of policy {summary.get('policy', '?')} on {summary.get('scenario', '?')}")


def regret_report(summary: dict, episodes: list[dict], out_path: str | Path, title: str | None = None,
                  max_samples: int = MAX_SAMPLES) -> Path:  # fmt: skip
    """Write the report of one `fic regret` run: metrics overall and per user profile, plots, episodes."""
    out_path = Path(out_path)
    parts = [section("Regret", regret_table(summary))]
    figures = sorted(out_path.parent.glob("*.png"))
    if figures:
        parts.append(section("Plots", plots(figures)))

    def block(row):
        head = f"{row.get('key', '?')} \u00b7 value {fmt(row.get('value'))} \u00b7 regret {fmt(row.get('regret'))}"
        messages = row.get("messages") or row.get("transcript")
        if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
            return details(head, conversation(messages))
        return details(head, tag("pre", json.dumps(row, indent=1, ensure_ascii=False, default=str)))

    parts.append(section("Episodes", _browse(
        episodes, lambda r: r.get("profile", "?"), lambda k: f"profile {k}", block, max_samples,
    )))  # fmt: skip
    settings = {k: summary[k] for k in ("scenario", "policy", "seed", "cost", "max_turns", "model") if k in summary}
    parts.append(section("Settings", _settings_table(settings)))
    return write_page(out_path, page(title or "Clarification regret", *parts))


def _read_jsonl(path: Path) -> list[dict]:
    return load_done(path) if path.exists() else []


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def report_dir(kind: str, directory: str | Path, title: str | None = None) -> Path:
    """(Re)write `directory/report.html` for an evaluation folder of `kind` (`probe`, `lic`, `regret`)."""
    directory = Path(directory)
    summary = _read_json(directory / "summary.json")
    if kind == "probe":
        return probe_report(summary, _read_jsonl(directory / "samples.jsonl"), directory / "report.html", title)
    if kind == "lic":
        return lic_report(summary, _read_jsonl(directory / "episodes.jsonl"), directory / "report.html", title)
    if kind == "regret":
        return regret_report(summary, _read_jsonl(directory / "episodes.jsonl"), directory / "report.html", title)
    raise ValueError(f"report kind {kind!r} is unknown; valid: probe, lic, regret")


def comparison_probe_table(records: list[dict], config: dict | None = None) -> str:
    """Genuine follow-up rate by checkpoint (model) x dataset x temperature. The metric names are built from the
    evaluation settings (a record's own `config`, else `config`) with `fic.metric_names` and looked up."""
    grid: dict = defaultdict(dict)
    temps = set()
    for record in records:
        settings, metrics = record.get("config") or config or {}, record.get("metrics") or {}
        for dataset in [parse_spec(spec)[0] for spec in settings.get("datasets") or ()]:
            for t in settings.get("temperatures") or ():
                name = metric_names.probe_genuine(dataset, t)
                if name in metrics:
                    temps.add(float(t))
                    grid[(record["step"], dataset)][float(t)] = metrics[name]
    temps = sorted(temps)
    rows = [
        [f"step {step}", dataset, *[grid[(step, dataset)].get(t) for t in temps]] for step, dataset in sorted(grid)
    ]
    return table(["model", "dataset", *[f"T={t:g}" for t in temps]], rows, "Genuine follow-up rate per checkpoint")


def difference_table(differences: list[dict]) -> str:
    """Paired, item-clustered differences (`fic.followup_summary.compare`), pooled and per dataset, and the
    calibrated ones (`compare_calibrated`) where both checkpoints' turns are labelled."""
    rows = []
    for d in differences:
        for kind in ("judged", "calibrated"):
            found = d if kind == "judged" else d.get("calibrated") or {}
            for name, cell in [("all", found.get("overall")), *sorted((found.get("by_dataset") or {}).items())]:
                if cell:
                    rows.append([f"step {d['step']} - step {d['against_step']}", name, kind, cell["reading"],
                                 cell["n_items"]])  # fmt: skip
    return table(["comparison", "dataset", "estimate", "difference [95% CI], p", "items"], rows,
                 "An effect is claimed only where the interval excludes 0; calibrated: the prediction-powered "
                 "difference from both checkpoints' labels, paired by item")  # fmt: skip


def calibrated_text(est: dict) -> str:
    """`0.210 [0.120, 0.340] (30 labels)` of an estimate's calibrated rate, `n/e (why)` when it is not estimable."""
    c = est.get("calibrated")
    if c:
        return f"{c['rate']:.3f} [{c['low']:.3f}, {c['high']:.3f}] ({c['n_labels']} labels)"
    return f"n/e ({est['calibrated_note']})" if est.get("calibrated_note") else "-"


def estimate_table(summary: dict) -> str:
    """Per dataset and overall: the raw rate (item-clustered), the judge-corrected and calibrated estimates and the
    generic floor, each with its 95% interval."""

    def cell(c: dict | None) -> str:
        return "-" if not c else f"{c['rate']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"

    rows = []
    for name, est in [*sorted(summary.get("by_dataset", {}).items()), ("overall", summary.get("overall"))]:
        if est:
            raw = est["raw"]
            rows.append([name, cell(raw), raw["n"], raw["n_items"], cell(est.get("corrected")), calibrated_text(est),
                         cell(est.get("generic_floor"))])  # fmt: skip
    return table(["dataset", "raw [95% CI]", "turns", "items", "corrected", "calibrated", "generic floor"], rows,
                 summary.get("assumption", ""))  # fmt: skip


def run_report(run_dir: str | Path, comparison: dict | None = None, title: str | None = None) -> Path:
    """Write `RUN_DIR/eval/report.html`: every evaluated checkpoint, metric tables, metric-vs-step plots, links."""
    run_dir = Path(run_dir)
    eval_dir = run_dir / "eval"
    comparison = comparison if comparison is not None else _read_json(eval_dir / "comparison.json")
    records = comparison.get("checkpoints", [])
    names = comparison.get("metrics", [])
    parts = []
    if any(n.startswith("probe/") for n in names):
        parts.append(section("User-turn probe", comparison_probe_table(records, comparison.get("config"))))
    if comparison.get("differences"):
        parts.append(section("Genuine rate against the first checkpoint", difference_table(comparison["differences"])))
    rows = []
    for r in records:
        ckpt = r.get("checkpoint", "")
        cells = []
        for kind in ("probe", "lic", "regret"):
            rel = f"{ckpt}/eval/{kind}/report.html"
            if (run_dir / rel).is_file():
                cells.append(link(f"../{rel}", kind))
        linked = join(x for i, c in enumerate(cells) for x in ((" \u00b7 ", c) if i else (c,)))
        rows.append([r["step"], ckpt, linked if cells else "(files removed)"])
    lic_names = {
        mode: [metric_names.lic_score(k, mode) for k in metric_names.LIC_SCORES] for mode in metric_names.LIC_MODES
    }
    lic_rows = [[r["step"], mode.upper(), *[r["metrics"].get(n) for n in lic_names[mode]]]
                for r in records for mode in metric_names.LIC_MODES if lic_names[mode][0] in r["metrics"]]  # fmt: skip
    if lic_rows:
        parts.append(section("Lost in Conversation", table(["step", "mode", "P", "A90", "U90-10"], lic_rows)))
    regret_names = [n for n in names if n.startswith("regret/")]
    if regret_names:
        rows_r = [[r["step"], *[r["metrics"].get(n) for n in regret_names]] for r in records]
        headers = ["step", *[n.removeprefix("regret/") for n in regret_names]]
        parts.append(section("Clarification regret", table(headers, rows_r)))
    parts.append(section("Checkpoints", table(["step", "checkpoint", "reports"], rows)))
    metric_rows = [[n, *[r.get("metrics", {}).get(n) for r in records]] for n in names]
    parts.append(section("All metrics", table(["metric", *[f"step {r['step']}" for r in records]], metric_rows)))
    figures = sorted((eval_dir / "plots").glob("*.png"))
    if figures:
        parts.append(section("Metrics against the step", plots(figures)))
    if comparison.get("config"):
        parts.append(section("Evaluation settings", _settings_table(comparison["config"])))
    subtitle = f"{len(records)} evaluated checkpoints in {run_dir.name}"
    return write_page(eval_dir / "report.html", page(title or f"Run {run_dir.name}", *parts, subtitle=subtitle))


__all__ = [
    "esc",
    "lic_report",
    "probe_report",
    "probe_tables",
    "regret_report",
    "report_dir",
    "run_report",
]
