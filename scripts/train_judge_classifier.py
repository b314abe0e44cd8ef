#!/usr/bin/env python
"""Fit the heuristic judge's classifier on the labelled real turns, choose it on dev, report it on test.

    python scripts/train_judge_classifier.py [--labels labels/followup/labels.jsonl] [--out src/fic/judges/classifier.json]

Fits `fic.judges.classifier` on the cases the surface rules leave open (that is all the classifier ever sees),
chooses the L2 strength and the P(genuine) threshold by cross-validation over the train + dev items (grouped by
item; highest binary kappa of the whole judge whose false-positive rate stays <= 10%, on all turns and on the
trained models' turns alone), reports model-held-out figures (fitted on SmolLM2's turns and scored on the trained
models' turns of train + dev, and the reverse), refits on train + dev,
writes the classifier, and scores the whole judge on the test
split it never saw: binary kappa, false-positive rate (failures called genuine), label accuracy, genuine rate per
dataset against the labelled rate, beside the rules-only judge; plus the cascade's share of unsure cases and what
sending them to a perfect second judge (the labels) would buy. Everything goes to `labels/followup/judge_eval.json`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from fic.judges import Case
from fic.judges.classifier import CONTEXT_FEATURES, FEATURES, FollowupClassifier, fit
from fic.judges.heuristic import HeuristicJudge
from fic.judges.labels import GENUINE_FOLLOWUP
from fic.judges.learned import LearnedJudge
from fic.judges.provenance import item_key, prompt_hash
from fic.metrics import agreement, cohen_kappa

ROOT = Path(__file__).resolve().parents[1]
L2_GRID = (3.0, 10.0, 30.0, 100.0, 300.0)
MAX_FPR = 0.10  # in cross-validation, on all turns (and, `strict`, on the trained models' turns alone)
# What each shipped classifier is fitted on and held to. `rates` is the `learned` judge of every rate (SmolLM2's
# labelled turns, the features without the context-dependence ones: the file shipped since 2026-12-02); `strict` is
# the judge of training signals: the trained models' turns of `trained_fit.jsonl` join the fit, the context features
# are in, their weight may match SmolLM2's (`family_balance`, chosen in cross-validation), and the false-positive
# rate on their turns is held to `MAX_FPR` too.
PURPOSES = {
    "rates": {"judge": "learned", "out": "src/fic/judges/classifier.json", "report": "labels/followup/judge_eval.json",
              "more_labels": [], "features": tuple(f for f in FEATURES if f not in CONTEXT_FEATURES),
              "family_balance": (False,), "hold_trained_fpr": False, "version": "classifier-v2"},
    "strict": {"judge": "strict", "out": "src/fic/judges/classifier_strict.json",
               "report": "labels/followup/judge_eval_strict.json", "more_labels": ["labels/followup/trained_fit.jsonl"],
               "features": FEATURES, "family_balance": (False, True), "hold_trained_fpr": True,
               "version": "classifier-strict-v1"},
}  # fmt: skip
KEEP_SURE_GENUINE = (0.85, 0.9, 2.0)  # the rules' genuine verdicts this sure stand (2.0: the classifier decides all)
CONSTRUCTED_LABELS = {"genuine": GENUINE_FOLLOWUP, "restate_verbatim": "previous_turn_restate",
                      "restate_edit": "previous_turn_restate", "copy": "assistant_turn_restate",
                      "new_task": "new_task_prompt"}  # fmt: skip
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.2, 0.91, 0.05))
CASCADE_THRESHOLD = 0.85  # `fic judge --judge cascade`'s default
CASCADE_CURVE = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)  # thresholds at which the routed share and its gain are reported


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
        curve = []
        for threshold in CASCADE_CURVE:
            unsure = [c is None or c < threshold for c in confidence]
            routed = [r["genuine"] if u else g for r, g, u in zip(rows, genuine, unsure)]
            curve.append({"threshold": threshold, "unsure_share": round(sum(unsure) / max(1, len(unsure)), 4),
                          "binary_kappa_if_unsure_go_to_labels": round(cohen_kappa(human, routed), 4)})  # fmt: skip
        out["cascade"] = next(c for c in curve if c["threshold"] == CASCADE_THRESHOLD)
        out["cascade_curve"] = curve
    return out


def is_trained(row: dict) -> bool:
    """A turn of a model trained from SmolLM2 (collab SFT, follow-up RL), not of SmolLM2 itself or a constructed case."""
    return row.get("source") != "constructed" and row.get("model") not in (None, "smollm2", "base")


def family_weights(rows: list[dict]) -> np.ndarray:
    """Row weights under which the trained models' turns and the others (SmolLM2's, the constructed cases) carry
    the same total weight."""
    trained = np.asarray([is_trained(r) for r in rows])
    n_trained, n_other = trained.sum(), (~trained).sum()
    if not n_trained or not n_other:
        return np.ones(len(rows))
    return np.where(trained, n_other / n_trained, 1.0)


def _fpr(rows: list[dict], genuine: list[bool]) -> float | None:
    """Share of the failures in `rows` that `genuine` calls genuine (None without failures)."""
    calls = [g for g, r in zip(genuine, rows) if not r["genuine"]]
    return sum(calls) / len(calls) if calls else None


def _fitted_with(entry: dict) -> str:
    """The judge whose fit wrote a `validation.json` entry: the rules alone (`heuristic`) are measured with `learned`,
    and entries without a `judge` field predate `strict` (the `rates` purpose wrote them)."""
    judge = entry.get("judge", "learned")
    return "learned" if judge == "heuristic" else judge


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def labelled_rows(labels: str | Path | list, shared: str | Path | None) -> list[dict]:
    """The labelled turns (of one file or several), then (with `shared`, the folder holding mt_bench/) the
    constructed MT-Bench cases.

    Real people's second turns (after GPT-4's answer) and failures built from them: the human side of the
    distribution, rare among a small model's turns; split `constructed`, always in training, never in a score."""
    rows = [r for path in ([labels] if isinstance(labels, (str, Path)) else labels) for r in load(Path(path))]
    for r in rows:
        r.setdefault("source", "labelled")
    if shared:
        from fic.judges.constructed import mt_bench_constructed_cases

        for case, kind in mt_bench_constructed_cases(shared):
            label = CONSTRUCTED_LABELS[kind]
            rows.append({"messages": case.messages, "user_turn": case.user_turn, "label": label, "source": "constructed",
                         "genuine": label == GENUINE_FOLLOWUP, "split": "constructed", "dataset": "mt_bench",
                         "item_id": f"constructed-{len(rows)}"})  # fmt: skip
    return rows


