#!/usr/bin/env python
"""Fit the heuristic judge's classifier on the labelled real turns, choose it on dev, report it on test.

    python scripts/train_judge_classifier.py [--labels labels/followup/labels.jsonl] [--out src/fic/judges/classifier.json]

Fits `fic.judges.classifier` on the train split (only the cases the surface rules leave open: that is all the
classifier ever sees), chooses the L2 strength and the P(genuine) threshold on dev (highest binary kappa of the
whole judge whose false-positive rate stays <= 10%), writes the classifier, and scores the whole judge on the test
split it never saw: binary kappa, false-positive rate (failures called genuine), label accuracy, genuine rate per
dataset against the labelled rate, beside the rules-only judge; plus the cascade's share of unsure cases and what
sending them to a perfect second judge (the labels) would buy. Everything goes to `labels/followup/judge_eval.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from fic.judges import Case
from fic.judges.classifier import fit
from fic.judges.heuristic import HeuristicJudge, HeuristicJudgeConfig
from fic.judges.labels import GENUINE_FOLLOWUP
from fic.metrics import agreement, cohen_kappa

ROOT = Path(__file__).resolve().parents[1]
L2_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.2, 0.91, 0.05))
CASCADE_THRESHOLD = 0.85  # `fic judge --judge cascade`'s default


def figures(rows: list[dict], labels: list[str], genuine: list[bool], confidence: list[float] | None = None) -> dict:
    """Agreement of judge decisions with the human labels of `rows`."""
    human = [r["genuine"] for r in rows]
    failures = [g for g, h in zip(genuine, human) if not h]
    out = {
        "n": len(rows),
        "binary_kappa": round(cohen_kappa(human, genuine), 4),
        "binary_agreement": round(agreement(human, genuine), 4),
        "label_accuracy": round(agreement([r["label"] for r in rows], labels), 4),
        "false_positive_rate": round(sum(failures) / max(1, len(failures)), 4),
        "human_genuine_rate": round(sum(human) / max(1, len(human)), 4),
        "judge_genuine_rate": round(sum(genuine) / max(1, len(genuine)), 4),
        "per_dataset": {},
    }
    for dataset in sorted({r["dataset"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["dataset"] == dataset]
        h = sum(human[i] for i in idx) / len(idx)
        j = sum(genuine[i] for i in idx) / len(idx)
        out["per_dataset"][dataset] = {"n": len(idx), "human_rate": round(h, 4), "judge_rate": round(j, 4),
                                       "gap_points": round(100 * (j - h), 1)}  # fmt: skip
    if confidence is not None:
        unsure = [c is None or c < CASCADE_THRESHOLD for c in confidence]
        routed = [r["genuine"] if u else g for r, g, u in zip(rows, genuine, unsure)]
        out["cascade"] = {
            "threshold": CASCADE_THRESHOLD,
            "unsure_share": round(sum(unsure) / max(1, len(unsure)), 4),
            "binary_kappa_if_unsure_go_to_labels": round(cohen_kappa(human, routed), 4),
        }
    return out


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", default=str(ROOT / "labels/followup/labels.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "src/fic/judges/classifier.json"))
    parser.add_argument("--report", default=str(ROOT / "labels/followup/judge_eval.json"))
    args = parser.parse_args(argv)

    rows = load(Path(args.labels))
    cases = [Case(r["messages"], r["user_turn"]) for r in rows]
    rules = HeuristicJudge(HeuristicJudgeConfig(classifier=None))
    rule_verdicts, open_cases = rules.rule_verdicts(cases, features=True)
    features = dict(open_cases)
    split = {s: [i for i, r in enumerate(rows) if r["split"] == s] for s in ("train", "dev", "test")}
    train_open = [i for i in split["train"] if i in features]
    label_set = sorted({rows[i]["label"] for i in train_open}, key=lambda x: (x != GENUINE_FOLLOWUP, x))
    x_train = np.asarray([features[i] for i in train_open])
    y_train = [rows[i]["label"] for i in train_open]
    print(f"{len(rows)} labelled; train {len(split['train'])} ({len(train_open)} left open by the rules), "
          f"dev {len(split['dev'])}, test {len(split['test'])}; labels {label_set}")  # fmt: skip

    def decide(model, threshold, idx):
        judge = HeuristicJudge(HeuristicJudgeConfig(classifier=None))
        judge.classifier = model
        model.threshold = threshold
        verdicts = [rule_verdicts[i] for i in idx]
        opened = [k for k, i in enumerate(idx) if i in features]
        if opened:
            probs = model.proba(np.asarray([features[idx[k]] for k in opened]))
            for k, p in zip(opened, probs):
                verdicts[k] = judge._learned_verdict(rule_verdicts[idx[k]], p)
        return verdicts

    best = None
    dev_rows = [rows[i] for i in split["dev"]]
    for l2 in L2_GRID:
        model = fit(x_train, y_train, label_set, l2=l2)
        for threshold in THRESHOLDS:
            verdicts = decide(model, threshold, split["dev"])
            f = figures(dev_rows, [v.label for v in verdicts], [v.genuine for v in verdicts])
            gap = max(abs(d["gap_points"]) for d in f["per_dataset"].values())
            score = f["binary_kappa"] - (1.0 if f["false_positive_rate"] > 0.10 else 0.0) - 0.002 * gap
            if best is None or score > best[0]:
                best = (score, l2, threshold, f)
    _, l2, threshold, dev_figures = best
    model = fit(x_train, y_train, label_set, l2=l2)
    model.threshold = threshold

    test_rows = [rows[i] for i in split["test"]]
    test_verdicts = decide(model, threshold, split["test"])
    old = [rule_verdicts[i] for i in split["test"]]
    report = {
        "labels": str(Path(args.labels).relative_to(ROOT)) if Path(args.labels).is_relative_to(ROOT) else args.labels,
        "split_sizes": {s: len(v) for s, v in split.items()},
        "chosen": {"l2": l2, "threshold": threshold},
        "dev": dev_figures,
        "test": figures(
            test_rows,
            [v.label for v in test_verdicts],
            [v.genuine for v in test_verdicts],
            [v.confidence for v in test_verdicts],
        ),  # fmt: skip
        "test_rules_only": figures(test_rows, [v.label for v in old], [v.genuine for v in old]),
    }
    version = f"classifier-{len(split['train'])}train-l2{l2:g}-t{threshold:g}"
    model.meta = {"version": version, "trained_on": report["labels"], "split_sizes": report["split_sizes"],
                  "dev": {k: dev_figures[k] for k in ("binary_kappa", "false_positive_rate", "label_accuracy")},
                  "test": {k: report["test"][k] for k in ("binary_kappa", "false_positive_rate", "label_accuracy",
                                                           "human_genuine_rate", "judge_genuine_rate")}}  # fmt: skip
    model.save(args.out)
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("chosen", "test", "test_rules_only")}, indent=1))
    print(f"wrote {args.out} and {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
