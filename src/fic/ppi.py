"""Calibrated (prediction-powered, PPI++) rates: what readers would say, from the judge's verdicts on all turns and a
reader's labels on a random sample of them.

- [`ppi_rate`]: one run's calibrated rate, with an item-clustered interval never wider than the labels alone give.
- [`ppi_paired_difference`]: the difference of two arms' calibrated rates on the same items, paired by item.

The conventions are `fic.estimates`': plain Python data in, a plain dict of floats out, and "not estimable" (figures
None and a `note`) where the labelled items number fewer than `MIN_CLUSTERS`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from fic.estimates import MIN_CLUSTERS, _logit_interval, _not_estimable


def _ppi_fit(
    labelled_human: Sequence[bool],
    labelled_judge: Sequence[bool],
    all_judge: Sequence[bool],
    all_clusters: Sequence[Hashable] | None,
    labelled_clusters: Sequence[Hashable] | None,
    z: float,
) -> dict:
    """`ppi_rate`'s computation (its docstring gives the formulas): the lambda used, the tuned and labels-only
    estimates (each with its unclipped `theta` and `var`), the counts and, with `all_clusters`, the item `keys` with
    each item's parts `d` and `c` of the linearisation theta(w) - E theta ~ sum_g (w d_g + c_g), which
    `ppi_paired_difference` pairs across two arms."""
    n, big_n = len(labelled_human), len(all_judge)
    if n == 0:
        raise ValueError("a calibrated rate needs at least one labelled turn; label some with `fic review`.")
    if big_n == 0:
        raise ValueError(f"{n} labelled turns but no judge verdicts for the run; judge its turns first.")
    for name, got, want in [
        ("labelled judge verdicts", labelled_judge, n),
        ("labelled item keys", labelled_clusters, n),
        ("item keys", all_clusters, big_n),
    ]:
        if got is not None and len(got) != want:
            raise ValueError(f"{len(got)} {name} where {want} are needed (one per turn).")
    y = np.asarray(labelled_human, dtype=float)
    f = np.asarray(labelled_judge, dtype=float)
    f_all = np.asarray(all_judge, dtype=float)

    keys = d = c = None
    if all_clusters is None:
        n_items_labelled = n  # every labelled turn independent: each its own item
        var_f = float(np.var(np.concatenate([f, f_all]), ddof=1))
        cov = float(np.mean((y - y.mean()) * (f - f.mean())))
        lam = min(1.0, max(0.0, cov / ((1 + n / big_n) * var_f))) if var_f > 0 else 0.0

        def variance(w: float) -> float:
            return w**2 * float(f_all.var()) / big_n + float(np.var(y - w * f)) / n

    else:
        labelled_keys = labelled_clusters if labelled_clusters is not None else [object() for _ in range(n)]
        index = {k: i for i, k in enumerate(dict.fromkeys([*all_clusters, *labelled_keys]))}
        keys, g, n_items_labelled = list(index), len(index), len(set(labelled_keys))
        i_all = np.array([index[k] for k in all_clusters])
        i_lab = np.array([index[k] for k in labelled_keys])
        # theta linearised per item: e_g = lam * d_g + c_g (the judge's part and the labels' part).
        d = np.bincount(i_all, f_all - f_all.mean(), g) / big_n - np.bincount(i_lab, f - f.mean(), g) / n
        c = np.bincount(i_lab, y - y.mean(), g) / n
        dd = float(d @ d)
        lam = min(1.0, max(0.0, -float(c @ d) / dd)) if dd > 0 else 0.0

        def variance(w: float) -> float:
            return g / (g - 1) * float(np.sum((w * d + c) ** 2)) if g > 1 else math.inf

    def estimate(w: float) -> dict:
        theta = w * float(f_all.mean()) + float(np.mean(y - w * f))
        var = variance(w)
        low, high = _logit_interval(theta, var, z)
        return {"rate": min(1.0, max(0.0, theta)), "low": low, "high": high, "se": math.sqrt(var), "var": var,
                "theta": theta}  # fmt: skip

    labels_only, tuned = estimate(0.0), estimate(lam)
    if tuned["var"] > labels_only["var"] or tuned["high"] - tuned["low"] > labels_only["high"] - labels_only["low"]:
        lam, tuned = 0.0, labels_only
    return {"lambda": lam, "tuned": tuned, "labels_only": labels_only, "keys": keys, "d": d, "c": c, "n_labels": n,
            "n": big_n, "n_items_labelled": n_items_labelled, "judged_rate": float(f_all.mean())}  # fmt: skip


def ppi_rate(
    labelled_human: Sequence[bool],
    labelled_judge: Sequence[bool],
    all_judge: Sequence[bool],
    all_clusters: Sequence[Hashable] | None = None,
    z: float = 1.96,
    labelled_clusters: Sequence[Hashable] | None = None,
) -> dict:
    """Prediction-powered estimate of the rate readers would give, power-tuned (PPI++).

    A reader labelled n of the run's N turns (y, drawn at random from the run); the judge's verdict f is known on
    all N (the labelled ones included). With a weight lambda on the judge (Angelopoulos, Duchi & Zrnic 2023,
    "PPI++: Efficient Prediction-Powered Inference", arXiv 2311.01453) the estimate is

        theta = mean_N(lambda f) + mean_n(y - lambda f),

    unbiased for any fixed lambda: the judge only moves the variance. With se = sqrt(Var(theta)), the interval is the
    normal interval on the logit scale, expit(logit(theta) +- z se / (theta (1 - theta))) (delta method), which stays
    inside (0, 1) and reaches further up than down near 0, where these rates live; when theta is not inside (0, 1)
    it is theta +- z se clipped to [0, 1]. The labels-only estimate is the same form at lambda = 0 (the mean of the
    labels); when the tuned variance exceeds its variance, or the tuned interval is wider, lambda = 0 is used, so
    the returned interval is never wider than the labels alone give.

    Without clusters this is PPI++ as the reference implementation `ppi-python` computes it
    (`ppi_py.ppi_mean_ci(Y, Yhat, Yhat_unlabeled, lam=None)` with `Yhat_unlabeled` = all N verdicts), which this
    function reproduces (point estimate, lambda and se; ppi-python's interval is theta +- z se):

        Var(theta) = lambda^2 Var_N(f) / N + Var_n(y - lambda f) / n,
        lambda = Cov_n(y, f) / ((1 + n / N) Var(f)), clipped to [0, 1] (0 when Var(f) is 0),

    with Var_N, Var_n and Cov_n dividing by N and n, and the Var(f) in lambda the sample variance (ddof 1) of the
    labelled verdicts followed by all N verdicts (ppi-python's conventions).

    With `all_clusters` (the item of each of the N turns) the variance is the cluster-robust one over items, which
    carries the correlation of turns within an item and the covariance between the two means (the labelled turns
    share items with the N): with e_g = lambda (F_g - mean_N(f) N_g) / N + (R_g - mean_n(y - lambda f) n_g) / n,
    F_g and N_g the sum of f and the count of the N turns of item g, R_g and n_g those of y - lambda f over its
    labelled turns,

        Var(theta) = G / (G - 1) sum_g e_g^2,

    and lambda is the value in [0, 1] that minimises it (a quadratic in lambda). Give `labelled_clusters` (the item
    of each labelled turn) for this; without it each labelled turn counts as an item of its own, which understates
    the variance when several labelled turns share an item.

    Limitations, stated plainly: the interval is a large-sample approximation, poor with a handful of labels (with
    10 labels all "not genuine" the labels-only interval is the point [0, 0], and the tuned one little better). In
    the simulation of `tests/test_estimates.py` (40 items x 6 turns, 60 labels, a rate of 0.2, strong clustering)
    the clustered interval covers the rate about 94% of the time; the plain normal interval theta +- z se, clipped,
    covered about 91%, which is why the logit scale is used.

    The interval's variance comes from the labelled items (the labels' part c_g is 0 elsewhere), so with fewer than
    `MIN_CLUSTERS` items holding a labelled turn (labelled turns, without `labelled_clusters`) the rate is not
    estimable.

    Args:
        labelled_human (`Sequence[bool]`): The reader's labels y of the n labelled turns.
        labelled_judge (`Sequence[bool]`): The judge's verdicts f on the same turns.
        all_judge (`Sequence[bool]`): The judge's verdicts on all N turns of the run, the labelled ones included.
        all_clusters (`Sequence[Hashable]`, *optional*): The item of each of the N turns.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile of the interval.
        labelled_clusters (`Sequence[Hashable]`, *optional*): The item of each labelled turn (with `all_clusters`).

    Returns:
        `dict`: `{"rate", "low", "high", "se", "n_labels", "n", "n_items_labelled", "lambda", "labels_only": {"rate",
        "low", "high", "se"}, "note": ""}`, `rate` clipped to [0, 1], `se` the standard error of the unclipped
        estimate. Not estimable: rate, low, high, se and lambda None (labels_only's too) and `note` "not estimable: N
        clusters (< 10) with labelled turns".

    Raises:
        `ValueError`: with no labels, or when lists that pair up differ in length.
    """
    fit = _ppi_fit(labelled_human, labelled_judge, all_judge, all_clusters, labelled_clusters, z)
    counts = {"n_labels": fit["n_labels"], "n": fit["n"], "n_items_labelled": fit["n_items_labelled"]}
    if fit["n_items_labelled"] < MIN_CLUSTERS:
        nothing = dict.fromkeys(("rate", "low", "high", "se"))
        return {**nothing, **counts, "lambda": None, "labels_only": dict(nothing),
                "note": _not_estimable(fit["n_items_labelled"], "with labelled turns")}  # fmt: skip
    keep = ("rate", "low", "high", "se")
    return {**{k: fit["tuned"][k] for k in keep}, **counts, "lambda": fit["lambda"],
            "labels_only": {k: fit["labels_only"][k] for k in keep}, "note": ""}  # fmt: skip


PPI_ARM = ("labelled_human", "labelled_judge", "all_judge", "all_clusters", "labelled_clusters")


def ppi_paired_difference(a: Mapping[str, Sequence], b: Mapping[str, Sequence], z: float = 1.96) -> dict:
    """Difference of two arms' calibrated (PPI++) rates on the same items (b minus a), with an interval paired by item.

    Each arm (e.g. two checkpoints probed on the same items) has the judge's verdicts on all its turns and a reader's
    labels on a random sample of them; its rate theta_a, theta_b is the PPI++ estimate of `ppi_rate`, with the
    lambda `ppi_rate` tunes for that arm alone, so each arm's rate here is the one `ppi_rate` gives it. The
    difference is theta_b - theta_a.

    Its variance is the cluster-robust (sandwich) variance over items of the difference's linearisation. `ppi_rate`
    writes theta_k(lambda) - E theta_k ~ sum_g e_kg with e_kg = lambda_k d_kg + c_kg, a sum of per-item terms; so
    theta_b - theta_a - E(...) ~ sum_g (e_bg - e_ag), and over the G items of either arm

        Var(theta_b - theta_a) = G / (G - 1) sum_g (e_bg - e_ag)^2
                               = Var_a + Var_b - 2 G / (G - 1) sum_g e_ag e_bg.

    The cross term is the pairing: an item that draws genuine turns (or judge errors) in one arm tends to draw them
    in the other, and the difference cancels that shared part; with positively correlated arms the paired interval
    is narrower than the unpaired one (`se_unpaired`, the same sum without the cross term). An item seen in one arm
    only contributes that arm's term. This linearisation, not a cluster bootstrap, because it is the variance each
    arm's `ppi_rate` interval already uses (the difference's interval and the arms' intervals agree by
    construction), it is deterministic, and a bootstrap resampling items jointly would have to re-tune both lambdas
    on every resample and breaks down on resamples that draw too few labelled items of an arm, which is exactly where
    labels are few. As in `ppi_rate`, lambda is estimated on the same data and treated as fixed (its effect on the
    variance vanishes with many items).

    The interval is diff +- z se, clipped to [-1, 1]; p is the two-sided normal p-value (1.0 when se and diff are
    both 0). The labels-only difference (lambda 0 in both arms) is given beside it; when its variance is smaller
    than the tuned one it is the one returned, so the interval is never wider than the labels alone give. Its
    limits: a large-sample normal approximation, like `ppi_rate`, a little short of its level with few items (the
    variance is estimated from the items at hand and lambda is tuned on them): in the simulation of
    `tests/test_ppi_paired.py` (4 turns per item and arm, strongly paired, judge sensitivity 0.8 and specificity
    0.9) it covered the true difference in 92.5% of 4,000 draws at 30 items and 40 labels per arm, 93% at 60 items
    and 80 labels, 90.5% at 15 items and 30 labels. With fewer than `MIN_CLUSTERS` items holding labelled turns in
    either arm the difference is not estimable.

    Args:
        a (`Mapping[str, Sequence]`): First arm (e.g. before): `ppi_rate`'s arguments `labelled_human`,
            `labelled_judge`, `all_judge`, `all_clusters` and `labelled_clusters` by name, item keys required (they
            pair the arms: the same item has the same key in both).
        b (`Mapping[str, Sequence]`): Second arm (e.g. after), the same keys.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile of the interval (1.96 for 95%).

    Returns:
        `dict`: `{"diff", "low", "high", "p", "se", "se_unpaired", "detectable", "rate_a", "rate_b", "lambda_a",
        "lambda_b", "raw_diff", "labels_only": {"diff", "low", "high", "se"}, "n_items", "n_items_shared",
        "n_items_labelled_a", "n_items_labelled_b", "n_labels_a", "n_labels_b", "n_a", "n_b", "note"}`: rate_a and
        rate_b are the arms' calibrated rates (clipped to [0, 1]; diff is the difference of the unclipped ones),
        raw_diff the judge's rate of b minus that of a over all turns, `n_items` the items of either arm,
        `detectable` True when the interval excludes 0, `note` "". Not estimable: diff, low, high, p, se,
        se_unpaired, the rates and lambdas None, detectable False, and `note` "not estimable: N clusters (< 10)
        with labelled turns in arm a" (or b).

    Raises:
        `ValueError`: when an arm lacks one of the five keys, or as `ppi_rate` does.
    """
    fits = {}
    for name, arm in (("a", a), ("b", b)):
        missing = [k for k in PPI_ARM if arm.get(k) is None]
        unknown = sorted(set(arm) - set(PPI_ARM))
        if missing or unknown:
            raise ValueError(
                f"arm {name}: {'missing ' + ', '.join(missing) if missing else 'unknown ' + ', '.join(unknown)}; "
                f"give each arm {', '.join(PPI_ARM)} (ppi_rate's arguments, item keys included: they pair the arms)."
            )
        fits[name] = _ppi_fit(**{k: arm[k] for k in PPI_ARM}, z=z)
    fa, fb = fits["a"], fits["b"]
    index = {k: i for i, k in enumerate(dict.fromkeys([*fa["keys"], *fb["keys"]]))}
    g = len(index)
    counts = {
        "n_items": g,
        "n_items_shared": len(set(fa["keys"]) & set(fb["keys"])),
        "n_items_labelled_a": fa["n_items_labelled"],
        "n_items_labelled_b": fb["n_items_labelled"],
        "n_labels_a": fa["n_labels"],
        "n_labels_b": fb["n_labels"],
        "n_a": fa["n"],
        "n_b": fb["n"],
        "raw_diff": fb["judged_rate"] - fa["judged_rate"],
    }
    fewest = min(("a", "b"), key=lambda k: fits[k]["n_items_labelled"])
    if fits[fewest]["n_items_labelled"] < MIN_CLUSTERS:
        nothing = ("diff", "low", "high", "p", "se", "se_unpaired", "rate_a", "rate_b", "lambda_a", "lambda_b")
        note = _not_estimable(fits[fewest]["n_items_labelled"], f"with labelled turns in arm {fewest}")
        labels_only = dict.fromkeys(("diff", "low", "high", "se"))
        return {**dict.fromkeys(nothing), "detectable": False, "labels_only": labels_only, **counts, "note": note}

    def per_item(fit: dict, w: float) -> np.ndarray:  # the arm's e_g on the items of both arms (0 where it has none)
        e = np.zeros(g)
        e[[index[k] for k in fit["keys"]]] = w * fit["d"] + fit["c"]
        return e

    def paired(which: str) -> dict:
        w_a, w_b = (fa["lambda"], fb["lambda"]) if which == "tuned" else (0.0, 0.0)
        e_a, e_b = per_item(fa, w_a), per_item(fb, w_b)
        diff = fb[which]["theta"] - fa[which]["theta"]
        se = math.sqrt(g / (g - 1) * float(np.sum((e_b - e_a) ** 2)))
        return {
            "diff": diff,
            "low": max(-1.0, diff - z * se),
            "high": min(1.0, diff + z * se),
            "p": math.erfc(abs(diff) / (se * math.sqrt(2))) if se > 0 else float(diff == 0),
            "se": se,
            "se_unpaired": math.sqrt(g / (g - 1) * float(np.sum(e_a**2) + np.sum(e_b**2))),
            "rate_a": min(1.0, max(0.0, fa[which]["theta"])),
            "rate_b": min(1.0, max(0.0, fb[which]["theta"])),
            "lambda_a": w_a,
            "lambda_b": w_b,
        }

    labels_only, tuned = paired("labels_only"), paired("tuned")
    if tuned["se"] > labels_only["se"]:
        tuned = labels_only
    return {
        **tuned,
        "detectable": bool(tuned["low"] > 0 or tuned["high"] < 0),
        "labels_only": {k: labels_only[k] for k in ("diff", "low", "high", "se")},
        **counts,
        "note": "",
    }
