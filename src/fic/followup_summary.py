"""The one summary of judged follow-up turns: what `fic probe`, `fic rates`, the trainers' before/after, checkpoint
evaluation and `make reproduce` all print.

Input: sample rows as `fic probe` writes them (`dataset`, `item_id`, `temperature`, `perturbation`, `sample`,
`messages`, `user_turn`, `label`, `genuine`, and `generic_genuine` where the context-swap control ran). A rate is an
estimate of what careful readers would say, not a count of verdicts, so every figure carries:

- `raw`: the judge's genuine rate with a 95% interval clustered by item (`fic.estimates.cluster_rate`: the samples,
  temperatures and controls of one item share one conversation and are not independent), `n` turns and `n_items`.
- `corrected`: the Rogan-Gladen estimate from the judge's sensitivity and specificity on labelled held-out turns
  (`fic.judges.validity`), per dataset where the labels suffice and pooled otherwise, or null with a note. It assumes
  that the judge's error on those labelled turns transfers to this model's turns.
- `calibrated`: the prediction-powered (PPI++) estimate where labels of this run's own turns exist (`fic review
  RUN --sample N`, then `fic rates RUN`), or null with `calibrated_note` saying why (not estimable: fewer than
  `fic.estimates.MIN_CLUSTERS` items hold labelled turns).
- `generic_floor`: the share of turns still judged genuine when the item's answer is swapped for another item's
  answer (a turn such as "Can you give me an example of that?" fits any answer).

Items inside the judge's fit (allowed only with `--allow-judge-overlap`) are counted in `judge_overlap` and left out of
the corrected and calibrated estimates.
"""

from __future__ import annotations

from collections.abc import Mapping

from fic.estimates import cluster_rate, corrected_rate, holm, paired_difference, rate_variance
from fic.judges.validity import dataset_errors
from fic.metric_names import probe_accuracy, probe_corrected, probe_generic_floor, probe_genuine, temperature_key
from fic.metrics import cohen_kappa, label_distribution, percent_changed
from fic.ppi import ppi_paired_difference, ppi_rate

ASSUMPTION = ("corrected rates assume that the judge's sensitivity and specificity on its labelled held-out turns "
              "transfer to the turns of this run")  # fmt: skip
SEED_FLOOR = "reseed"  # the unperturbed context sampled again with another seed: the floor of % changed


def item_of(row: dict) -> tuple[str, str]:
    return (row["dataset"], str(row["item_id"]))


def row_key(row: dict) -> tuple:
    """The identity of one sample: dataset, item, temperature, perturbation, sample index."""
    return (row["dataset"], str(row["item_id"]), float(row["temperature"]), row["perturbation"], int(row["sample"]))


def decided(rows: list[dict], field: str = "genuine") -> list[dict]:
    return [r for r in rows if r.get(field) is not None]


def raw_rate(rows: list[dict], field: str = "genuine") -> dict:
    """`cluster_rate` over the rows whose `field` is decided, with the judge errors counted apart."""
    kept = decided(rows, field)
    cell = cluster_rate([bool(r[field]) for r in kept], [item_of(r) for r in kept])
    return {**cell, "judge_errors": len(rows) - len(kept)}


def corrected(rows: list[dict], errors: dict | None) -> tuple[dict | None, str]:
    """(`{rate, low, high}` or None, note) for the judge-corrected rate of `rows` under `errors`."""
    if not errors:
        return None, "no labelled held-out turns measure this judge: no corrected rate"
    kept = decided(rows)
    if not kept:
        return None, "no judged turns"
    flags, clusters = [bool(r["genuine"]) for r in kept], [item_of(r) for r in kept]
    rate = sum(flags) / len(flags)
    out = corrected_rate(rate, rate_variance(flags, clusters), errors)
    if out.get("rate") is None:
        return None, out.get("note", "")
    cell = {k: out[k] for k in ("rate", "low", "high")}
    return (
        cell,
        f"{ASSUMPTION} ({errors.get('source', 'pooled')} sensitivity {errors['sensitivity']:.2f}, "
        f"specificity {errors['specificity']:.2f})",
    )


