"""The probe part's comparisons and what they support: paired, item-clustered differences (T=1 against greedy, each
control against none; `fic.followup_summary.compare`) with their minimum detectable effect, and the sentences that
state an effect only where its interval excludes 0.
"""

from __future__ import annotations

import repro

from fic.metric_names import temperature_key

CONTROLS = ("truncate", "question")  # the perturbations read against the unperturbed context
MDE_NOTE = "80% power, two-sided alpha 0.05"
# The probe paper's reference points: greedy follow-up near 0% for most models, up to ~22% at T=1.0.
PAPER_GREEDY, PAPER_RISE = 0.0, 0.22


def differences(rows: list[dict], datasets: list[str], hot: float, control_temperatures: list[float]) -> dict:
    """Per dataset and pooled: T=`hot` against T=0 (unperturbed), and each control against none at each of
    `control_temperatures`, each a paired, item-clustered difference (`fic.followup_summary.compare`) with its
    minimum detectable effect."""
    from fic.followup_summary import compare

    def pick(d: str | None, t: float, p: str) -> list[dict]:
        return [r for r in rows if (d is None or r["dataset"] == d) and float(r["temperature"]) == float(t)
                and r["perturbation"] == p]  # fmt: skip

    out = {}
    for d in [*datasets, None]:
        out[d or "pooled"] = {
            "temperature": difference(compare(pick(d, 0.0, "none"), pick(d, hot, "none"))["overall"]),
            "controls": {f"{p}@{t}": difference(compare(pick(d, t, "none"), pick(d, t, p))["overall"])
                         for t in control_temperatures for p in CONTROLS},
        }  # fmt: skip
    return out


def difference(cell: dict | None) -> dict:
    """`{diff, low, high, p, n_items, detectable, se, mde}` of a comparison (empty when nothing was paired); `se` is
    read off the 95% interval's width, `mde` is the minimum detectable effect at 80% power and alpha 0.05 (None when
    the interval has no width)."""
    from fic.estimates import minimum_detectable_effect, standard_error_from_interval

    if not cell:
        return {}
    if cell["diff"] is None:  # under fic.estimates.MIN_CLUSTERS items: not estimable, the note says so
        return {**{k: cell[k] for k in ("diff", "low", "high", "p", "n_items", "detectable", "note")}, "se": None,
                "mde": None}  # fmt: skip
    se = standard_error_from_interval(cell["low"], cell["high"])
    # An interval of no width (every item gave the same verdict on both sides) says nothing of the power: no MDE.
    return {**{k: cell[k] for k in ("diff", "low", "high", "p", "n_items", "detectable")}, "se": se,
            "mde": minimum_detectable_effect(se) if se > 0 else None}  # fmt: skip


def points(cell: dict) -> str:
    """`-3.3 points [-23.3, +16.7], p=0.86` of a difference (its note when it is not estimable)."""
    if cell["diff"] is None:
        return cell["note"]
    return (f"{100 * cell['diff']:+.1f} points [{100 * cell['low']:+.1f}, {100 * cell['high']:+.1f}], "
            f"p={cell['p']:.2f}")  # fmt: skip


def effect_reading(cell: dict) -> str:
    """The claim a difference supports: the effect where its interval excludes 0, else "no detectable effect at this
    size" with the minimum detectable effect (a run this size would have seen an effect of that size 80% of the
    time)."""
    if not cell:
        return "n/a (nothing paired)"
    if cell["detectable"] or cell["diff"] is None:
        return points(cell)
    if not cell["mde"]:
        return f"no detectable effect at this size ({points(cell)}; every item gave the same verdict on both sides)"
    return (f"no detectable effect at this size ({points(cell)}; minimum detectable effect "
            f"{100 * cell['mde']:.0f} points at {MDE_NOTE})")  # fmt: skip


