"""Table 7 of the probe part: the reproduction's judge against the labels' test split (`labels/followup/`), and the
second labeller against the first, on a random and a balanced slice, with kappas' intervals over items.
"""

from __future__ import annotations

import random

import repro
from repro import Table

from fic.followup_summary import item_of, row_key

LABELS_DIR = repro.ROOT / "labels" / "followup"
GENUINE = "genuine_followup"


def labelled_test_rows() -> list[dict]:
    """The labelled turns of the labels' test split."""
    return [r for r in repro.read_jsonl(LABELS_DIR / "labels.jsonl") if r["split"] == "test"]


def double_labelled_rows() -> list[dict]:
    """The second labeller's labels of test-split turns."""
    return [r for r in repro.read_jsonl(LABELS_DIR / "double.jsonl") if r["split"] == "test"]


def judge_labels(rows: list[dict]) -> list[str]:
    """The reproduction's judge's label of each labelled turn (judged here, in its context)."""
    from fic.followup_eval import judge_turns
    from fic.judges import make_judge

    verdicts = judge_turns(make_judge(repro.JUDGE), [r["messages"] for r in rows], [[r["user_turn"]] for r in rows])
    return [v[0].label for v in verdicts]


def balanced(pairs: list[tuple], seed: int = 0) -> list[tuple]:
    """Every pair whose reference label (first element) is genuine and as many of the others, drawn at random."""
    genuine = [p for p in pairs if p[0] == GENUINE]
    others = [p for p in pairs if p[0] != GENUINE]
    return genuine + random.Random(seed).sample(others, min(len(genuine), len(others)))


def agreement_row(pairs: list[tuple], n_boot: int = 1000, seed: int = 0) -> dict:
    """N, genuine agreement and kappa, label agreement and kappa of `(reference label, other label, item)` pairs,
    each kappa with a 95% bootstrap interval over items (the turns of one item are not independent). The genuine
    kappa's interval is the core's (`fic.judges.agreement.binary_agreement`); the label kappa's comes from the same
    item bootstrap (`fic.bootstrap.item_bootstrap`: the same resamples, the same percentile rule)."""
    from fic.bootstrap import item_bootstrap
    from fic.judges.agreement import binary_agreement
    from fic.metrics import agreement, cohen_kappa

    if not pairs:
        return {"n": 0}
    reference, other, items = (list(x) for x in zip(*pairs))
    genuine_ref, genuine_other = [x == GENUINE for x in reference], [x == GENUINE for x in other]
    binary = binary_agreement(genuine_ref, genuine_other, items, n_boot, seed)
    by_item: dict = {}
    for p in pairs:
        by_item.setdefault(p[2], []).append(p)
    label = item_bootstrap(
        list(by_item.values()), lambda rows: {"kappa": cohen_kappa([r[0] for r in rows], [r[1] for r in rows])},
        n_boot, seed,
    )["kappa"]  # fmt: skip
    kappa = binary["kappa"]
    return {
        "n": len(pairs), "n_items": binary["n_items"],
        "genuine_agreement": agreement(genuine_ref, genuine_other), "genuine_kappa": kappa["value"],
        "label_agreement": agreement(reference, other), "label_kappa": label["value"],
        "genuine_kappa_low": kappa["low"], "genuine_kappa_high": kappa["high"],
        "label_kappa_low": label["low"], "label_kappa_high": label["high"],
    }  # fmt: skip


def judge_validation(test_rows: list[dict], double_rows: list[dict], judge_labels) -> dict:
    """Table 7's numbers on the labels' test split: the judge (`judge_labels(rows) -> labels`) against the labels,
    and the second labeller against the first, each on a random slice (every test turn, or every double-labelled one)
    and a balanced one (every turn the reference called genuine and as many others, drawn with seed 0)."""
    judged = judge_labels(test_rows)
    judge_pairs = [(r["label"], j, item_of(r)) for r, j in zip(test_rows, judged)]
    first = {row_key(r): r for r in test_rows}
    double_pairs = [(first[row_key(r)]["label"], r["label"], item_of(r)) for r in double_rows if row_key(r) in first]
    return {
        "judge_vs_labels": {"random": agreement_row(judge_pairs), "balanced": agreement_row(balanced(judge_pairs))},
        "labeller_vs_labeller": {"random": agreement_row(double_pairs),
                                 "balanced": agreement_row(balanced(double_pairs))},
        "split": "test", "judge": repro.JUDGE, "labels_by": repro.LABELS_BY,
    }  # fmt: skip


def judge_validation_table(validation: dict) -> Table:
    def kappa(c: dict, name: str) -> str:
        if not c.get("n"):
            return "n/a"
        return repro.few_clusters(c) or f"{c[name]:.2f} [{c[name + '_low']:.2f}, {c[name + '_high']:.2f}]"

    def agreement(c: dict, name: str) -> str:
        return "n/a" if not c.get("n") else repro.few_clusters(c) or f"{c[name]:.2f}"

    rows = []
    for who, label in (
        ("judge_vs_labels", f"judge `{repro.JUDGE}` vs labels"),
        ("labeller_vs_labeller", "second labeller vs first"),
    ):
        for slice_ in ("random", "balanced"):
            c = validation[who][slice_]
            rows.append([label, slice_, c.get("n"), c.get("n_items"),
                         agreement(c, "genuine_agreement"), kappa(c, "genuine_kappa"),
                         agreement(c, "label_agreement"), kappa(c, "label_kappa")])  # fmt: skip
    return Table(
        "Table 7: judge validation on the labels' test split (SmolLM2 turns outside every fit; labels by "
        "independent AI-agent annotators following labels/followup/GUIDELINE.md, blind): random = every test turn "
        "(every double-labelled one for the labellers), balanced = every turn the reference labelled genuine and "
        "as many others drawn at random; kappas with 95% bootstrap intervals over items",
        ["comparison", "slice", "N", "items", "genuine agreement", "genuine kappa", "label agreement", "label kappa"],
        rows,
    )  # fmt: skip
