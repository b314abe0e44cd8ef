"""Estimates a referee accepts (src/fic/estimates.py): hand-computed values, reference values and a simulation."""

import math

import numpy as np
import pytest

from fic.estimates import (
    bootstrap_auroc,
    cluster_mean,
    cluster_rate,
    corrected_rate,
    judge_error_rates,
    minimum_detectable_effect,
    paired_difference,
    rate_variance,
    standard_error_from_interval,
)
from fic.metrics import wilson_interval
from fic.ppi import ppi_rate


def test_cluster_rate_by_hand():
    # Items A..E, 3 turns each; True counts k_g = 3, 1, 0, 0, 1: n = 15, k = 5, p = 1/3, G = 5.
    # k_g - p n_g = 2, 0, -1, -1, 0, squares sum to 6; V = 5/4 * 6 / 15^2 = 1/30.
    # p (1 - p) / n = (2/9) / 15 = 2/135; deff = (1/30) / (2/135) = 2.25; n_eff = 15 / 2.25 = 20/3, inside [5, 15].
    # Wilson at p = 1/3, m = 20/3, z = 1.96: denom = 1 + z^2/m = 1.57624, centre = (1/3 + z^2/(2m)) / denom = 0.394263,
    # half = z sqrt(p(1-p)/m + z^2/(4 m^2)) / denom = 0.291466 -> [0.102798, 0.685729].
    flags = [True, True, True] + [True, False, False] + [False] * 6 + [True, False, False]
    r = cluster_rate(flags, list("AAABBBCCCDDDEEE"))
    assert r["rate"] == pytest.approx(1 / 3)
    assert (r["n"], r["n_items"]) == (15, 5)
    assert r["design_effect"] == pytest.approx(2.25)
    assert r["low"] == pytest.approx(0.102798, abs=1e-6)
    assert r["high"] == pytest.approx(0.685729, abs=1e-6)
    # Wider than the naive interval that treats the 15 turns as independent.
    naive = wilson_interval(5, 15)
    assert r["high"] - r["low"] > naive[1] - naive[0]


def test_cluster_rate_empty_and_at_zero():
    assert cluster_rate([], []) == {"rate": 0.0, "low": 0.0, "high": 0.0, "n": 0, "n_items": 0, "design_effect": 1.0}
    # p = 0: n_eff = n_items = 3 (conservative), so the interval is the Wilson interval of 0 out of 3, not of 0 out of 6.
    r = cluster_rate([False] * 6, [1, 1, 2, 2, 3, 3])
    assert (r["rate"], r["low"]) == (0.0, 0.0)
    assert r["high"] == pytest.approx(wilson_interval(0, 3)[1])
    assert r["design_effect"] == pytest.approx(2.0)
    assert rate_variance([False] * 6, [1, 1, 2, 2, 3, 3]) > 0