def excluded_items(shared: str | Path | None) -> dict[str, str]:
    """`{prompt hash: why}` of the items no fit may include (`fic.judges.provenance`): every HealthBench item of
    oss_eval_first30 (`make reproduce` probes all 30 and holds out the 9 multi-turn ones), the MT-Bench items the
    collab part holds out, and IFBench (no label ever: the clean check of how a judge transfers)."""
    if not shared:
        return {}
    sys.path.insert(0, str(ROOT / "reproduce"))
    from heldout import mt_bench_heldout_ids

    from fic.data import load_source

    shared = Path(shared)
    out = {}
    for record in load_source(f"healthbench:{shared / 'healthbench/oss_eval_first30.jsonl'}"):
        out[prompt_hash(record.messages)] = "healthbench: make reproduce evaluates every item"
    questions = load(shared / "mt_bench/question.jsonl")
    held = {str(i) for i in mt_bench_heldout_ids(questions)}
    for record in load_source(f"mt_bench:{shared / 'mt_bench/question.jsonl'}"):
        if record.id in held:
            out[prompt_hash(record.messages)] = "mt_bench: held out by make reproduce's collab part"
    ifbench = shared / "ifbench/IFBench_test.jsonl"
    if ifbench.is_file():
        for record in load_source(f"ifbench:{ifbench}"):
            out[prompt_hash(record.messages)] = "ifbench: never in a fit"
    return out


