"""The probe's summary, computed from its sample rows alone (so it can be recomputed from `samples.jsonl`)."""

from __future__ import annotations

from fic.metrics import label_distribution, percent_changed, rate_with_interval


def _t(temperature: float) -> str:
    """`t0.0`, `t0.3`, `t1.0`: the temperature as in the metric names (`genuine_rate@t1.0`)."""
    return f"t{float(temperature)!r}"


def summarize(rows: list[dict], accuracy: dict[str, dict] | None = None) -> dict:
    """Genuine rate with 95% interval per dataset x temperature x perturbation, labels, accuracy and % changed.

    Rows whose `genuine` is None (judge errors) are excluded from rates and counted under `judge_errors`.
    """
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["dataset"], float(row["temperature"]), row["perturbation"]), []).append(row)
    genuine = {}
    for (dataset, temp, pert), group in sorted(cells.items()):
        judged = [r["genuine"] for r in group if r.get("genuine") is not None]
        cell = rate_with_interval(judged)
        cell["judge_errors"] = len(group) - len(judged)
        cell["labels"] = label_distribution([r["label"] for r in group])
        genuine.setdefault(dataset, {}).setdefault(_t(temp), {})[pert] = cell
    summary = {
        "genuine_rate": genuine,
        "labels": label_distribution([r["label"] for r in rows]),
        "judge_errors": sum(1 for r in rows if r.get("genuine") is None),
        "n_samples": len(rows),
        "accuracy": accuracy or {},
        "percent_changed": _changed(rows),
        "genuine_by_correct": _by_correct(rows),
    }
    return summary


def _changed(rows: list[dict]) -> dict:
    """% changed per perturbation (overall and per dataset x temperature) against `none` at the same seed."""
    texts: dict[str, dict[tuple, str]] = {}
    for row in rows:
        key = (row["dataset"], row["item_id"], float(row["temperature"]), row["sample"])
        texts.setdefault(row["perturbation"], {})[key] = row["user_turn"]
    base = texts.get("none", {})
    out = {}
    for pert, perturbed in sorted(texts.items()):
        if pert == "none" or not base:
            continue
        cells = {}
        for key, text in perturbed.items():
            cells.setdefault(f"{key[0]}@{_t(key[2])}", {})[key] = text
        out[pert] = {"overall": percent_changed(base, perturbed)}
        out[pert].update({cell: percent_changed(base, texts_) for cell, texts_ in sorted(cells.items())})
    return out


def _by_correct(rows: list[dict]) -> dict:
    """Genuine rate split by whether the assistant response was correct (accuracy vs follow-up)."""
    out = {}
    for flag, name in ((True, "correct"), (False, "incorrect")):
        judged = [r["genuine"] for r in rows if r.get("correct") is flag and r.get("genuine") is not None]
        if judged:
            out[name] = rate_with_interval(judged)
    return out


def flat_metrics(summary: dict, perturbation: str = "none") -> dict[str, float]:
    """`probe/<dataset>/genuine_rate@t<T>` -> value, for wandb and comparison tables."""
    out = {}
    for dataset, temps in summary["genuine_rate"].items():
        for temp, perts in temps.items():
            if perturbation in perts:
                out[f"probe/{dataset}/genuine_rate@{temp}"] = perts[perturbation]["rate"]
    for dataset, acc in summary.get("accuracy", {}).items():
        if acc.get("accuracy") is not None:
            out[f"probe/{dataset}/accuracy"] = acc["accuracy"]
    return out
