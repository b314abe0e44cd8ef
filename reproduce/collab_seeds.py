"""The collab part's trained models at several training seeds: their pooled rates and paired differences from the
base model, each with an interval that resamples the seeds and the contexts together, and each seed's own figures.

A trained arm's rate varies with the contexts drawn and with its training seed; an interval over contexts alone
treats the seed as fixed and is too narrow when seeds disagree. As in the VASD part (`vasd_estimates`), every pooled
figure comes from `fic.bootstrap.seed_task_bootstrap`: a replicate draws the seeds with replacement and, apart from
them, the contexts with replacement (clustered by context, as the one-seed intervals are: the turns of one context
are not independent), one draw for every arm, so a difference from the base model is paired by context, and the base
model, which no training seed changes, is the same in every seed draw. A rate pools every turn of every seed; a
difference is the pooled rate minus the base model's on the same contexts. Under `fic.estimates.MIN_CLUSTERS`
contexts (HealthBench's 9 held-out items) a difference is not estimable, as `fic.estimates.paired_difference` says.
With one seed the part reads the probes' own summaries and `fic.followup_summary.compare` instead (the one-seed
figures, unchanged).
"""

from __future__ import annotations

import repro
from vasd_estimates import difference, seed_rate, seed_spread

INTERVAL = "seeds and contexts resampled (fic.bootstrap.seed_task_bootstrap)"


def verdicts(rows: list[dict], field: str = "genuine") -> dict[tuple, list[bool]]:
    """The decided verdicts (`field`: the judge's `genuine`, or `generic_genuine`, the generic floor) of probe rows,
    per context (dataset, item)."""
    from fic.followup_summary import decided, item_of

    out: dict[tuple, list[bool]] = {}
    for r in decided(rows, field):
        out.setdefault(item_of(r), []).append(bool(r[field]))
    return out


def pooled_rate(runs: dict[int, list[dict]], field: str = "genuine") -> dict | None:
    """The rate of one model's rows at every seed (`{seed: rows}`), pooled, with the seed-and-context bootstrap
    interval: `{rate, low, high, n, n_items, n_seeds, interval}`; None where no row decides `field`."""
    arm = {seed: verdicts(rows, field) for seed, rows in runs.items()}
    if not all(arm.values()):
        return None
    return {**seed_rate(arm), "interval": INTERVAL}


def pooled_difference(base: list[dict], runs: dict[int, list[dict]], field: str = "genuine") -> dict | None:
    """The trained model's pooled rate at its seeds minus the base model's on the same contexts (paired by context;
    the base model seed-free), with the seed-and-context bootstrap interval and p: `{diff, low, high, p, n_items,
    n_seeds, rate_a, rate_b, detectable, note, reading}`, as `fic.followup_summary.compare` gives one seed's; under
    `MIN_CLUSTERS` contexts diff, low, high and p are None and `note` says why. None where no context is in both."""
    from fic.estimates import MIN_CLUSTERS
    from fic.followup_summary import reading

    a, b = {None: verdicts(base, field)}, {seed: verdicts(rows, field) for seed, rows in runs.items()}
    common = [item for item in a[None] if all(item in by_item for by_item in b.values())]
    if not common:
        return None
    if len(common) < MIN_CLUSTERS:

        def share(arm: dict) -> float:
            return sum(sum(v[i]) for v in arm.values() for i in common) / sum(
                len(v[i]) for v in arm.values() for i in common
            )

        out = {"diff": None, "low": None, "high": None, "p": None, "n_items": len(common), "n_seeds": len(b),
               "rate_a": share(a), "rate_b": share(b), "detectable": False,
               "note": repro.few_clusters({"n_items": len(common)})}  # fmt: skip
        return {**out, "reading": reading(out)}
    out = {**difference(a, b), "note": ""}
    return {**out, "reading": reading(out)}


def spread(values: list[float | None]) -> dict | None:
    """Mean, sample sd, min and max of one figure over the seeds (`vasd_estimates.seed_spread`); None where a seed
    has no value (a difference that is not estimable)."""
    if not values or any(v is None for v in values):
        return None
    return seed_spread(values)