def ppi_arm(rows: list[dict], labels: dict[tuple, bool]) -> dict | None:
    """`ppi_rate`'s arguments by name for the judged `rows` and the labels of some of them (None under 2 labels):
    one arm of `fic.ppi.ppi_paired_difference`, items keyed `(dataset, item_id)`."""
    kept = decided(rows)
    labelled = [r for r in kept if row_key(r) in labels]
    if len(labelled) < 2:
        return None
    return {
        "labelled_human": [labels[row_key(r)] for r in labelled],
        "labelled_judge": [bool(r["genuine"]) for r in labelled],
        "all_judge": [bool(r["genuine"]) for r in kept],
        "all_clusters": [item_of(r) for r in kept],
        "labelled_clusters": [item_of(r) for r in labelled],
    }


def calibrated_estimate(rows: list[dict], labels: dict[tuple, bool]) -> tuple[dict | None, str]:
    """(`{rate, low, high, n_labels, lambda, labels_only}` or None, note) for the PPI++ estimate of the labelled rate
    of `rows` from the labels of some of them: None without 2 labels (note "") or when not estimable (the note
    says so)."""
    arm = ppi_arm(rows, labels)
    if arm is None:
        return None, ""
    out = ppi_rate(**arm)
    if out["rate"] is None:
        return None, f"{out['note']} ({out['n_labels']} labels)"
    return {"rate": out["rate"], "low": out["low"], "high": out["high"], "n_labels": out["n_labels"],
            "lambda": out["lambda"], "labels_only": out["labels_only"]}, ""  # fmt: skip


def calibrated(rows: list[dict], labels: dict[tuple, bool]) -> dict | None:
    """The PPI++ estimate of the labelled rate of `rows` from the labels of some of them (None without labels or
    when not estimable: `calibrated_estimate` says why)."""
    return calibrated_estimate(rows, labels)[0]


def run_agreement(rows: list[dict], labels: dict[tuple, bool]) -> dict | None:
    """The judge against this run's own labels: n, binary kappa, false-positive rate, recall."""
    pairs = [(labels[row_key(r)], bool(r["genuine"])) for r in decided(rows) if row_key(r) in labels]
    if not pairs:
        return None
    human, judge = zip(*pairs)
    negatives = [j for h, j in pairs if not h]
    positives = [j for h, j in pairs if h]
    return {
        "n": len(pairs),
        "binary_kappa": cohen_kappa(list(human), list(judge)),
        "false_positive_rate": sum(negatives) / len(negatives) if negatives else None,
        "recall": sum(positives) / len(positives) if positives else None,
        "labelled_rate": sum(human) / len(human),
        "judged_rate": sum(judge) / len(judge),
    }


def estimate(rows: list[dict], errors: dict | None, labels: dict[tuple, bool], excluded: set | None) -> dict:
    """`{raw, corrected, corrected_note, calibrated, calibrated_note, generic_floor, agreement}` of one group of
    rows; the rows of `excluded` items (inside the judge's fit) stay out of the corrected and calibrated rates."""
    clean = rows if not excluded else [r for r in rows if item_of(r) not in excluded]
    corrected_cell, note = corrected(clean, errors)
    if len(clean) < len(rows):
        note += f"; {len(rows) - len(clean)} turns of items inside the judge's fit left out"
    floor = raw_rate(rows, "generic_genuine") if any("generic_genuine" in r for r in rows) else None
    calibrated_cell, calibrated_note = calibrated_estimate(clean, labels)
    return {
        "raw": raw_rate(rows),
        "corrected": corrected_cell,
        "corrected_note": note,
        "calibrated": calibrated_cell,
        "calibrated_note": calibrated_note,
        "generic_floor": floor,
        "agreement": run_agreement(rows, labels),
    }