def test_cluster_rate_with_one_turn_per_item_is_plain_wilson():
    flags = [True, False, False, True, False, False, False, True, False, False, False]
    r = cluster_rate(flags, list(range(len(flags))))
    low, high = wilson_interval(3, 11)
    assert (r["low"], r["high"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert r["design_effect"] == pytest.approx(1.0)


def test_paired_difference_detects_a_clear_effect():
    before = {i: [False, False, False, i % 5 == 0] for i in range(30)}
    after = {i: [True, True, i % 2 == 0, False] for i in range(30)}
    after["only-after"] = [True]  # not in both: left out
    d = paired_difference(before, after)
    assert d["n_items"] == 30 and (d["n_a"], d["n_b"]) == (120, 120)
    assert d["rate_a"] == pytest.approx(6 / 120) and d["rate_b"] == pytest.approx(75 / 120)
    assert d["diff"] == pytest.approx(69 / 120)
    assert 0 < d["low"] < d["diff"] < d["high"]
    assert d["detectable"] is True and d["p"] < 0.01


def test_paired_difference_of_identical_runs_and_determinism():
    a = {i: [i % 3 == 0, i % 4 == 0] for i in range(20)}
    same = paired_difference(a, {i: list(v) for i, v in a.items()})
    assert (same["diff"], same["low"], same["high"], same["p"], same["detectable"]) == (0.0, 0.0, 0.0, 1.0, False)
    b = {i: [i % 2 == 0, i % 5 == 0] for i in range(20)}
    assert paired_difference(a, b, seed=3) == paired_difference(a, b, seed=3)
    assert paired_difference(a, b, seed=3) != paired_difference(a, b, seed=4)
    with pytest.raises(ValueError, match="0 in common"):
        paired_difference({"x": [True]}, {"y": [True]})


def test_cluster_mean_counts_clusters_not_rows():
    # Ten episodes under 5 profiles each, regret 1 on the first five and 0 on the others: 50 rows, 10 clusters.
    values, clusters = [1.0] * 25 + [0.0] * 25, [i // 5 for i in range(50)]
    out = cluster_mean(values, clusters, seed=3)
    assert (out["mean"], out["n"], out["n_items"], out["note"]) == (0.5, 50, 10, "")
    assert 0.0 <= out["low"] < 0.5 < out["high"] <= 1.0
    # the same 50 rows as 50 independent episodes give a narrower interval
    narrow = cluster_mean(values, list(range(50)), seed=3)
    assert narrow["high"] - narrow["low"] < out["high"] - out["low"] and narrow["n_items"] == 50
    flat = cluster_mean([0.5] * 20, list(range(10)) * 2)
    assert (flat["mean"], flat["low"], flat["high"]) == (0.5, 0.5, 0.5)
    # Two episodes: a resample holds {a, a}, {a, b} or {b, b}, nothing else; under MIN_CLUSTERS no interval.
    two = cluster_mean([1.0] * 5 + [0.0] * 5, ["a"] * 5 + ["b"] * 5)
    assert two == {"mean": None, "low": None, "high": None, "n": 10, "n_items": 2,
                   "note": "not estimable: 2 clusters (< 10)"}  # fmt: skip
    assert cluster_mean([], [])["n"] == 0
    with pytest.raises(ValueError, match="cluster key"):
        cluster_mean([1.0], [])


def test_bootstrap_auroc():
    scores, labels = [0.0, 0.1, 0.2, 0.3, 0.4, 1.0, 1.2, 1.4, 1.6, 1.8], [False] * 5 + [True] * 5
    out = bootstrap_auroc(scores, labels)
    assert out["auroc"] == 1.0 and out["high"] == 1.0 and 0.0 <= out["low"] <= 1.0 and out["n_positive"] == 5
    assert out["note"] == ""
    # a constant score (every belief at log K) is 0.5 by ties alone, and so would be every resample: no interval
    flat = bootstrap_auroc([math.log(5)] * 12, [True, False] * 6)
    assert (flat["auroc"], flat["low"], flat["high"]) == (None, None, None)
    assert flat["note"] == "not measurable: every score is tied"
    assert bootstrap_auroc([1.0, 2.0], [True, True])["note"] == "not measurable: one class only"
    few = bootstrap_auroc(scores[3:8], labels[3:8])  # 5 items: a resample only recombines them
    assert few["auroc"] is None and few["note"].startswith("not estimable: 5 clusters")


def test_judge_error_rates():
    human = [True, True, True, False, False, False, False]
    judge = [True, False, True, False, False, True, False]
    e = judge_error_rates(human, judge, ["a", "a", "b", "b", "c", "c", "d"])
    assert e["sensitivity"] == pytest.approx(2 / 3) and e["specificity"] == pytest.approx(3 / 4)
    assert (e["n_pos"], e["n_neg"], e["n_items"]) == (3, 4, 4)
    assert e["var_sensitivity"] > 0 and e["var_specificity"] > 0
    # A perfect sensitivity keeps a variance (Wilson at n_items); no negative turn -> specificity unknown.
    e = judge_error_rates([True, True, True], [True, True, True], ["a", "a", "b"])
    assert e["sensitivity"] == 1.0 and e["var_sensitivity"] > 0
    assert e["specificity"] is None and e["var_specificity"] is None


def test_corrected_rate_of_a_perfect_judge_is_the_raw_rate():
    perfect = {"sensitivity": 1.0, "specificity": 1.0, "var_sensitivity": 0.0, "var_specificity": 0.0}
    c = corrected_rate(0.3, 0.001, perfect)
    half = 1.96 * math.sqrt(0.001)
    assert c == {
        "rate": pytest.approx(0.3),
        "low": pytest.approx(0.3 - half),
        "high": pytest.approx(0.3 + half),
        "youden": 1.0,
        "note": "",
    }


def test_corrected_rate_refuses_a_judge_near_chance():
    weak = {"sensitivity": 0.55, "specificity": 0.5, "var_sensitivity": 0.001, "var_specificity": 0.001}
    c = corrected_rate(0.3, 0.001, weak)
    assert (c["rate"], c["low"], c["high"]) == (None, None, None)
    assert "0.050" in c["note"] and "sensitivity 0.550" in c["note"]
    unknown = {"sensitivity": None, "specificity": 0.9, "var_sensitivity": None, "var_specificity": 0.001}
    assert corrected_rate(0.3, 0.001, unknown)["rate"] is None


def test_corrected_rate_worked_example():
    # p = 0.2 (var 0.0004), se = 0.8 (var 0.0025), sp = 0.9 (var 0.0001). J = 0.7, lower bound
    # 0.7 - 1.96 sqrt(0.0026) = 0.600 > 0.1. theta = (0.2 + 0.9 - 1) / 0.7 = 1/7 = 0.142857.
    # Var = (0.0004 + (1/7)^2 0.0025 + (6/7)^2 0.0001) / 0.49 = (0.0004 + 0.0000510 + 0.0000735) / 0.49 = 0.00107040;
    # half = 1.96 sqrt(0.00107040) = 0.064125 -> [0.078732, 0.206982].
    errors = {"sensitivity": 0.8, "specificity": 0.9, "var_sensitivity": 0.0025, "var_specificity": 0.0001}
    c = corrected_rate(0.2, 0.0004, errors)
    assert c["rate"] == pytest.approx(1 / 7)
    assert c["low"] == pytest.approx(0.078732, abs=1e-6) and c["high"] == pytest.approx(0.206982, abs=1e-6)
    assert c["youden"] == pytest.approx(0.7) and c["note"] == ""
    # A judged rate below the judge's false-positive rate corrects to 0, clipped.
    assert corrected_rate(0.05, 0.0004, errors)["rate"] == 0.0


# Reference values from ppi-python 0.2.3 (pip install ppi-python, in a scratch venv, not a dependency of fic):
#   Y, Yhat, Yhat_unlabeled = np.array(PPI_HUMAN, float), np.array(PPI_JUDGE[:12], float), np.array(PPI_JUDGE, float)
#   ppi_py.ppi_mean_pointestimate(Y, Yhat, Yhat_unlabeled, lam=None)       -> 0.36823362
#   ppi_py.ppi_mean_ci(Y, Yhat, Yhat_unlabeled, alpha=0.05, lam=None)      -> (0.11610419322851101, 0.6203630432387255)
#   ppi_py.ppi_mean_ci(Y, Yhat, Yhat_unlabeled, alpha=0.05, lam=0)         -> (0.1377270214911676, 0.6956063118421658)
#   ppi_py.ppi._calc_lam_glm(Y - t, Yhat - t, Yhat_unlabeled - t, np.eye(1), clip=True) (any t) -> 0.4470742932281392
# The labelled turns are the first 12 of the 40, and Yhat_unlabeled is all 40 verdicts (labelled ones included), as
# ppi_rate takes them. ppi_py's interval is theta +- z se with z = norm.ppf(0.975) = 1.959963984540054; ppi_rate
# returns se and a logit-scale interval, so the test rebuilds ppi_py's interval from rate and se.
PPI_JUDGE = [1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]
PPI_JUDGE += [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]
PPI_HUMAN = [1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1]


def test_ppi_rate_reproduces_ppi_python():
    z = 1.959963984540054
    r = ppi_rate([bool(v) for v in PPI_HUMAN], [bool(v) for v in PPI_JUDGE[:12]], [bool(v) for v in PPI_JUDGE], z=z)
    assert r["rate"] == pytest.approx(0.36823362, abs=1e-8)
    assert r["lambda"] == pytest.approx(0.4470742932281392, abs=1e-9)
    assert r["rate"] - z * r["se"] == pytest.approx(0.11610419322851101, abs=1e-9)
    assert r["rate"] + z * r["se"] == pytest.approx(0.6203630432387255, abs=1e-9)
    lo = r["labels_only"]
    assert lo["rate"] - z * lo["se"] == pytest.approx(0.1377270214911676, abs=1e-9)
    assert lo["rate"] + z * lo["se"] == pytest.approx(0.6956063118421658, abs=1e-9)
    assert (r["n_labels"], r["n"]) == (12, 40)
    assert r["high"] - r["low"] < lo["high"] - lo["low"]
    # With every turn its own item, the cluster-robust form stays close to the unclustered one.
    c = ppi_rate(PPI_HUMAN, PPI_JUDGE[:12], PPI_JUDGE, all_clusters=list(range(40)), labelled_clusters=list(range(12)))
    assert c["rate"] == pytest.approx(r["rate"], abs=0.02) and c["se"] == pytest.approx(r["se"], rel=0.1)


def logit_interval(theta: float, se: float, z: float) -> tuple[float, float]:
    """The interval `ppi_rate`'s docstring states: expit(logit(theta) +- z se / (theta (1 - theta)))."""
    spread = z * se / (theta * (1 - theta))
    centre = math.log(theta / (1 - theta))
    return 1 / (1 + math.exp(-(centre - spread))), 1 / (1 + math.exp(-(centre + spread)))


def test_ppi_rate_interval_is_the_logit_interval_of_ppi_pythons_estimate():
    """The interval users see (low, high), from ppi-python's point estimate and standard error (above): the
    midpoint and half-width of its interval theta +- z se."""
    z = 1.959963984540054
    r = ppi_rate([bool(v) for v in PPI_HUMAN], [bool(v) for v in PPI_JUDGE[:12]], [bool(v) for v in PPI_JUDGE], z=z)
    for got, (low, high) in ((r, (0.11610419322851101, 0.6203630432387255)),
                             (r["labels_only"], (0.1377270214911676, 0.6956063118421658))):  # fmt: skip
        theta, se = (low + high) / 2, (high - low) / (2 * z)
        assert (got["low"], got["high"]) == pytest.approx(logit_interval(theta, se, z), abs=1e-9)
        assert got["low"] - low > 0.01  # not ppi-python's own interval theta +- z se: the logit one


def clustered_ppi(y, f, f_all, all_items, labelled_items, z=1.96):
    """`ppi_rate` with clusters, from the formulas of its docstring, in plain Python: e_g = lambda (F_g - mean_N(f)
    N_g) / N + (R_g - mean_n(y - lambda f) n_g) / n, Var = G / (G - 1) sum_g e_g^2, lambda in [0, 1] minimising it
    (0 where the tuned interval would be wider than the labels alone), theta = mean_N(lambda f) + mean_n(y - lambda
    f), the interval on the logit scale."""
    n, big_n = len(y), len(f_all)
    keys = list(dict.fromkeys([*all_items, *labelled_items]))

    def fit(lam: float) -> tuple[float, float]:
        rectifier = [yi - lam * fi for yi, fi in zip(y, f)]
        mean_f, mean_r = sum(f_all) / big_n, sum(rectifier) / n
        e = dict.fromkeys(keys, 0.0)
        for g, fi in zip(all_items, f_all):
            e[g] += lam * (fi - mean_f) / big_n
        for g, ri in zip(labelled_items, rectifier):
            e[g] += (ri - mean_r) / n
        var = len(keys) / (len(keys) - 1) * sum(v * v for v in e.values())
        return lam * mean_f + mean_r, var

    lo, hi = 0.0, 1.0  # the minimiser on [0, 1] by ternary search (Var is convex in lambda), not by its root
    for _ in range(200):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, b) if fit(a)[1] <= fit(b)[1] else (a, hi)
    lam = (lo + hi) / 2
    (theta, var), (theta0, var0) = fit(lam), fit(0.0)
    tuned, alone = logit_interval(theta, math.sqrt(var), z), logit_interval(theta0, math.sqrt(var0), z)
    if var > var0 or tuned[1] - tuned[0] > alone[1] - alone[0]:
        lam, theta, var, tuned = 0.0, theta0, var0, alone
    return {"lambda": lam, "rate": theta, "se": math.sqrt(var), "low": tuned[0], "high": tuned[1],
            "labels_only": {"rate": theta0, "se": math.sqrt(var0), "low": alone[0], "high": alone[1]}}  # fmt: skip


def test_clustered_ppi_rate_is_its_closed_form():
    rng = np.random.default_rng(8)
    for trial in range(6):
        items = np.repeat(np.arange(30), 4)
        y_all = rng.random(120) < rng.beta(1, 3, 30)[items]
        f_all = np.where(y_all, rng.random(120) < 0.8, rng.random(120) < 0.1)
        lab = rng.choice(120, size=36, replace=False)
        y, f = y_all[lab].tolist(), f_all[lab].tolist()
        got = ppi_rate(y, f, f_all.tolist(), all_clusters=items.tolist(), labelled_clusters=items[lab].tolist())
        want = clustered_ppi(y, f, f_all.tolist(), items.tolist(), items[lab].tolist())
        assert got["lambda"] == pytest.approx(want["lambda"], abs=1e-6)  # a search finds a flat minimum to ~1e-8
        assert 0 < got["lambda"] < 1 or trial, "the first draw tunes lambda inside (0, 1)"
        for key in ("rate", "se", "low", "high"):
            assert got[key] == pytest.approx(want[key], abs=1e-7), (trial, key)
            assert got["labels_only"][key] == pytest.approx(want["labels_only"][key], abs=1e-12), (trial, key)


def test_ppi_rate_is_never_wider_than_the_labels_alone():
    rng = np.random.default_rng(5)
    for _ in range(50):
        y_all = (rng.random(300) < 0.2).tolist()
        f_all = (rng.random(300) < 0.5).tolist()  # a useless judge: independent of the labels
        lab = rng.choice(300, size=40, replace=False)
        items = np.repeat(np.arange(60), 5).tolist()
        for kwargs in ({}, {"all_clusters": items, "labelled_clusters": [items[i] for i in lab]}):
            r = ppi_rate([y_all[i] for i in lab], [f_all[i] for i in lab], f_all, **kwargs)
            assert r["high"] - r["low"] <= r["labels_only"]["high"] - r["labels_only"]["low"] + 1e-12
            assert 0 <= r["lambda"] <= 1
    with pytest.raises(ValueError, match="at least one labelled turn"):
        ppi_rate([], [], [True, False])


def test_simulation_clustered_corrected_and_calibrated_intervals_cover_the_true_rate():
    # 1,000 draws, each interval's coverage held between 0.91 and 0.98: too narrow fails the lower bound, too wide
    # (an interval that covers nearly always says less than it could) the upper one; 0.95 +- 0.03 is more than four
    # binomial standard errors (0.007) either side. A run is 40 items x 6 turns; item g is genuine with probability
    # q_g ~ Beta(0.4, 1.6): mean 0.2, intra-item correlation 1 / (0.4 + 1.6 + 1) = 1/3, so turns of an item are
    # strongly correlated. The judge has sensitivity 0.6 and specificity 0.95 on the true labels. Its se/sp are
    # estimated per draw on a separate labelled set of 30 items x 6 turns; for PPI a reader labels 60 turns drawn at
    # random from the run. The truth is the Beta mean 0.2, the rate of the population the items are drawn from: every
    # interval here is clustered by item, i.e. accounts for which items happened to be drawn, and so targets that
    # population rate (the realised mean of the run's true labels would make the clustered interval on those labels
    # cover trivially). The draws are made at once with numpy; each estimate then runs once per draw.
    rng = np.random.default_rng(2024)
    truth, draws = 0.2, 1000

    def draw(items: int, turns: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        q = rng.beta(0.4, 1.6, size=(draws, items))
        y = rng.random((draws, items, turns)) < q[..., None]
        f = np.where(y, rng.random(y.shape) < 0.6, rng.random(y.shape) < 1 - 0.95)
        return y.reshape(draws, -1), f.reshape(draws, -1), np.repeat(np.arange(items), turns).tolist()

    run_y, run_f, items = draw(40, 6)
    held_y, held_f, held_items = draw(30, 6)
    labelled = rng.permuted(np.tile(np.arange(len(items)), (draws, 1)), axis=1)[:, :60]
    hits = dict.fromkeys(["clustered", "naive", "corrected", "ppi", "labels_only"], 0)
    refused = 0
    for y, f, hy, hf, lab in zip(run_y, run_f, held_y, held_f, labelled):
        y, f, lab_items = y.tolist(), f.tolist(), [items[i] for i in lab]
        r = cluster_rate(y, items)
        hits["clustered"] += r["low"] <= truth <= r["high"]
        low, high = wilson_interval(sum(y), len(y))
        hits["naive"] += low <= truth <= high
        c = corrected_rate(
            cluster_rate(f, items)["rate"], rate_variance(f, items),
            judge_error_rates(hy.tolist(), hf.tolist(), held_items),
        )  # fmt: skip
        refused += c["rate"] is None  # a refusal counts as a miss
        hits["corrected"] += c["rate"] is not None and c["low"] <= truth <= c["high"]
        p = ppi_rate([y[i] for i in lab], [f[i] for i in lab], f, all_clusters=items, labelled_clusters=lab_items)
        hits["ppi"] += p["low"] <= truth <= p["high"]
        hits["labels_only"] += p["labels_only"]["low"] <= truth <= p["labels_only"]["high"]
    coverage = {k: v / draws for k, v in hits.items()}
    print(f"coverage of {truth} over {draws} draws: {coverage}, corrected refused {refused} times")
    for name in ("clustered", "corrected", "ppi", "labels_only"):
        assert 0.91 <= coverage[name] <= 0.98, (name, coverage[name])
    assert coverage["naive"] < coverage["clustered"] - 0.1


def test_minimum_detectable_effect_of_a_paired_difference():
    """2.80 standard errors at alpha 0.05 and 80% power (1.960 + 0.842); the standard error from a 95% interval."""
    assert minimum_detectable_effect(0.1) == pytest.approx(0.2802, abs=1e-4)
    assert minimum_detectable_effect(0.1, power=0.5) == pytest.approx(0.196, abs=1e-3)  # z_0.5 = 0
    assert minimum_detectable_effect(0.0) == 0.0
    assert standard_error_from_interval(-0.196, 0.196) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        minimum_detectable_effect(-1.0)
    with pytest.raises(ValueError):
        standard_error_from_interval(0.2, 0.1)


def test_holm_matches_the_step_down_rule_worked_by_hand():
    from fic.estimates import holm

    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.9]) == [pytest.approx(1.0), None, pytest.approx(1.0)]  # capped at 1; None not counted
    assert holm([0.02]) == [pytest.approx(0.02)] and holm([]) == []


def test_holm_controls_the_family_wise_error_under_the_null():
    """4 true nulls, p uniform: P(any adjusted p < 0.05) <= 0.05 (Bonferroni-bound), where raw p reject ~19% of
    families; 4,000 simulated families, the upper end of a 99% binomial interval checked."""
    from scipy.stats import binomtest

    from fic.estimates import holm

    rng = np.random.default_rng(0)
    families = rng.uniform(size=(4000, 4))
    any_holm = sum(min(holm(list(f))) < 0.05 for f in families)
    any_raw = sum(f.min() < 0.05 for f in families)
    assert binomtest(any_holm, 4000).proportion_ci(0.99).low <= 0.05
    assert any_raw / 4000 > 0.15


def test_with_holm_reads_detectable_on_the_adjusted_p():
    from fic.followup_summary import with_holm

    def diff(d, p):
        return {"diff": d, "low": d - 0.1, "high": d + 0.1 if d < 0.2 else d + 0.05, "p": p,
                "detectable": d - 0.1 > 0, "note": ""}  # fmt: skip

    out = with_holm({"a": diff(0.30, 0.004), "b": diff(0.25, 0.03), "c": diff(0.0, 0.9), "d": None,
                     "e": {"diff": None, "note": "not estimable: 9 clusters (< 10)"}})  # fmt: skip
    assert out["a"]["p_holm"] == pytest.approx(0.012) and out["a"]["detectable_holm"]
    assert out["b"]["p_holm"] == pytest.approx(0.06) and not out["b"]["detectable_holm"]
    assert "after Holm's adjustment over 3 comparisons" in out["b"]["reading"]
    assert out["c"]["p_holm"] == pytest.approx(0.9) and out["c"]["reading"].endswith("no detectable change")
    assert out["d"] is None and "p_holm" not in out["e"]