def rise_reading(diff: dict, paper_rise: float = PAPER_RISE) -> str:
    """How a T - greedy difference reads against the paper's rise: `shown` (lower end above 0), `contradicted`
    (upper end below 0), `excluded` (upper end below the paper's rise: a rise of the paper's size is ruled out,
    though a smaller one is not), `neither shown nor excluded`; `not estimable` without an interval."""
    if not diff or diff.get("low") is None:
        return "not estimable"
    if diff["low"] > 0:
        return "shown"
    if diff["high"] < 0:
        return "contradicted"
    if diff["high"] < paper_rise:
        return "excluded"
    return "neither shown nor excluded"


def temperature_paragraph(differences: dict, datasets: list[str], hot: float) -> str:
    """The text on T=`hot` against greedy: per dataset and pooled, the effect only where the interval excludes 0."""
    parts = [f"{d}: {effect_reading(differences[d]['temperature'])}" for d in datasets]
    parts.append(f"pooled over datasets: {effect_reading(differences['pooled']['temperature'])}")
    return (f"T={hot} against greedy (paired difference of the unperturbed rate, 95% cluster-bootstrap interval over "
            "items, read on the interval, not the point): " + "; ".join(parts) + ".")  # fmt: skip


def judge_paragraph(judge: dict, probe: dict) -> str:
    """The judge's figures as the corrected rates use them (`probe`: the `fic probe` summary)."""
    errors = probe["overall"].get("judge") or {}
    fpr = 1 - errors["specificity"] if errors.get("specificity") is not None else None
    return (
        f"Judge: {repro.judge_line(judge)}. None of the items here is in its fit. On its labelled held-out turns it "
        f"finds {_pct(errors.get('sensitivity'))} of the genuine turns and calls {_pct(fpr)} of the failures genuine "
        "(pooled); the corrected rates apply those figures (per dataset where its labels suffice), with intervals "
        f"that carry the judge's own uncertainty, under the stated assumption: {probe['assumption']}. A corrected "
        "rate below the raw one means the raw rate is within what the judge's false positives alone would give."
    )


def reference_paragraph(rates: dict, differences: dict, datasets: list[str], hot: float, estimates: dict) -> str:
    """The run read against the probe paper's reference points (greedy near 0%, a rise of up to 22 points)."""

    def cell(d: str, t: float) -> str:
        return repro.interval_cell(rates.get(d, {}).get(temperature_key(t), {}).get("none"))

    def said(d: str) -> str:
        diff = differences[d]["temperature"]
        reading = rise_reading(diff)
        if reading == "not estimable":
            return f"{d}: not estimable"
        interval = f"{100 * diff['diff']:+.1f} [{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}]"
        return f"{d} {interval}: {reading}"

    corrected = [f"{d} {repro.interval_cell((estimates.get(d) or {}).get('corrected'))}" for d in datasets]
    return (
        f"Reference points of the probe paper: greedy follow-up near {100 * PAPER_GREEDY:.0f}% for most models, up "
        f"to ~{100 * PAPER_RISE:.0f}% at T=1.0 (a rise of up to {100 * PAPER_RISE:.0f} points), and task accuracy "
        "does not predict it. Here (%, 95% intervals): greedy " + ", ".join(f"{d} {cell(d, 0.0)}" for d in datasets)
        + f"; at T={hot} " + ", ".join(f"{d} {cell(d, hot)}" for d in datasets)
        + f". The rise T={hot} - greedy (points; `excluded`: the interval's upper end is below the paper's "
        f"{100 * PAPER_RISE:.0f}-point rise, so a rise of its size is ruled out here, a smaller one is not): "
        + "; ".join(said(d) for d in [*datasets, "pooled"])
        + ". The raw greedy levels sit above the paper's ~0%; the judge's false positives explain that much: "
        "corrected for its measured errors, every turn of each dataset gives " + ", ".join(corrected)
        + " (the estimates table below), at the paper's level where the interval reaches 0."
    )  # fmt: skip


def _pct(rate) -> str:
    return "n/a" if rate is None else f"{100 * rate:.0f}%"
