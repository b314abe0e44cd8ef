"""The probe's summary, computed from its sample rows alone (so it can be recomputed from `samples.jsonl`)."""

from __future__ import annotations

from fic.metric_names import probe_accuracy, probe_genuine, temperature_key
from fic.metrics import genuine_rate, label_distribution, percent_changed


def summarize(rows: list[dict], accuracy: dict[str, dict] | None = None) -> dict:
    """Genuine rate with 95% interval per dataset x temperature x perturbation, labels, accuracy and % changed.

    Rows whose `genuine` is None (judge errors) are excluded from rates and counted under `judge_errors`.
    """
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["dataset"], float(row["temperature"]), row["perturbation"]), []).append(row)
    genuine = {}
    for (dataset, temp, pert), group in sorted(cells.items()):
        cell = genuine_rate(r.get("genuine") for r in group)
        cell["labels"] = label_distribution([r["label"] for r in group])
        genuine.setdefault(dataset, {}).setdefault(temperature_key(temp), {})[pert] = cell
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
            cells.setdefault(f"{key[0]}@{temperature_key(key[2])}", {})[key] = text
        out[pert] = {"overall": percent_changed(base, perturbed)}
        out[pert].update({cell: percent_changed(base, texts_) for cell, texts_ in sorted(cells.items())})
    return out


def _by_correct(rows: list[dict]) -> dict:
    """Genuine rate split by whether the assistant response was correct (accuracy vs follow-up)."""
    out = {}
    for flag, name in ((True, "correct"), (False, "incorrect")):
        cell = genuine_rate(r.get("genuine") for r in rows if r.get("correct") is flag)
        if cell["n"]:
            out[name] = cell
    return out


def flat_metrics(summary: dict, perturbations: tuple[str, ...] = ("none",)) -> dict[str, float]:
    """Flat metrics for wandb and comparison tables (names from `fic.metric_names`): the genuine rate of every
    dataset x temperature under each of `perturbations`, and each dataset's task accuracy."""
    out = {}
    for dataset, temps in summary["genuine_rate"].items():
        for temp, perts in temps.items():
            for perturbation in perturbations:
                if perturbation in perts:
                    out[probe_genuine(dataset, temp, perturbation)] = perts[perturbation]["rate"]
    for dataset, acc in summary.get("accuracy", {}).items():
        if acc.get("accuracy") is not None:
            out[probe_accuracy(dataset)] = acc["accuracy"]
    return out
