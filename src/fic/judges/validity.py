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
    """{name, version, measured, test: {...}, labels, note} for a judge object (any `Judge`)."""
    name = getattr(judge, "name", type(judge).__name__)
    version = getattr(judge, "version", None)
    entry = load_validation().get(version) if version else None
    if not entry:
        return {"name": name, "version": version, "measured": False,
                "note": "agreement with labelled real turns not measured for this judge; measure it with "
                "`fic judge-agreement` against labels/followup/labels.jsonl (test split)"}  # fmt: skip
    return {"name": name, "version": version, "measured": True, "labels": entry.get("labels"),
            "test": {k: entry["test"].get(k) for k in _FIELDS}, "note": entry.get("note", "")}  # fmt: skip


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