def summarize(rows: list[dict], accuracy: dict[str, dict] | None = None, validity: dict | None = None,
              labels: list[dict] | None = None, excluded: set | None = None) -> dict:  # fmt: skip
    """The summary of judged turns (module docstring): cells, `by_dataset`, `overall`, controls and % changed.

    Args:
        rows: sample rows (see the module docstring).
        accuracy: `{dataset: {"accuracy", "n"}}` of the answers the turns reply to.
        validity: `fic.judges.validity.judge_validity(judge)`: its `errors` give the corrected rates.
        labels: rows of a labels file (`fic review RUN --sample N`): the sample's key fields and `genuine`.
        excluded: `(dataset, item_id)` of items inside the judge's fit (evaluated with overlap allowed).
    """
    validity = validity or {}
    label_map = {row_key(r): bool(r["genuine"]) for r in labels or []}
    by_cell: dict[tuple, list[dict]] = {}
    by_dataset: dict[str, list[dict]] = {}
    for row in rows:
        by_cell.setdefault((row["dataset"], float(row["temperature"]), row["perturbation"]), []).append(row)
        by_dataset.setdefault(row["dataset"], []).append(row)
    genuine = {}
    for (dataset, temp, pert), group in sorted(by_cell.items()):
        cell = raw_rate(group)
        cell["labels"] = label_distribution([r["label"] for r in group])
        if any("generic_genuine" in r for r in group):
            cell["generic_floor"] = raw_rate(group, "generic_genuine")
        genuine.setdefault(dataset, {}).setdefault(temperature_key(temp), {})[pert] = cell
    overall = estimate(rows, dataset_errors(validity, None), label_map, excluded)
    overall["judge"] = _judge_about(validity, dataset_errors(validity, None))
    datasets = {}
    for dataset, group in sorted(by_dataset.items()):
        errors = dataset_errors(validity, dataset)
        datasets[dataset] = {**estimate(group, errors, label_map, excluded), "judge": _judge_about(validity, errors)}
    return {
        "genuine_rate": genuine,
        "by_dataset": datasets,
        "overall": overall,
        "labels": label_distribution([r["label"] for r in rows]),
        "judge_errors": sum(1 for r in rows if r.get("genuine") is None),
        "n_samples": len(rows),
        "n_items": len({item_of(r) for r in rows}),
        "n_labels": sum(1 for r in rows if row_key(r) in label_map),
        "accuracy": accuracy or {},
        "percent_changed": changed(rows),
        "genuine_by_correct": by_correct(rows),
        "assumption": ASSUMPTION,
    }


def _judge_about(validity: dict, errors: dict | None) -> dict:
    about = {"name": validity.get("name"), "version": validity.get("version")}
    if errors:
        about.update({k: errors.get(k) for k in ("source", "sensitivity", "specificity", "n_pos", "n_neg")})
    return about


def changed(rows: list[dict]) -> dict:
    """% changed per perturbation against `none` at the same seed, overall and per dataset x temperature. The
    `reseed` entry (the unperturbed context sampled with another seed) is the floor the controls read against."""
    texts: dict[str, dict[tuple, str]] = {}
    for row in rows:
        key = (row["dataset"], str(row["item_id"]), float(row["temperature"]), int(row["sample"]))
        texts.setdefault(row["perturbation"], {})[key] = row["user_turn"]
    base = texts.get("none", {})
    out = {}
    for pert, perturbed in sorted(texts.items()):
        if pert == "none" or not base:
            continue
        cells: dict[str, dict] = {}
        for key, text in perturbed.items():
            cells.setdefault(f"{key[0]}@{temperature_key(key[2])}", {})[key] = text
        out[pert] = {"overall": percent_changed(base, perturbed)}
        out[pert].update({cell: percent_changed(base, texts_) for cell, texts_ in sorted(cells.items())})
    return out


def by_correct(rows: list[dict]) -> dict:
    """Genuine rate split by whether the assistant response was correct (accuracy vs follow-up)."""
    out = {}
    for flag, name in ((True, "correct"), (False, "incorrect")):
        group = [r for r in rows if r.get("correct") is flag]
        if decided(group):
            out[name] = raw_rate(group)
    return out


def reading(diff: dict) -> str:
    """`+12.0 points [+3.1, +20.9], p=0.01` of a paired difference, with ": no detectable change" when its interval
    covers 0; the note when it is not estimable."""
    if diff["diff"] is None:
        return diff["note"]
    return (
        f"{'+' if diff['diff'] >= 0 else ''}{100 * diff['diff']:.1f} points "
        f"[{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}], p={diff['p']:.2f}"
        + ("" if diff["detectable"] else ": no detectable change")
    )


