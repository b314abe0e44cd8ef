"""Agreement between two judgement files (two judges, or a judge and a human): Cohen's kappa and raw agreement.

Rows are paired by `id` when every row of both files has one; else by (dataset, item_id, temperature, perturbation,
sample) -- the probe's sample key, missing fields read as null -- when every row has an `item_id`; else by line order (the files must then have the same length). Rows either judge
marked `judge_error` (or with `genuine` null) are excluded from the statistics and counted. Kappa is reported on
the binary genuine decision and on the full label.
"""

from __future__ import annotations

from fic.metrics import agreement, cohen_kappa

from .labels import JUDGE_ERROR, LABELS

COMPOSITE_KEY = ("dataset", "item_id", "temperature", "perturbation", "sample")


def _key_kind(rows_a: list[dict], rows_b: list[dict]) -> str:
    rows = rows_a + rows_b
    if rows and all("id" in r for r in rows):
        return "id"
    if rows and all("item_id" in r for r in rows):
        return ",".join(COMPOSITE_KEY)
    return "line"


def _composite(row: dict) -> tuple:
    temperature = row.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        temperature = float(temperature)
    return tuple(temperature if k == "temperature" else row.get(k) for k in COMPOSITE_KEY)


def _keyed(rows: list[dict], kind: str, name: str) -> dict:
    out: dict = {}
    for lineno, row in enumerate(rows, 1):
        key = row["id"] if kind == "id" else _composite(row)
        if key in out:
            raise ValueError(
                f"{name} line {lineno}: key {key!r} ({kind}) repeats line {out[key][0]}; rows must be unique per key "
                "(add an `id` field to tell them apart)."
            )
        out[key] = (lineno, row)
    return out


def _decision(row: dict, name: str, lineno: int) -> tuple[str, bool] | None:
    """(label, genuine) of a judged row, or None for a judge_error row."""
    label = row.get("label")
    if label is None:
        raise ValueError(f"{name} line {lineno}: no `label` field; is this the output of `fic judge`?")
    if label == JUDGE_ERROR or row.get("genuine", True) is None:
        return None
    if label not in LABELS:
        raise ValueError(f"{name} line {lineno}: label={label!r} is not one of {sorted(LABELS) + [JUDGE_ERROR]}.")
    return label, label == "genuine_followup"


def judgement_agreement(rows_a: list[dict], rows_b: list[dict], names: tuple[str, str] = ("A", "B")) -> dict:
    """
    Pair the rows of two judgement files and compare them.

    Returns {"key", "n_a", "n_b", "matched", "unmatched_a", "unmatched_b", "judge_errors_a", "judge_errors_b",
    "excluded", "n", "binary": {"kappa", "agreement"}, "label": {"kappa", "agreement"}}; `n` is the number of
    pairs compared (matched pairs with no judge_error on either side), `excluded` the matched pairs dropped for a
    judge_error. The statistics are None when `n` is 0.
    """
    kind = _key_kind(rows_a, rows_b)
    if kind == "line":
        if len(rows_a) != len(rows_b):
            raise ValueError(
                f"{names[0]} has {len(rows_a)} rows and {names[1]} {len(rows_b)}, and the rows carry no `id` or "
                "`item_id` to match them by; give both files an `id` field or the same rows in the same order."
            )
        pairs = [((i + 1, a), (i + 1, b)) for i, (a, b) in enumerate(zip(rows_a, rows_b))]
        unmatched_a = unmatched_b = 0
    else:
        keyed_a, keyed_b = _keyed(rows_a, kind, names[0]), _keyed(rows_b, kind, names[1])
        pairs = [(keyed_a[k], keyed_b[k]) for k in keyed_a if k in keyed_b]
        unmatched_a, unmatched_b = len(keyed_a) - len(pairs), len(keyed_b) - len(pairs)

    errors_a = sum(_decision(r, names[0], i) is None for i, r in enumerate(rows_a, 1))
    errors_b = sum(_decision(r, names[1], i) is None for i, r in enumerate(rows_b, 1))
    labels_a, labels_b, excluded = [], [], 0
    for (line_a, row_a), (line_b, row_b) in pairs:
        da, db = _decision(row_a, names[0], line_a), _decision(row_b, names[1], line_b)
        if da is None or db is None:
            excluded += 1
            continue
        labels_a.append(da)
        labels_b.append(db)

    def stats(a: list, b: list) -> dict:
        if not a:
            return {"kappa": None, "agreement": None}
        return {"kappa": cohen_kappa(a, b), "agreement": agreement(a, b)}

    return {
        "key": kind,
        "n_a": len(rows_a),
        "n_b": len(rows_b),
        "matched": len(pairs),
        "unmatched_a": unmatched_a,
        "unmatched_b": unmatched_b,
        "judge_errors_a": errors_a,
        "judge_errors_b": errors_b,
        "excluded": excluded,
        "n": len(labels_a),
        "binary": stats([g for _, g in labels_a], [g for _, g in labels_b]),
        "label": stats([lab for lab, _ in labels_a], [lab for lab, _ in labels_b]),
    }


def binary_agreement(human: list[bool], judged: list[bool], clusters: list, draws: int = 1000, seed: int = 0,
                     alpha: float = 0.05) -> dict:  # fmt: skip
    """How a judge's binary decisions agree with labels: Cohen's kappa, false-positive rate (failures called
    genuine), true-positive rate, and both genuine rates, each with a percentile interval from a bootstrap over
    `clusters` (items: the turns of one item are not independent), `fic.bootstrap.item_bootstrap` with `draws`
    resamples: the interval is `np.quantile` of the replicates at alpha / 2 and 1 - alpha / 2, widened to hold the
    value. A pure function; deterministic in `seed`.

    Returns `{"n", "n_items", "kappa", "fpr", "tpr", "labelled_rate", "judged_rate"}`, each statistic a dict
    `{"value", "low", "high"}` (value None where undefined: no labelled failure for the FPR, no genuine for the TPR).
    """
    from fic.bootstrap import item_bootstrap  # numpy: importing the judges does not need it

    if not (len(human) == len(judged) == len(clusters)):
        raise ValueError(f"human, judged and clusters must have one entry per turn ({len(human)}, {len(judged)}, "
                         f"{len(clusters)})")  # fmt: skip
    groups: dict = {}
    for h, j, c in zip(human, judged, clusters):
        groups.setdefault(c, []).append((bool(h), bool(j)))

    def stats(pairs: list[tuple[bool, bool]]) -> dict:
        hs, js = [h for h, _ in pairs], [j for _, j in pairs]
        neg, pos = [j for h, j in pairs if not h], [j for h, j in pairs if h]
        return {"kappa": cohen_kappa(hs, js) if pairs else None, "fpr": sum(neg) / len(neg) if neg else None,
                "tpr": sum(pos) / len(pos) if pos else None, "labelled_rate": sum(hs) / len(hs) if hs else None,
                "judged_rate": sum(js) / len(js) if js else None}  # fmt: skip

    cells = item_bootstrap(list(groups.values()), stats, draws, seed, alpha)
    return {"n": len(human), "n_items": len(groups), **cells}