def rules_and_features(labels: str | Path, shared: str | Path | None):
    """`labelled_rows`, their cases, the rules-only judge's verdict on each, and the classifier features of the cases
    the rules leave open (`{row index: vector}`): what both this script and `judge_ablations.py` start from."""
    rows = labelled_rows(labels, shared)
    cases = [Case(r["messages"], r["user_turn"]) for r in rows]
    verdicts, open_cases = HeuristicJudge().rule_verdicts(cases, features=True)
    return rows, cases, verdicts, dict(open_cases)


def item_folds(rows: list[dict], pool: list[int], folds: int) -> list[list[int]]:
    """`pool`'s row indices in `folds` folds, grouped by item (every sample of an item in one fold), fixed order."""
    items = sorted({(rows[i]["dataset"], str(rows[i]["item_id"])) for i in pool}, key=lambda k: _hash(k))
    fold_of = {item: n % folds for n, item in enumerate(items)}
    return [[i for i in pool if fold_of[(rows[i]["dataset"], str(rows[i]["item_id"]))] == f] for f in range(folds)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--purpose",
        choices=sorted(PURPOSES),
        default="rates",
        help="which shipped classifier to fit: `rates` (the `learned` judge) or `strict` (see PURPOSES)",
    )
    parser.add_argument("--labels", default=str(ROOT / "labels/followup/labels.jsonl"))
    parser.add_argument("--out", help="the classifier file (default: the purpose's shipped one)")
    parser.add_argument("--report", help="the figures (default: the purpose's file under labels/followup/)")
    parser.add_argument("--validation", default=str(ROOT / "src/fic/judges/validation.json"))
    parser.add_argument("--folds", type=int, default=7, help="cross-validation folds over train + dev items")
    parser.add_argument(
        "--mt-bench",
        default=str(ROOT.parent / "shared/data"),
        help="shared data folder (holds mt_bench/) for the constructed cases added to every training fold ('' for none)",
    )
    args = parser.parse_args(argv)
    purpose = PURPOSES[args.purpose]
    args.out = args.out or str(ROOT / purpose["out"])
    args.report = args.report or str(ROOT / purpose["report"])

    label_files = [args.labels, *(str(ROOT / f) for f in purpose["more_labels"])]
    rows, cases, rule_verdicts, features = rules_and_features(label_files, args.mt_bench)
    columns = [FEATURES.index(name) for name in purpose["features"]]
    features = {i: [row[c] for c in columns] for i, row in features.items()}
    rules = HeuristicJudge()
    # Items make reproduce evaluates leave every fit: their labelled turns join the held-out ones that measure the
    # judge (`excluded`), constructed cases built on them are dropped.
    excluded = excluded_items(args.mt_bench)
    for r in rows:
        if prompt_hash(r["messages"]) in excluded and r["split"] != "test":
            r["split"] = "excluded" if r["split"] != "constructed" else "dropped"
    splits = ("train", "dev", "test", "excluded", "constructed")
    split = {s: [i for i, r in enumerate(rows) if r["split"] == s] for s in splits}
    constructed = split.pop("constructed")
    fit_pool = split["train"] + split["dev"]
    heldout = split["test"] + split["excluded"]
    failure_labels = sorted({rows[i]["label"] for i in fit_pool if not rows[i]["genuine"]})
    print(f"{len(rows)} labelled: train {len(split['train'])}, dev {len(split['dev'])}, test {len(split['test'])}; "
          f"{len(features)} left open by the surface rules")  # fmt: skip

    def train(idx: list[int], l2: float, threshold: float, keep: float = 2.0, balance: bool = False):
        idx = [i for i in idx if i in features]
        x = np.asarray([features[i] for i in idx])
        binary = [GENUINE_FOLLOWUP if rows[i]["genuine"] else "failure" for i in idx]
        failed = [i for i in idx if not rows[i]["genuine"]]
        return FollowupClassifier(
            genuine=fit(
                x,
                binary,
                [GENUINE_FOLLOWUP, "failure"],
                l2=l2,
                weight=family_weights([rows[i] for i in idx]) if balance else None,
            ),
            failure=fit(
                np.asarray([features[i] for i in failed]), [rows[i]["label"] for i in failed], failure_labels, l2=l2
            ),  # fmt: skip
            threshold=threshold,
            keep_sure_genuine=keep,
            features=purpose["features"],
        )

    def decide(model: FollowupClassifier, idx: list[int]):
        judge = LearnedJudge(model)
        verdicts = [rule_verdicts[i] for i in idx]
        opened = [k for k, i in enumerate(idx) if i in features]
        if opened:
            x = np.asarray([features[idx[k]] for k in opened])
            for k, p, failure in zip(opened, model.p_genuine(x), model.failure_labels(x)):
                verdicts[k] = judge.learned_verdict(rule_verdicts[idx[k]], float(p), failure)
        return verdicts

    # Grouped cross-validation on train + dev: every item's samples sit in one fold.
    folds = item_folds(rows, fit_pool, args.folds)
    pool_rows = [rows[i] for f in folds for i in f]
    trained_mask = [is_trained(r) for r in pool_rows]
    best = None
    for l2, balance in [(l2, b) for l2 in L2_GRID for b in purpose["family_balance"]]:
        p_cv, fail_cv = {}, {}
        for f, held in enumerate(folds):
            model = train([i for g, other in enumerate(folds) if g != f for i in other] + constructed, l2, 0.5,
                          balance=balance)  # fmt: skip
            opened = [i for i in held if i in features]
            x = np.asarray([features[i] for i in opened])
            p_cv.update(zip(opened, model.p_genuine(x)))
            fail_cv.update(zip(opened, model.failure_labels(x)))
        order = [i for f in folds for i in f]
        for keep in KEEP_SURE_GENUINE:
            for threshold in THRESHOLDS:
                judge = LearnedJudge(FollowupClassifier(model.genuine, model.failure, threshold, keep))
                verdicts = [judge.learned_verdict(rule_verdicts[i], float(p_cv[i]), fail_cv[i]) if i in p_cv
                            else rule_verdicts[i] for i in order]  # fmt: skip
                f = figures(pool_rows, [v.label for v in verdicts], [v.genuine for v in verdicts],
                            [v.confidence for v in verdicts])  # fmt: skip
                gap = max(abs(d["gap_points"]) for d in f["per_dataset"].values())
                trained_fpr = _fpr([r for r, t in zip(pool_rows, trained_mask) if t],
                                   [v.genuine for v, t in zip(verdicts, trained_mask) if t])  # fmt: skip
                too_lenient = f["false_positive_rate"] > MAX_FPR or (
                    purpose["hold_trained_fpr"] and (trained_fpr or 0.0) > MAX_FPR
                )
                score = f["binary_kappa"] - (1.0 if too_lenient else 0.0) - 0.002 * gap
                if best is None or score > best[0]:
                    best = (score, l2, balance, threshold, keep,
                            {**f, "trained_model_false_positive_rate": trained_fpr})  # fmt: skip
    _, l2, balance, threshold, keep, cv_figures = best
    model = train(fit_pool + constructed, l2, threshold, keep, balance)

    # Model-held-out validation: fitted on one model family's turns (plus the constructed cases), scored on the
    # other's, at the chosen settings. Trained-model turns (models trained from SmolLM2) write differently: what
    # transfers from base turns to them, and back, is what a judge inside a training loop meets.
    base_pool = [i for i in fit_pool if not is_trained(rows[i])]
    trained_pool = [i for i in fit_pool if is_trained(rows[i])]
    model_held_out = {}
    if base_pool and trained_pool:
        for name, fit_on, score_on in (("fit_base_score_trained", base_pool, trained_pool),
                                       ("fit_trained_score_base", trained_pool, base_pool)):  # fmt: skip
            held = decide(train(fit_on + constructed, l2, threshold, keep, balance), score_on)
            model_held_out[name] = figures([rows[i] for i in score_on], [v.label for v in held],
                                           [v.genuine for v in held])  # fmt: skip
    test_rows = [rows[i] for i in split["test"]]
    test_verdicts = decide(model, split["test"])
    old = [rule_verdicts[i] for i in split["test"]]
    heldout_verdicts = decide(model, heldout)
    labels_names = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                    for p in (Path(f).resolve() for f in label_files)]  # fmt: skip
    report = {
        "purpose": args.purpose,
        "labels": " + ".join(labels_names),
        "split_sizes": {**{s: len(v) for s, v in split.items()}, "constructed_mt_bench": len(constructed)},
        "chosen": {
            "l2": l2,
            "family_balance": balance,
            "threshold": threshold,
            "keep_sure_genuine": keep,
            "folds": args.folds,
        },
        "cross_validation_train_dev": cv_figures,
        "test": figures(
            test_rows,
            [v.label for v in test_verdicts],
            [v.genuine for v in test_verdicts],
            [v.confidence for v in test_verdicts],
        ),  # fmt: skip
        "test_rules_only": figures(test_rows, [v.label for v in old], [v.genuine for v in old]),
        "model_held_out": model_held_out,
        "excluded_items": {
            why: sum(1 for w in excluded.values() if w == why) for why in sorted(set(excluded.values()))
        },
    }
    fitted = sorted({item_key(rows[i]["dataset"], rows[i]["messages"]) for i in fit_pool + constructed})
    assert not {k.rsplit("/", 1)[-1] for k in fitted} & set(excluded), "an excluded item reached the fit"
    version = (f"{purpose['version']}-{len(fit_pool)}labels-l2{l2:g}{'-fb' if balance else ''}-t{threshold:g}"
               f"-keep{keep:g}")  # fmt: skip
    model.meta = {"version": version, "trained_on": report["labels"], "split_sizes": report["split_sizes"],
                  "fitted_on": "train+dev+constructed MT-Bench cases", "cross_validation": {k: cv_figures[k] for k in ("binary_kappa",
                  "false_positive_rate", "label_accuracy")},
                  "test": {k: report["test"][k] for k in ("n", "binary_kappa", "false_positive_rate",
                                                           "label_accuracy", "human_genuine_rate",
                                                           "judge_genuine_rate")}}  # fmt: skip
    model.meta["fitted_items"] = fitted
    model.save(args.out)
    fitted_judge = LearnedJudge(args.out)
    rules_heldout = [rule_verdicts[i] for i in heldout]
    # One validation file for every shipped judge: this purpose's entries replace their own earlier ones only.
    kind = purpose["judge"]
    path = Path(args.validation)
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    validation = {k: v for k, v in earlier.items() if _fitted_with(v) != kind}
    if kind == "learned":  # the rules alone (`heuristic`) are measured with it
        validation[rules.version] = {
            "judge": "heuristic",
            "labels": report["labels"],
            "test": report["test_rules_only"],
            "errors": error_pairs(rows, heldout, rules_heldout),
            "note": "the rules alone (judge `heuristic`)",
        }
    validation[fitted_judge.version] = {"judge": kind, "labels": report["labels"], "test": report["test"],
                                        "errors": error_pairs(rows, heldout, heldout_verdicts),
                                        "note": f"rules + classifier (judge `{kind}`)"}  # fmt: skip
    path.write_text(compact_json(validation) + "\n", encoding="utf-8")
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("chosen", "test", "test_rules_only")}, indent=1))
    print(f"wrote {args.out} and {args.report}")
    return 0


def error_pairs(rows: list[dict], idx: list[int], verdicts: list) -> dict:
    """The judge's decisions beside the labels on held-out turns (outside every fit), per dataset, as
    `{dataset: [[item hash, human genuine, judge genuine], ...]}`: `fic.judges.validity` turns them into sensitivity
    and specificity with item-clustered variances for the corrected rates."""
    out: dict[str, list] = {}
    for i, verdict in zip(idx, verdicts):
        if verdict.genuine is None:
            continue
        row = rows[i]
        out.setdefault(row["dataset"], []).append([prompt_hash(row["messages"]), bool(row["genuine"]),
                                                   bool(verdict.genuine)])  # fmt: skip
    return out


def compact_json(data) -> str:
    """`json.dumps(indent=1)` with every innermost list on one line (the error pairs stay one line each)."""
    text = json.dumps(data, indent=1)
    return re.sub(
        r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text
    )


def _hash(key) -> str:
    import hashlib

    return hashlib.sha256(repr(key).encode()).hexdigest()


if __name__ == "__main__":
    sys.exit(main())