def with_holm(family: Mapping[str, dict | None], alpha: float = 0.05) -> dict[str, dict | None]:
    """The paired differences of one family of comparisons (e.g. every trained arm against the base model), each with
    `p_holm` (`fic.estimates.holm` over the family), `detectable_holm` (interval excludes 0 and p_holm < alpha) and
    `reading` saying both p-values; entries that are None or not estimable are left as they are."""
    names = [k for k, d in family.items() if d and d.get("diff") is not None and d.get("p") is not None]
    adjusted = dict(zip(names, holm([family[k]["p"] for k in names]), strict=True))
    out = {}
    for name, d in family.items():
        if name not in adjusted:
            out[name] = d
            continue
        p_holm = adjusted[name]
        found = bool(d["detectable"]) and p_holm < alpha
        verdict = (
            ""
            if found
            else (
                ": no detectable change"
                if not d["detectable"]
                else f": no detectable change after Holm's adjustment over {len(names)} comparisons"
            )
        )
        text = f"{reading({**d, 'detectable': True})}, Holm-adjusted p={p_holm:.2f}{verdict}"
        out[name] = {**d, "p_holm": p_holm, "detectable_holm": found, "holm_family": len(names), "reading": text}
    return out


def _by_dataset(before: list[dict], after: list[dict], one) -> dict:
    datasets = sorted({r["dataset"] for r in before} & {r["dataset"] for r in after})
    return {
        "overall": one(before, after),
        "by_dataset": {
            d: one([r for r in before if r["dataset"] == d], [r for r in after if r["dataset"] == d]) for d in datasets
        },  # fmt: skip
    }


def compare(before: list[dict], after: list[dict], seed: int = 0) -> dict:
    """The paired, item-clustered difference after - before (pooled and per dataset) of two runs on the same items.

    Each entry: `{diff, low, high, p, n_items, rate_a, rate_b, detectable, note, reading}` (None where no item is in
    both); `reading` says "no detectable change" when the interval covers 0, and is the note ("not estimable: ...")
    when fewer than `fic.estimates.MIN_CLUSTERS` items are in both (diff, low, high and p are None then)."""

    def per_item(rows: list[dict]) -> dict:
        out: dict[tuple, list[bool]] = {}
        for r in decided(rows):
            out.setdefault(item_of(r), []).append(bool(r["genuine"]))
        return out

    def one(a_rows: list[dict], b_rows: list[dict]) -> dict | None:
        a, b = per_item(a_rows), per_item(b_rows)
        if not set(a) & set(b):
            return None
        out = paired_difference(a, b, seed=seed)
        return {**out, "reading": reading(out)}

    return _by_dataset(before, after, one)


def compare_calibrated(before: list[dict], after: list[dict], labels_before: dict[tuple, bool],
                       labels_after: dict[tuple, bool], excluded: set | None = None) -> dict:  # fmt: skip
    """The calibrated (PPI++) difference after - before (pooled and per dataset) of two labelled runs on the same
    items, paired by item (`fic.ppi.ppi_paired_difference`): the estimate of what readers would say, beside
    `compare`'s judged one. The rows of `excluded` items (inside the judge's fit) stay out, as in `estimate`.

    Each entry: `ppi_paired_difference`'s dict with `reading`, or None where an arm has under 2 labels."""

    def one(a_rows: list[dict], b_rows: list[dict]) -> dict | None:
        if excluded:
            a_rows, b_rows = ([r for r in rows if item_of(r) not in excluded] for rows in (a_rows, b_rows))
        a, b = ppi_arm(a_rows, labels_before), ppi_arm(b_rows, labels_after)
        if a is None or b is None:
            return None
        out = ppi_paired_difference(a, b)
        return {**out, "reading": reading(out)}

    return _by_dataset(before, after, one)


def flat_metrics(summary: dict, perturbations: tuple[str, ...] = ("none",)) -> dict[str, float]:
    """Flat metrics for wandb and comparison tables (names from `fic.metric_names`): the raw genuine rate of every
    dataset x temperature under each of `perturbations`, each dataset's corrected rate and generic floor where
    there is one, and each dataset's task accuracy."""
    out = {}
    for dataset, temps in summary["genuine_rate"].items():
        for temp, perts in temps.items():
            for perturbation in perturbations:
                if perturbation in perts:
                    out[probe_genuine(dataset, temp, perturbation)] = perts[perturbation]["rate"]
    for dataset, est in summary.get("by_dataset", {}).items():
        if est.get("corrected"):
            out[probe_corrected(dataset)] = est["corrected"]["rate"]
        if est.get("generic_floor"):
            out[probe_generic_floor(dataset)] = est["generic_floor"]["rate"]
    for dataset, acc in summary.get("accuracy", {}).items():
        if acc.get("accuracy") is not None:
            out[probe_accuracy(dataset)] = acc["accuracy"]
    return out
