"""Estimates a referee accepts: item-clustered rates, paired differences, judge-corrected and calibrated rates.

A judged rate is a count of judge verdicts over turns that are not independent (the samples, temperatures and
perturbations of one item share a conversation). The functions here turn such verdicts into estimates of what careful
readers would say, each with a 95% interval:

- [`cluster_rate`]: the raw rate with a Wilson interval at the item-clustered effective sample size.
- [`paired_difference`]: before/after on the same items, with a cluster-bootstrap interval and p-value.
- [`cluster_mean`]: a mean over rows that share clusters (episodes x user profiles), cluster-bootstrap interval.
- [`bootstrap_auroc`]: an AUROC with a bootstrap interval over items.
- [`judge_error_rates`] and [`corrected_rate`]: the Rogan-Gladen correction for the judge's sensitivity and
  specificity, with a delta-method interval that carries their uncertainty.
- [`minimum_detectable_effect`]: the smallest difference a run of this size detects (with
  [`standard_error_from_interval`]), said beside every "no detectable effect".

The calibrated (prediction-powered) estimates, built on the same conventions, are in `fic.ppi`.

Every function takes plain Python data and returns a plain dict of floats (nothing rounded); numpy only. An estimate
whose interval rests on fewer than `MIN_CLUSTERS` items comes back not estimable: its figures None and a `note`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from fic.bootstrap import alpha_of, bootstrap_p, draw_clusters, item_bootstrap, percentile_interval
from fic.metrics import wilson_bounds

# Fewest clusters (items) on which a cluster-resampled or cluster-robust interval is given. With fewer, the bootstrap
# can only recombine the few items at hand and the sandwich variance sum_g e_g^2 is itself a noisy estimate from a
# handful of terms: both come out too narrow, so `paired_difference`, `cluster_mean` and `fic.ppi`'s calibrated
# estimates say "not estimable" instead. `cluster_rate` (and `judge_error_rates` built on it) keeps its interval: its effective sample size is clamped to at least one independent turn per item, the interval of the
# items alone, which does not shrink with a noisy variance.
MIN_CLUSTERS = 10


def _not_estimable(n_clusters: int, where: str = "") -> str:
    return f"not estimable: {n_clusters} clusters (< {MIN_CLUSTERS})" + (f" {where}" if where else "")


def _logit_interval(theta: float, var: float, z: float) -> tuple[float, float]:
    # theta +- z sqrt(var) on the logit scale (delta method: sd / (theta (1 - theta))), mapped back into (0, 1);
    # outside (0, 1) the logit is undefined and the plain normal interval, clipped, is returned.
    if not 0 < theta < 1:
        half = z * math.sqrt(var)
        return max(0.0, theta - half), min(1.0, theta + half)
    spread = z * math.sqrt(var) / (theta * (1 - theta))
    centre = math.log(theta / (1 - theta))
    expit = lambda x: 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))  # noqa: E731
    return expit(centre - spread), expit(centre + spread)


def _effective_n(flags: Sequence[bool], clusters: Sequence[Hashable]) -> tuple[float, int, int, float]:
    """(p, n, n_items, n_eff) for the share of True in `flags`, clustered by `clusters` (see `cluster_rate`)."""
    if len(flags) != len(clusters):
        raise ValueError(f"{len(flags)} flags but {len(clusters)} cluster keys; give one item key per flag.")
    n = len(flags)
    totals: dict[Hashable, list[int]] = {}
    for flag, item in zip(flags, clusters):
        k_n = totals.setdefault(item, [0, 0])
        k_n[0] += bool(flag)
        k_n[1] += 1
    g = len(totals)
    if n == 0:
        return 0.0, 0, 0, 0.0
    p = sum(k for k, _ in totals.values()) / n
    if p in (0.0, 1.0) or g < 2:
        return p, n, g, float(g)
    v_cluster = g / (g - 1) * sum((k - p * m) ** 2 for k, m in totals.values()) / n**2
    n_eff = p * (1 - p) / v_cluster if v_cluster > 0 else float(n)
    return p, n, g, min(float(n), max(float(g), n_eff))


def cluster_rate(flags: Sequence[bool], clusters: Sequence[Hashable], z: float = 1.96) -> dict:
    """Share of True in `flags` with a 95% Wilson interval at the item-clustered effective sample size.

    Turns of one item are correlated, so `n` turns carry less information than `n` independent ones. The
    cluster-robust (ratio-estimator) variance of the share p = k / n over items g with k_g True of n_g turns is

        V = G / (G - 1) * sum_g (k_g - p * n_g)^2 / n^2,

    the design effect is deff = V / (p (1 - p) / n), and the interval is the Wilson score interval at
    n_eff = n / deff, clamped into [n_items, n]: no more information than `n` independent turns, no less than one
    independent turn per item. When p is 0 or 1 (V is 0 there) n_eff = n_items, the conservative end. With one
    turn per item this is the plain Wilson interval of `fic.metrics.wilson_interval`.

    Args:
        flags (`Sequence[bool]`): One verdict per turn.
        clusters (`Sequence[Hashable]`): The item of each turn (any hashable key), same length as `flags`.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile of the interval (1.96 for 95%).

    Returns:
        `dict`: `{"rate", "low", "high", "n", "n_items", "design_effect"}`, where `design_effect` is the one used,
        n / n_eff. With no turns, rate, low and high are 0.0 (as `fic.metrics.rate_with_interval`) and
        design_effect 1.0.
    """
    p, n, g, n_eff = _effective_n(flags, clusters)
    if n == 0:
        return {"rate": 0.0, "low": 0.0, "high": 0.0, "n": 0, "n_items": 0, "design_effect": 1.0}
    low, high = wilson_bounds(p, n_eff, z)
    return {"rate": p, "low": low, "high": high, "n": n, "n_items": g, "design_effect": n / n_eff}


def rate_variance(flags: Sequence[bool], clusters: Sequence[Hashable], z: float = 1.96) -> float:
    """A variance of the clustered rate that never collapses to 0: ((high - low) / (2 z))^2 of `cluster_rate`.

    At p = 0 or 1 the binomial variance p (1 - p) / n is 0, which would make any interval built on it a point;
    the Wilson interval keeps a width there, and this variance is read off that width.
    """
    r = cluster_rate(flags, clusters, z=z)
    return ((r["high"] - r["low"]) / (2 * z)) ** 2


def paired_difference(
    a: Mapping[Hashable, Sequence[bool]],
    b: Mapping[Hashable, Sequence[bool]],
    n_boot: int = 2000,
    seed: int = 0,
    z: float = 1.96,
) -> dict:
    """Difference of two rates on the same items (b minus a) with a paired, item-clustered bootstrap interval.

    Only items with at least one turn in both `a` and `b` count. Each rate is pooled over those items (sum of True
    over sum of turns). The interval is the percentile interval of the difference over `n_boot` resamples of the
    items with replacement (one resample draws the same items for `a` and `b`, which is what pairs them); the
    two-sided bootstrap p-value is p = min(1, 2 * min(P*(diff <= 0), P*(diff >= 0))), and 1.0 when every resampled
    difference is exactly 0. A p of 0.0 means below 1 / n_boot. Deterministic for a given `seed`. With fewer than
    `MIN_CLUSTERS` items in both the difference is not estimable (a resample only recombines those few items).

    Args:
        a (`Mapping[Hashable, Sequence[bool]]`): Item -> verdicts of its turns, first condition (e.g. before).
        b (`Mapping[Hashable, Sequence[bool]]`): Item -> verdicts of its turns, second condition (e.g. after).
        n_boot (`int`, *optional*, defaults to `2000`): Bootstrap resamples.
        seed (`int`, *optional*, defaults to `0`): Seed of the numpy Generator.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile naming the interval's level (1.96 for 95%).

    Returns:
        `dict`: `{"diff", "low", "high", "p", "n_items", "n_a", "n_b", "rate_a", "rate_b", "detectable", "note"}`;
        `detectable` is True when the interval excludes 0, `note` is "". Under `MIN_CLUSTERS` items diff, low, high
        and p are None, `detectable` is False and `note` is "not estimable: N clusters (< 10)"; the pooled rates and
        counts are still given.

    Raises:
        `ValueError`: when no item has turns in both.
    """
    common = [item for item, turns in a.items() if len(turns) and len(b.get(item, ()))]
    if not common:
        raise ValueError(
            f"no item has turns in both runs ({len(a)} items before, {len(b)} after, 0 in common); "
            "a paired difference needs the same items on both sides."
        )
    ka = np.array([sum(map(bool, a[i])) for i in common], dtype=float)
    na = np.array([len(a[i]) for i in common], dtype=float)
    kb = np.array([sum(map(bool, b[i])) for i in common], dtype=float)
    nb = np.array([len(b[i]) for i in common], dtype=float)
    rate_a, rate_b = ka.sum() / na.sum(), kb.sum() / nb.sum()
    counts = {"n_items": len(common), "n_a": int(na.sum()), "n_b": int(nb.sum()), "rate_a": rate_a, "rate_b": rate_b}
    if len(common) < MIN_CLUSTERS:
        return {"diff": None, "low": None, "high": None, "p": None, **counts, "detectable": False,
                "note": _not_estimable(len(common))}  # fmt: skip
    idx = draw_clusters(np.random.default_rng(seed), len(common), n_boot)
    diffs = kb[idx].sum(1) / nb[idx].sum(1) - ka[idx].sum(1) / na[idx].sum(1)
    low, high = percentile_interval(diffs, alpha_of(z))
    p = bootstrap_p(diffs)
    detectable = bool(low > 0 or high < 0)
    return {"diff": rate_b - rate_a, "low": low, "high": high, "p": p, **counts, "detectable": detectable, "note": ""}


def cluster_mean(
    values: Sequence[float], clusters: Sequence[Hashable], n_boot: int = 2000, seed: int = 0, z: float = 1.96
) -> dict:
    """Mean of `values` with a cluster-bootstrap interval: the clusters (e.g. episodes played under several user
    profiles) are resampled with replacement, each resample's mean pooled over its rows (sum over count).

    The effective n is the number of clusters, `n_items`; with few of them the percentile interval is too narrow,
    since a resample can only recombine the clusters at hand, so under `MIN_CLUSTERS` clusters the mean is not
    estimable. Deterministic for a given `seed`.

    Args:
        values (`Sequence[float]`): One value per row (e.g. the regret of an episode under one profile).
        clusters (`Sequence[Hashable]`): The cluster of each row, same length as `values`.
        n_boot (`int`, *optional*, defaults to `2000`): Bootstrap resamples.
        seed (`int`, *optional*, defaults to `0`): Seed of the numpy Generator.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile naming the interval's level (1.96 for 95%).

    Returns:
        `dict`: `{"mean", "low", "high", "n", "n_items", "note"}`, `note` ""; under `MIN_CLUSTERS` clusters (no
        rows included) mean, low and high are None and `note` is "not estimable: N clusters (< 10)".
    """
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster keys; give one cluster key per value.")
    sums: dict[Hashable, list[float]] = {}
    for value, cluster in zip(values, clusters):
        s_n = sums.setdefault(cluster, [0.0, 0])
        s_n[0] += float(value)
        s_n[1] += 1
    if len(sums) < MIN_CLUSTERS:
        return {"mean": None, "low": None, "high": None, "n": len(values), "n_items": len(sums),
                "note": _not_estimable(len(sums))}  # fmt: skip
    total = np.array([s for s, _ in sums.values()])
    count = np.array([m for _, m in sums.values()], dtype=float)
    mean = float(total.sum() / count.sum())
    idx = draw_clusters(np.random.default_rng(seed), len(total), n_boot)
    means = total[idx].sum(1) / count[idx].sum(1)
    low, high = percentile_interval(means, alpha_of(z), point=mean)
    return {"mean": mean, "low": low, "high": high, "n": len(values), "n_items": len(total), "note": ""}


def bootstrap_auroc(
    scores: Sequence[float], labels: Sequence[bool], n_boot: int = 2000, seed: int = 0, z: float = 1.96
) -> dict:
    """AUROC of `scores` for the True `labels` (`fic.metrics.auroc`) with a percentile bootstrap interval over the
    rows (`fic.bootstrap.item_bootstrap`, one row per item; resamples that lack a class are skipped).

    Returns:
        `dict`: `{"auroc", "low", "high", "n", "n_positive", "note"}`; auroc, low and high are None, with the reason in
        `note`, when one class is absent, when every score is tied (an AUROC of 0.5 by ties says nothing: "not
        measurable") or when there are fewer than `MIN_CLUSTERS` rows ("not estimable"); `note` is "" otherwise.
    """
    from fic.metrics import auroc

    if len(scores) != len(labels):
        raise ValueError(f"auroc needs one label per score ({len(scores)} vs {len(labels)}).")
    n_pos = sum(map(bool, labels))
    empty = {"auroc": None, "low": None, "high": None, "n": len(scores), "n_positive": n_pos}
    if n_pos in (0, len(scores)):
        return {**empty, "note": "not measurable: one class only"}
    if len({float(s) for s in scores}) == 1:
        return {**empty, "note": "not measurable: every score is tied"}
    if len(scores) < MIN_CLUSTERS:
        return {**empty, "note": _not_estimable(len(scores))}
    rows = [[(float(s), bool(y))] for s, y in zip(scores, labels)]

    def statistic(drawn: list) -> dict:
        return {"auroc": auroc([s for s, _ in drawn], [y for _, y in drawn])}

    cell = item_bootstrap(rows, statistic, n_boot, seed, alpha_of(z))["auroc"]
    return {"auroc": cell["value"], "low": cell["low"], "high": cell["high"], "n": len(scores), "n_positive": n_pos,
            "note": ""}  # fmt: skip


def _share_and_variance(flags: list[bool], clusters: list[Hashable]) -> tuple[float | None, float | None]:
    # The clustered variance p (1 - p) / n_eff; at p = 0 or 1 the Wilson-at-n_items variance, so it is never 0.
    if not flags:
        return None, None
    p, _, g, n_eff = _effective_n(flags, clusters)
    if p in (0.0, 1.0):
        low, high = wilson_bounds(p, g, 1.96)
        return p, ((high - low) / (2 * 1.96)) ** 2
    return p, p * (1 - p) / n_eff


def judge_error_rates(human: Sequence[bool], judge: Sequence[bool], clusters: Sequence[Hashable]) -> dict:
    """The judge's sensitivity and specificity against human labels, each with an item-clustered variance.

    sensitivity = P(judge genuine | human genuine) over the turns a reader called genuine, specificity =
    P(judge not genuine | human not genuine) over the others. Each variance is that of `cluster_rate` restricted to
    the relevant turns, p (1 - p) / n_eff (the cluster-robust ratio-estimator variance, n_eff clamped into
    [n_items, n]); at an estimate of 0 or 1 it is the variance read off the Wilson interval at n_items, so it never
    collapses to 0.

    Args:
        human (`Sequence[bool]`): The reader's label of each turn (True: genuine follow-up).
        judge (`Sequence[bool]`): The judge's verdict on the same turns.
        clusters (`Sequence[Hashable]`): The item of each turn.

    Returns:
        `dict`: `{"sensitivity", "specificity", "var_sensitivity", "var_specificity", "n_pos", "n_neg", "n_items"}`;
        sensitivity and its variance are None when no turn is labelled genuine (specificity likewise for none
        labelled not genuine).
    """
    if not len(human) == len(judge) == len(clusters):
        raise ValueError(
            f"{len(human)} labels, {len(judge)} verdicts, {len(clusters)} items: give one of each per turn."
        )
    pos = [(bool(j), c) for h, j, c in zip(human, judge, clusters) if h]
    neg = [(not j, c) for h, j, c in zip(human, judge, clusters) if not h]
    se, var_se = _share_and_variance([f for f, _ in pos], [c for _, c in pos])
    sp, var_sp = _share_and_variance([f for f, _ in neg], [c for _, c in neg])
    return {
        "sensitivity": se,
        "specificity": sp,
        "var_sensitivity": var_se,
        "var_specificity": var_sp,
        "n_pos": len(pos),
        "n_neg": len(neg),
        "n_items": len(set(clusters)),
    }


def corrected_rate(rate: float, var_rate: float, errors: dict, z: float = 1.96, min_youden: float = 0.1) -> dict:
    """The judged rate corrected for the judge's errors (Rogan-Gladen), with a delta-method interval.

    If the judge calls a turn genuine with probability se when a reader would (sensitivity) and not genuine with
    probability sp when a reader would not (specificity), the judged rate is p = se * theta + (1 - sp) (1 - theta)
    for the readers' rate theta, hence (Rogan & Gladen 1978)

        theta = (p + sp - 1) / J,    J = se + sp - 1 (Youden's J).

    Its partial derivatives are d theta / dp = 1 / J, d theta / d se = -theta / J and d theta / d sp = (1 - theta) / J,
    so with p, se and sp estimated independently (the run and the judge's labelled split are different turns) the
    delta-method variance is

        Var(theta) = (Var(p) + theta^2 Var(se) + (1 - theta)^2 Var(sp)) / J^2,

    and the interval is theta +- z sqrt(Var(theta)); point and interval are clipped to [0, 1]. This is the
    correction Lee et al. (arXiv 2511.21140) recommend for LLM-as-judge estimates. Its assumption: the judge's error
    on its labelled turns transfers to the turns of this run.

    The correction divides by J, so it is refused when J is not clearly away from 0: when its lower bound
    J - z sqrt(Var(se) + Var(sp)) is at most `min_youden` (or when se or sp is unknown).

    Args:
        rate (`float`): The judged (raw) rate p.
        var_rate (`float`): Its variance, e.g. `rate_variance` (clustered, never 0).
        errors (`dict`): The judge's figures, as returned by `judge_error_rates`.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile of the interval.
        min_youden (`float`, *optional*, defaults to `0.1`): Smallest lower bound of J for which to correct.

    Returns:
        `dict`: `{"rate", "low", "high", "youden", "note": ""}`, or `{"rate": None, "low": None, "high": None,
        "note"}` when refused, the note saying why in one sentence.
    """
    se, sp = errors.get("sensitivity"), errors.get("specificity")
    if se is None or sp is None:
        missing = "genuine" if se is None else "not-genuine"
        return {
            "rate": None,
            "low": None,
            "high": None,
            "note": f"no correction: the judge's labelled split has no {missing} turn, so its "
            f"{'sensitivity' if se is None else 'specificity'} is unknown.",
        }
    youden = se + sp - 1
    youden_low = youden - z * math.sqrt(errors["var_sensitivity"] + errors["var_specificity"])
    if youden_low <= min_youden:
        return {
            "rate": None,
            "low": None,
            "high": None,
            "note": f"no correction: sensitivity {se:.3f} + specificity {sp:.3f} - 1 = {youden:.3f} with lower bound "
            f"{youden_low:.3f} <= {min_youden}, too close to 0 to divide by.",
        }
    theta = (rate + sp - 1) / youden
    var = (var_rate + theta**2 * errors["var_sensitivity"] + (1 - theta) ** 2 * errors["var_specificity"]) / youden**2
    half = z * math.sqrt(var)
    clip = lambda x: min(1.0, max(0.0, x))  # noqa: E731
    return {"rate": clip(theta), "low": clip(theta - half), "high": clip(theta + half), "youden": youden, "note": ""}


def standard_error_from_interval(low: float, high: float, z: float = 1.96) -> float:
    """The standard error a symmetric normal 95% interval [low, high] implies: (high - low) / (2 z).

    A percentile bootstrap interval (`paired_difference`) is not exactly symmetric; its width still measures the
    spread of the estimate, which is what a power statement needs.
    """
    if high < low:
        raise ValueError(f"interval [{low}, {high}] has high < low; pass (low, high) in that order.")
    return (high - low) / (2 * z)


def minimum_detectable_effect(se: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true difference a two-sided test at level `alpha` detects with probability `power`, given the
    standard error `se` of the estimated difference (normal approximation):

        MDE = (z_{1 - alpha / 2} + z_{power}) * se,

    2.80 * se at alpha 0.05 and 80% power. With the observed item-clustered standard error of a paired difference
    this says how large an effect the run could have seen: "no detectable effect" at an MDE of 30 points rules out
    only effects of about 30 points or more, not an effect of 10.

    Args:
        se (`float`): Standard error of the difference (e.g. `standard_error_from_interval` of its 95% interval).
        alpha (`float`, *optional*, defaults to `0.05`): Two-sided significance level.
        power (`float`, *optional*, defaults to `0.8`): Probability of detecting an effect of the returned size.

    Returns:
        `float`: The minimum detectable effect, in the units of `se`.
    """
    from statistics import NormalDist

    if se < 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need se >= 0 and alpha, power in (0, 1); got se={se}, alpha={alpha}, power={power}.")
    normal = NormalDist()
    return (normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)) * se


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values of one family of comparisons, in the input's order.

    The k-th smallest of the m estimable p-values becomes max over j <= k of min(1, (m - j + 1) p_(j)); a family-wise
    error rate of alpha holds when "detectable" is read as adjusted p < alpha. None (not estimable) stays None and is
    not counted in m.
    """
    present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m, out, running = len(present), [None] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
