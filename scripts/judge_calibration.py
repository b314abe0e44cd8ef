#!/usr/bin/env python
"""How far the judges agree with careful readers on turns outside every fit, which judge gives the tightest calibrated
rate, and how the corrected rate reads on the labelled test split.

    python scripts/judge_calibration.py [--labels-per-run 60] [--draws 500] [--out labels/followup/judge_calibration.json]
    python scripts/judge_calibration.py --judge cascade --judge-base-url URL --judge-model NAME [--threshold 0.7]

0. Transfer (printed first): each judge (`learned`, the judge of rates; `strict`, the judge of training signals,
   fitted on SmolLM2's and trained models' turns alike; each also in its contrastive form, `--contrast`) runs on the
   labelled real turns outside every one's fit, split by who wrote them: *base* turns (SmolLM2-135M-Instruct: the labelled
   items of `labels/followup/labels.jsonl` outside the classifier's fit, the IFBench check, the collab part's base
   model) and *trained* turns (the collab part's trained models: `labels/followup/collab/`, the run whose filter
   and reward judged plainly in `plain_judge_run/`; and the collab SFT / RL turns of `labels.jsonl`). Binary kappa, false-positive rate (failures called genuine) and recall, each with a
   95% interval from a bootstrap over items (`fic.judges.agreement.binary_agreement`). A judge sees each source's
   turns of one dataset in one batch, so the contrast's foil is another item's answer of the same dataset. The
   issue's targets are read off the intervals: FPR on trained turns <= 0.10 at the upper end, kappa on base turns
   >= 0.5 at the lower end (the point estimates are printed beside them). `--judge llm|cascade` adds a judge behind
   an OpenAI-compatible endpoint (a vLLM server, a hosted API) to the table, plainly and contrastively: how a user
   with a strong model measures the route the offline judges cannot take (labels/followup/README.md, "Cascade").

0b. Likelihood ratio (when `labels/followup/likelihood_ratios.jsonl` exists, written by
   `scripts/judge_likelihood.py`; no LM runs here): how well log p(turn | own answer) - log p(turn | another answer)
   under SmolLM2 separates what readers call genuine (AUROC with a bootstrap interval), and the rule "`learned` says
   genuine and the ratio >= tau" with tau chosen model-held-out: on base turns inside the classifier's fit (not
   HealthBench, not IFBench) and tested on the held-out base and trained turns, and the reverse (chosen on the
   trained turns of `labels.jsonl`, tested on the base turns and the collab part's trained models).

Parts 1 and 2 read the shipped judges' decisions beside the labels on the labelled turns outside every fit
(`src/fic/judges/validation.json`, written by `scripts/train_judge_classifier.py`); no judge run.

1. Calibrated width: many times, `--labels-per-run` of those turns are drawn at random as if a reader had labelled
   them in `fic review RUN --sample N`; `fic.ppi.ppi_rate` gives the prediction-powered interval over all of them
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

from fic.estimates import cluster_rate, corrected_rate, judge_error_rates, rate_variance
from fic.judges import JUDGES, Case, JudgeSettings, make_judge
from fic.judges.agreement import binary_agreement
from fic.judges.provenance import judge_provenance, prompt_hash
from fic.judges.validity import load_validation
from fic.ppi import ppi_rate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_judge_classifier import is_trained  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "labels" / "followup"
# (judge kind, contrast) of the transfer table; the first is the default judge of rates, the second its training form.
TRANSFER_JUDGES = {"learned": ("learned", False), "learned+contrast": ("learned", True),
                   "strict": ("strict", False), "strict+contrast": ("strict", True)}  # fmt: skip
TARGETS = {"trained_fpr_at_most": 0.10, "base_kappa_at_least": 0.5}


def _jsonl(path: Path) -> list[dict]:
    """The rows of a label file, foil labels left out (`foil: true`, `fic review --foil-share`: a turn shown after
    another context's conversation, whose label is not about the turn after its own)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("foil") is not True]


def transfer_turns(fitted: set[str]) -> list[dict]:
    """Every labelled turn with text outside the judge's fit: `{source, model, who, dataset, item, messages,
    user_turn, genuine}`, `who` being `base` (SmolLM2-135M-Instruct) or `trained` (a model trained from it)."""
    turns = []

    def add(source: str, model: str, row: dict, genuine) -> None:
        if "messages" not in row or genuine is None or prompt_hash(row["messages"]) in fitted:
            return
        turns.append({"source": source, "model": model, "who": "trained" if is_trained({"model": model}) else "base",
                      "dataset": row["dataset"], "item": prompt_hash(row["messages"]), "messages": row["messages"],
                      "user_turn": row["user_turn"], "genuine": bool(genuine)})  # fmt: skip

    for row in _jsonl(LABELS / "labels.jsonl"):
        add("labels.jsonl", row["model"], row, row["genuine"])
    for row in _jsonl(LABELS / "ifbench_check" / "turns.jsonl"):
        add("ifbench_check", "smollm2", row, row.get("genuine_d1"))
    for path in sorted((LABELS / "collab").rglob("*.jsonl")):
        if path.stem.endswith("_d2"):  # a second reader of the same turns: agreement, not more turns
            continue
        name = path.relative_to(LABELS / "collab").with_suffix("").as_posix()  # plain_judge_run/rl: the earlier run
        for row in _jsonl(path):
            add(f"collab/{name}.jsonl", name, row, row.get("genuine"))
    return turns


def judge_turns_by_source(judge, turns: list[dict]) -> list[bool | None]:
    """The judge's binary decision per turn, one batch per (source, dataset)."""
    groups: dict = {}
    for i, t in enumerate(turns):
        groups.setdefault((t["source"], t["dataset"]), []).append(i)
    decisions: list[bool | None] = [None] * len(turns)
    for idx in groups.values():
        verdicts = judge.judge([Case(turns[i]["messages"], turns[i]["user_turn"]) for i in idx])
        for i, v in zip(idx, verdicts):
            decisions[i] = v.genuine
    return decisions


def transfer_judges(kind: str | None = None, **endpoint) -> dict:
    """The transfer table's judges by name: the shipped ones (`TRANSFER_JUDGES`), then, with `kind` (`llm` or
    `cascade`; `endpoint`: `base_url`, `model`, `threshold`), that judge plainly and in its contrastive form."""
    judges = {name: make_judge(k, contrast=c) for name, (k, c) in TRANSFER_JUDGES.items()}
    if kind:
        judges[kind] = make_judge(kind, **endpoint)
        judges[f"{kind}+contrast"] = make_judge(kind, contrast=True, **endpoint)
    return judges


def transfer(draws: int, seed: int, judges: dict | None = None) -> dict:
    """Part 0: agreement per judge (`transfer_judges()` by default) on base and trained turns outside the fit,
    overall and per model."""
    judges = judges or transfer_judges()
    fitted = set().union(
        *(judge_provenance(judge).get("fitted_items") or set() for judge in judges.values())
    )  # outside every judge's fit
    turns = transfer_turns(fitted)
    out: dict = {"turns": {who: sum(t["who"] == who for t in turns) for who in ("base", "trained")}, "judges": {}}
    for name, judge in judges.items():
        decisions = judge_turns_by_source(judge, turns)
        ok = [i for i, d in enumerate(decisions) if d is not None]

        def agree(keep, ok=ok, decisions=decisions) -> dict:
            idx = [i for i in ok if keep(turns[i])]
            return binary_agreement([turns[i]["genuine"] for i in idx], [decisions[i] for i in idx],
                                    [(turns[i]["dataset"], turns[i]["item"]) for i in idx], draws, seed)  # fmt: skip

        entry = {"judge_errors": len(turns) - len(ok)}
        for who in ("base", "trained"):
            entry[who] = agree(lambda t, who=who: t["who"] == who)
            models = sorted({t["model"] for t in turns if t["who"] == who})
            entry[f"{who}_by_model"] = {m: agree(lambda t, m=m: t["model"] == m) for m in models}
        fpr, kappa = entry["trained"]["fpr"], entry["base"]["kappa"]
        entry["targets"] = {
            "trained_fpr_upper": fpr["high"], "base_kappa_lower": kappa["low"],
            "met": fpr["high"] is not None and kappa["low"] is not None
            and fpr["high"] <= TARGETS["trained_fpr_at_most"] and kappa["low"] >= TARGETS["base_kappa_at_least"],
            "met_on_point_estimates": fpr["value"] is not None and kappa["value"] is not None
            and fpr["value"] <= TARGETS["trained_fpr_at_most"] and kappa["value"] >= TARGETS["base_kappa_at_least"],
        }  # fmt: skip
        out["judges"][name] = entry
    return out


def _fit_turns(fitted: set[str]) -> list[dict]:
    """SmolLM2 turns inside the classifier's fit, HealthBench and IFBench kept out: where a rule on top of it is
    chosen when it is fitted on base turns."""
    return [{"source": "labels.jsonl", "model": "smollm2", "who": "base", "dataset": r["dataset"],
             "item": prompt_hash(r["messages"]), "messages": r["messages"], "user_turn": r["user_turn"],
             "genuine": bool(r["genuine"])}
            for r in _jsonl(LABELS / "labels.jsonl")
            if r["model"] == "smollm2" and r["dataset"] not in ("healthbench", "ifbench")
            and prompt_hash(r["messages"]) in fitted]  # fmt: skip


def _choose_tau(turns: list[dict], judged: list[bool], ratios: list[float]) -> float:
    """The ratio threshold that maximises kappa of "judged genuine and ratio >= tau" on `turns` (ties: the lower)."""
    from fic.metrics import cohen_kappa

    human = [t["genuine"] for t in turns]
    best = (-2.0, float("-inf"))
    for tau in sorted(set(ratios)):
        kappa = cohen_kappa(human, [j and r >= tau for j, r in zip(judged, ratios)])
        if kappa > best[0] + 1e-12:
            best = (kappa, tau)
    return best[1]


def likelihood_check(draws: int, seed: int) -> dict | None:
    """Part 0b (see the module docstring); None without the ratios file."""
    from judge_likelihood import DEFAULT_OUT, read_ratios

    from fic.estimates import bootstrap_auroc
    from fic.eval.rates import turn_sha

    stored = read_ratios(DEFAULT_OUT)
    if not stored:
        return None
    judge = make_judge("learned")
    fitted = judge_provenance(judge).get("fitted_items") or set()
    sets = {"fit_base": _fit_turns(fitted), "held": transfer_turns(fitted)}
    for turns in sets.values():
        for t, j in zip(turns, judge_turns_by_source(judge, turns)):
            t["judged"], t["ratio"] = bool(j), stored.get((t["source"], t["item"], turn_sha(t["user_turn"])))
    sets = {k: [t for t in v if t["ratio"] is not None] for k, v in sets.items()}
    base = [t for t in sets["held"] if t["who"] == "base"]
    trained = [t for t in sets["held"] if t["who"] == "trained"]
    trained_fit = [t for t in trained if t["source"] == "labels.jsonl"]
    trained_test = [t for t in trained if t["source"] != "labels.jsonl"]

    def auc(turns: list[dict]) -> dict:
        return bootstrap_auroc([t["ratio"] for t in turns], [t["genuine"] for t in turns], n_boot=draws, seed=seed)

    def rule(turns: list[dict], tau: float) -> dict:
        return binary_agreement([t["genuine"] for t in turns], [t["judged"] and t["ratio"] >= tau for t in turns],
                                [(t["dataset"], t["item"]) for t in turns], draws, seed)  # fmt: skip

    def choose(turns: list[dict]) -> float:
        return _choose_tau(turns, [t["judged"] for t in turns], [t["ratio"] for t in turns])

    tau_base, tau_trained = choose(sets["fit_base"]), choose(trained_fit)
    return {
        "turns": {"fit_base": len(sets["fit_base"]), "base": len(base), "trained": len(trained)},
        "auroc": {"base": auc(base), "trained": auc(trained),
                  "trained_judged_genuine": auc([t for t in trained if t["judged"]])},
        "fit_on_base": {"tau": tau_base, "base": rule(base, tau_base), "trained": rule(trained, tau_base)},
        "fit_on_trained": {"tau": tau_trained, "base": rule(base, tau_trained),
                           "trained_collab_part": rule(trained_test, tau_trained)},
    }  # fmt: skip


def print_likelihood(report: dict | None) -> None:
    if report is None:
        print("likelihood ratio: no labels/followup/likelihood_ratios.jsonl (run scripts/judge_likelihood.py)")
        return
    a = report["auroc"]
    print(f"likelihood ratio (SmolLM2, own - foil answer), AUROC for readers' genuine: base "
          f"{a['base']['auroc']:.2f} [{a['base']['low']:.2f}, {a['base']['high']:.2f}], trained "
          f"{a['trained']['auroc']:.2f} [{a['trained']['low']:.2f}, {a['trained']['high']:.2f}], trained turns "
          f"`learned` calls genuine {a['trained_judged_genuine']['auroc']:.2f} "
          f"[{a['trained_judged_genuine']['low']:.2f}, {a['trained_judged_genuine']['high']:.2f}]")  # fmt: skip
    for name, fit in (("fit on base", report["fit_on_base"]), ("fit on trained", report["fit_on_trained"])):
        cells = "; ".join(
            f"{k}: kappa {_cell(v['kappa'])} FPR {_cell(v['fpr'])}" for k, v in fit.items() if k != "tau"
        )
        print(f"{'':>2}learned and ratio >= {fit['tau']:.3f} ({name}): {cells}")


def _cell(stat: dict) -> str:
    if stat["value"] is None:
        return "-"
    if stat["low"] is None:
        return f"{stat['value']:.2f}"
    return f"{stat['value']:.2f} [{stat['low']:.2f}, {stat['high']:.2f}]"


def print_transfer(report: dict) -> None:
    print(f"transfer: labelled turns outside every fit: {report['turns']['base']} base (SmolLM2), "
          f"{report['turns']['trained']} of trained models; 95% intervals over items")  # fmt: skip
    for name, entry in report["judges"].items():
        for who in ("base", "trained"):
            a = entry[who]
            print(f"{name:>17} {who:>7}: kappa {_cell(a['kappa'])}  FPR {_cell(a['fpr'])}  recall {_cell(a['tpr'])}  "
                  f"judged {_cell(a['judged_rate'])} vs labelled {a['labelled_rate']['value']:.2f}  "
                  f"(n={a['n']}, {a['n_items']} items)")  # fmt: skip
            for model, m in entry[f"{who}_by_model"].items():
                print(f"{'':>27}{model:>20}: kappa {_cell(m['kappa'])}  FPR {_cell(m['fpr'])}  "
                      f"judged {m['judged_rate']['value']:.2f} vs labelled {m['labelled_rate']['value']:.2f} "
                      f"(n={m['n']})")  # fmt: skip
        t = entry["targets"]
        print(f"{'':>19}targets (trained FPR <= {TARGETS['trained_fpr_at_most']} at the upper end, base kappa >= "
              f"{TARGETS['base_kappa_at_least']} at the lower end): {'met' if t['met'] else 'not met'}"
              f" (on point estimates: {'met' if t['met_on_point_estimates'] else 'not met'})")  # fmt: skip


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
    # Rounded: the sums' last digits vary with the platform's floating point, the file should not.
    return {"labels_per_run": n_labels, "draws": draws, "mean_width": round(sum(widths) / draws, 6),
            "mean_width_labels_only": round(sum(label_widths) / draws, 6), "coverage_of_labelled_rate": covered / draws,
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
    parser.add_argument("--out", help="default: labels/followup/judge_calibration.json; with --judge, "
                        "outputs/judge_calibration_<judge>.json (the shipped file is about the shipped judges)")  # fmt: skip
    endpoint_judges = [kind for kind, spec in JUDGES.items() if spec.endpoint]
    parser.add_argument("--judge", choices=endpoint_judges, help="also measure this judge at an endpoint "
                        "(plainly and with --contrast) in the transfer table")  # fmt: skip
    parser.add_argument("--judge-base-url", help="the judge's OpenAI-compatible endpoint (with --judge)")
    parser.add_argument("--judge-model", help="the model name the endpoint serves (with --judge)")
    parser.add_argument("--threshold", type=float, default=0.85, help="cascade: the learned verdicts less sure "
                        "than this go to the LLM (README: 0.7 sends about a third on)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.judge:
        try:  # the judges' endpoint rule (fic.judges.JudgeSettings)
            JudgeSettings(args.judge, args.judge_base_url, args.judge_model, where="--judge")
        except ValueError as err:
            parser.error(str(err))
    default_out = (
        f"outputs/judge_calibration_{args.judge}.json" if args.judge else "labels/followup/judge_calibration.json"
    )
    args.out = Path(args.out or ROOT / default_out)
    endpoint = {"base_url": args.judge_base_url, "model": args.judge_model, "threshold": args.threshold}

    from fic.judges.provenance import prompt_hash

    test_items: dict[str, set[str]] = {}
    for row in _jsonl(Path(args.labels)):
        if row["split"] == "test":
            test_items.setdefault(row["dataset"], set()).add(prompt_hash(row["messages"]))
    judges = transfer_judges(args.judge, **endpoint)
    report = {
        "transfer": transfer(args.draws, args.seed, judges),
        "likelihood": likelihood_check(args.draws, args.seed),
    }
    print_transfer(report["transfer"])
    print_likelihood(report["likelihood"])
    for kind in ("heuristic", "learned"):
        version = make_judge(kind).version
        report[kind] = {
            "version": version,
            "calibrated": calibrated_widths(pairs_of(version), args.labels_per_run, args.draws, args.seed),
            "test_split": test_split_rates(version, test_items),
        }
    best = min(("heuristic", "learned"), key=lambda k: report[k]["calibrated"]["mean_width"])
    report["narrowest_calibrated"] = best
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
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
