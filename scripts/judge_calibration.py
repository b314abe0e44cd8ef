#!/usr/bin/env python
"""Which judge gives the tightest calibrated rate, and how the corrected rate reads on the labelled test split.

    python scripts/judge_calibration.py [--labels-per-run 60] [--draws 500] [--out labels/followup/judge_calibration.json]

Reads the shipped judges' decisions beside the labels on the labelled turns outside every fit
(`src/fic/judges/validation.json`, written by `scripts/train_judge_classifier.py`); no model, no judge run.

1. Calibrated width: many times, `--labels-per-run` of those turns are drawn at random as if a reader had labelled
   them in `fic review RUN --sample N`; `fic.estimates.ppi_rate` gives the prediction-powered interval over all of them
   (clustered by item) and the labels-alone interval. The judge whose calibrated interval is narrowest on average
   is the default for rates (`fic.judges.DEFAULT_JUDGE`).
2. Corrected rates on the test split: per dataset, the judge's raw rate, the Rogan-Gladen rate with sensitivity and
   specificity measured on the *other* held-out turns (the test split left out, so nothing is corrected with its own
   labels) and the labelled rate.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from fic.estimates import cluster_rate, corrected_rate, judge_error_rates, ppi_rate, rate_variance
from fic.judges import make_judge
from fic.judges.validity import load_validation

ROOT = Path(__file__).resolve().parents[1]


def pairs_of(version: str) -> list[tuple[str, str, bool, bool]]:
    """(dataset, item hash, human, judge) of every held-out labelled turn for the judge `version`."""
    errors = load_validation()[version]["errors"]
    return [(d, item, human, judge) for d, rows in errors.items() for item, human, judge in rows]


def calibrated_widths(pairs, n_labels: int, draws: int, seed: int) -> dict:
    rng = random.Random(seed)
    clusters = [(d, item) for d, item, _, _ in pairs]
    judged = [j for _, _, _, j in pairs]
    widths, label_widths, covered = [], [], 0
    truth = sum(h for _, _, h, _ in pairs) / len(pairs)
    for _ in range(draws):
        idx = rng.sample(range(len(pairs)), n_labels)
        out = ppi_rate([pairs[i][2] for i in idx], [pairs[i][3] for i in idx], judged, clusters,
                       labelled_clusters=[clusters[i] for i in idx])  # fmt: skip
        widths.append(out["high"] - out["low"])
        label_widths.append(out["labels_only"]["high"] - out["labels_only"]["low"])
        covered += out["low"] <= truth <= out["high"]
    return {"labels_per_run": n_labels, "draws": draws, "mean_width": sum(widths) / draws,
            "mean_width_labels_only": sum(label_widths) / draws, "coverage_of_labelled_rate": covered / draws,
            "turns": len(pairs), "labelled_rate": truth, "judged_rate": sum(judged) / len(judged)}  # fmt: skip


def test_split_rates(version: str, test_items: dict[str, set[str]]) -> dict:
    """Per dataset of the test split: raw, corrected (errors from the other held-out turns) and labelled rates."""
    pairs = pairs_of(version)
    other = [p for p in pairs if p[1] not in test_items.get(p[0], set())]
    errors = judge_error_rates([p[2] for p in other], [p[3] for p in other], [(p[0], p[1]) for p in other])
    out = {"errors_from": {"turns": len(other), **{k: errors[k] for k in ("sensitivity", "specificity")}}}
    for dataset in sorted(test_items):
        rows = [p for p in pairs if p[0] == dataset and p[1] in test_items[dataset]]
        flags, clusters = [p[3] for p in rows], [p[1] for p in rows]
        raw = cluster_rate(flags, clusters)
        corrected = corrected_rate(raw["rate"], rate_variance(flags, clusters), errors)
        labelled = cluster_rate([p[2] for p in rows], clusters)
        out[dataset] = {"n": len(rows), "items": raw["n_items"],
                        "raw": {k: raw[k] for k in ("rate", "low", "high")},
                        "corrected": {k: corrected.get(k) for k in ("rate", "low", "high")},
                        "corrected_note": corrected.get("note", ""),
                        "labelled": {k: labelled[k] for k in ("rate", "low", "high")}}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", default=str(ROOT / "labels/followup/labels.jsonl"))
    parser.add_argument("--labels-per-run", type=int, default=60)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "labels/followup/judge_calibration.json"))
    args = parser.parse_args(argv)

    from fic.judges.provenance import prompt_hash

    test_items: dict[str, set[str]] = {}
    for line in Path(args.labels).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["split"] == "test":
            test_items.setdefault(row["dataset"], set()).add(prompt_hash(row["messages"]))
    report = {}
    for kind in ("heuristic", "learned"):
        version = make_judge(kind).version
        report[kind] = {
            "version": version,
            "calibrated": calibrated_widths(pairs_of(version), args.labels_per_run, args.draws, args.seed),
            "test_split": test_split_rates(version, test_items),
        }
    best = min(report, key=lambda k: report[k]["calibrated"]["mean_width"])
    report["narrowest_calibrated"] = best
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for kind in ("heuristic", "learned"):
        c = report[kind]["calibrated"]
        print(f"{kind:>9}: mean calibrated width {c['mean_width']:.3f} (labels alone {c['mean_width_labels_only']:.3f}), "
              f"coverage {c['coverage_of_labelled_rate']:.2f}, judged {c['judged_rate']:.3f} vs labelled "
              f"{c['labelled_rate']:.3f} on {c['turns']} turns")  # fmt: skip
        for dataset, r in report[kind]["test_split"].items():
            if dataset == "errors_from":
                continue
            cor = r["corrected"]
            cor_text = "-" if cor["rate"] is None else f"{cor['rate']:.3f} [{cor['low']:.3f}, {cor['high']:.3f}]"
            print(f"{'':>11}{dataset:>12}: raw {r['raw']['rate']:.3f} corrected {cor_text} labelled "
                  f"{r['labelled']['rate']:.3f} (n={r['n']}, {r['items']} items) {r['corrected_note']}")  # fmt: skip
    print(f"narrowest calibrated interval: {best}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
