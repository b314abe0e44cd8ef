"""How far a judge's rates can be trusted: its measured agreement with careful labels of real model turns.

Every report that prints a genuine follow-up rate also prints `judge_validity(judge)`: the judge's name, version
and, where it has been measured, its figures on the held-out test split of `labels/followup/` (binary Cohen's kappa,
false-positive rate = failures called genuine, label accuracy, labelled vs judged genuine rate). The figures live in
`validation.json` beside this module, written by `scripts/train_judge_classifier.py` together with the classifier,
keyed by judge version, so a judge changed without being measured again reports itself as unmeasured.
"""

from __future__ import annotations

import json
from pathlib import Path

VALIDATION_PATH = Path(__file__).with_name("validation.json")
_FIELDS = ("n", "binary_kappa", "false_positive_rate", "label_accuracy", "human_genuine_rate", "judge_genuine_rate")


def load_validation(path: str | Path = VALIDATION_PATH) -> dict:
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def judge_validity(judge) -> dict:
    """{name, version, measured, test: {...}, errors, labels, note} for a judge object (any `Judge`).

    `errors`: the judge's sensitivity and specificity (with item-clustered variances) on the labelled turns outside
    its fit, `{"pooled": {...}, "per_dataset": {name: {...}}}` (`fic.estimates.judge_error_rates`), read by
    `dataset_errors` for the corrected rates."""
    return validity_of(
        {"name": getattr(judge, "name", type(judge).__name__), "version": getattr(judge, "version", None)}
    )


def validity_of(about: dict) -> dict:
    """`judge_validity` from a judge's `{"name", "version"}` (as a run's files record them), without the judge."""
    name, version = about.get("name"), about.get("version")
    entry = load_validation().get(version) if version else None
    if not entry:
        return {"name": name, "version": version, "measured": False, "errors": None,
                "note": "agreement with labelled real turns not measured for this judge; measure it with "
                "`fic judge-agreement` against labels/followup/labels.jsonl (test split)"}  # fmt: skip
    return {"name": name, "version": version, "measured": True, "labels": entry.get("labels"),
            "test": {k: entry["test"].get(k) for k in _FIELDS}, "errors": error_rates(entry.get("errors")),
            "note": entry.get("note", "")}  # fmt: skip


MIN_PER_CLASS = 10  # labelled genuine and failure turns a dataset needs for its own sensitivity and specificity


def error_rates(pairs: dict | None) -> dict | None:
    """`{"pooled", "per_dataset"}` error rates from `{dataset: [[item hash, human, judge], ...]}`."""
    from fic.estimates import judge_error_rates  # numpy (~70 ms): reports print validity lines without it

    if not pairs:
        return None

    def rates(rows: list, source: str) -> dict:
        human, judged, items = [r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows]
        return {**judge_error_rates(human, judged, items), "source": source}

    pooled = rates([r for rows in pairs.values() for r in rows], "pooled over datasets")
    per_dataset = {d: rates(rows, d) for d, rows in sorted(pairs.items())}
    return {"pooled": pooled, "per_dataset": per_dataset}


def dataset_errors(validity: dict | None, dataset: str | None) -> dict | None:
    """The error rates a corrected rate of `dataset` uses: the dataset's own where its held-out labels hold at least
    `MIN_PER_CLASS` genuine and failure turns, the pooled ones otherwise (`dataset` None: pooled)."""
    errors = (validity or {}).get("errors")
    if not errors:
        return None
    own = errors["per_dataset"].get(dataset) if dataset else None
    if own and own["n_pos"] >= MIN_PER_CLASS and own["n_neg"] >= MIN_PER_CLASS:
        return own
    return errors["pooled"]


def validity_line(validity: dict) -> str:
    """One line for logs and reports."""
    if not validity.get("measured"):
        return f"judge {validity['name']} ({validity.get('version')}): {validity['note']}"
    t = validity["test"]
    return (
        f"judge {validity['name']} ({validity['version']}): on {t['n']} held-out labelled real turns, binary kappa "
        f"{t['binary_kappa']:.2f}, false-positive rate {t['false_positive_rate']:.2f}, genuine rate "
        f"{t['judge_genuine_rate']:.2f} vs labelled {t['human_genuine_rate']:.2f}"
    )
