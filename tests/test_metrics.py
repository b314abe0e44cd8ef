"""The genuine follow-up rate and recovery (one definition each, for every place that reports them), the metric
names, and the Wilson interval and AUROC against scipy's (independent references, not fic's own formulas)."""

import numpy as np
import pytest
from scipy import stats as scipy_stats  # the `dev` extra

from fic import metric_names
from fic.estimates import cluster_rate
from fic.metrics import auroc, genuine_rate, recovery, recovery_target, wilson_bounds, wilson_interval


@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_wilson_interval_is_scipys(level):
    """Every k of small n and a spread of k at larger n, at three levels: scipy's Wilson score interval (no continuity
    correction), to 1e-12. The z of a level is scipy's normal quantile, so both sides compute the same interval."""
    z = float(scipy_stats.norm.ppf(0.5 + level / 2))
    cases = [(k, n) for n in range(1, 13) for k in range(n + 1)]
    cases += [(k, n) for n in (50, 99, 1000, 12345) for k in (0, 1, 2, n // 7, n // 2, n - 1, n)]
    for k, n in cases:
        reference = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
        expected = (reference.low, reference.high)
        assert wilson_interval(k, n, z=z) == pytest.approx(expected, abs=1e-12), (k, n)
        assert wilson_bounds(k / n, n, z) == pytest.approx(expected, abs=1e-12), (k, n)
    assert wilson_interval(0, 0) == (0.0, 0.0)


def test_cluster_rate_with_independent_turns_is_scipys_wilson():
    """`fic.estimates.cluster_rate` uses the same Wilson formula: with one turn per item it is scipy's interval."""
    z = float(scipy_stats.norm.ppf(0.975))
    for k, n in [(0, 7), (3, 11), (20, 57), (57, 57)]:
        r = cluster_rate([True] * k + [False] * (n - k), list(range(n)), z=z)
        reference = scipy_stats.binomtest(k, n).proportion_ci(method="wilson")
        assert (r["low"], r["high"]) == pytest.approx((reference.low, reference.high), abs=1e-12)


def test_auroc_is_the_mann_whitney_u_over_n1_n2():
    """AUROC = U / (n1 n2), U the Mann-Whitney statistic of the positive scores (ties counted one half), on scores
    with many ties and on continuous ones."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(2, 60))
        labels = rng.random(n) < rng.uniform(0.1, 0.9)
        if labels.all() or not labels.any():
            labels[0] = not labels[0]
        scores = rng.integers(0, 4, n) if trial % 2 else rng.normal(labels * rng.uniform(0, 2), 1.0)
        pos, neg = scores[labels], scores[~labels]
        u = scipy_stats.mannwhitneyu(pos, neg, alternative="two-sided").statistic
        assert auroc(scores.tolist(), labels.tolist()) == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)


def test_genuine_rate_leaves_judge_errors_out_of_the_rate():
    cell = genuine_rate([True, False, None, True, None])
    low, high = wilson_interval(2, 3)
    assert cell == {"rate": pytest.approx(2 / 3), "low": low, "high": high, "n": 3, "judge_errors": 2}


def test_genuine_rate_of_nothing_decided_is_empty_not_zero_failures():
    assert genuine_rate([None, None]) == {"rate": 0.0, "low": 0.0, "high": 0.0, "n": 0, "judge_errors": 2}
    assert genuine_rate(iter([])) == {"rate": 0.0, "low": 0.0, "high": 0.0, "n": 0, "judge_errors": 0}


def test_metric_names():
    assert metric_names.probe_genuine("gsm8k", 0.7) == "probe/gsm8k/genuine_rate@t0.7"
    assert metric_names.probe_genuine("gsm8k", 1, "truncate") == "probe/gsm8k/truncate/genuine_rate@t1.0"
    assert metric_names.probe_genuine("gsm8k", "t0.0") == metric_names.probe_genuine("gsm8k", 0.0)
    assert [metric_names.lic_score(s, "sharded") for s in metric_names.LIC_SCORES] == [
        "lic/p_sharded", "lic/a90_sharded", "lic/u90_10_sharded",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="valid: P, A90, U90_10"):
        metric_names.lic_score("p90", "full")
    # one evaluation's P_sharded / P_full is named for what it is; "recovery" is only the gap closed by training
    assert metric_names.LIC_SHARDED_OVER_FULL == "lic/sharded_over_full"
    assert not [name for name in vars(metric_names) if "RECOVERY" in name]


def test_recovery_is_the_share_of_the_gap_closed():
    # before: P_full 0.8, P_sharded 0.2 (a gap of 0.6)
    assert recovery(0.8, 0.2, 0.2) == {"recovery": 0.0, "gap_before": pytest.approx(0.6), "closed": 0.0,
                                       "reason": None}  # fmt: skip
    assert recovery(0.8, 0.2, 0.8)["recovery"] == pytest.approx(1.0)  # reached the single-turn score before
    assert recovery(0.8, 0.2, 0.5)["recovery"] == pytest.approx(0.5)
    assert recovery(0.8, 0.2, 0.9)["recovery"] == pytest.approx(7 / 6)  # above the teacher
    assert recovery(0.8, 0.2, 0.1)["recovery"] == pytest.approx(-1 / 6)  # the sharded view got worse
    assert recovery(1.0, 0.0, 0.92)["recovery"] == pytest.approx(0.92)  # no sharded skill before: the paper's ratio


@pytest.mark.parametrize("full, sharded", [(0.5, 0.5), (0.4, 0.6), (0.0, 0.0)])
def test_recovery_without_a_gap_is_none_with_a_reason(full, sharded):
    r = recovery(full, sharded, 0.9)
    assert r["recovery"] is None and "no multi-turn gap" in r["reason"] and r["gap_before"] <= 0
    assert recovery_target(full, sharded, 0.92) is None


def test_recovery_target_reads_a_ratio_target_on_the_gap_closed_scale():
    full, sharded = 0.55, 0.10
    target = recovery_target(full, sharded, 0.92)
    assert target == pytest.approx((0.92 * 0.55 - 0.10) / 0.45)
    # P_sharded(after) = 0.92 P_full(before) is exactly the target; more is above it, less below
    assert recovery(full, sharded, 0.92 * full)["recovery"] == pytest.approx(target)
    assert recovery(full, sharded, 0.93 * full)["recovery"] > target > recovery(full, sharded, 0.91 * full)["recovery"]
    assert recovery_target(0.8, 0.2, 1.0) == pytest.approx(1.0)
    assert recovery_target(0.8, 0.76, 0.92) < 0  # already at 95% of P_full before training: met without training


@pytest.mark.parametrize("table", [[[3, 7], [9, 1]], [[0, 10], [0, 10]], [[5, 5], [5, 5]], [[1, 29], [9, 21]],
                                   [[12, 3], [2, 13]], [[0, 30], [30, 0]]])  # fmt: skip
def test_fisher_exact_matches_scipy(table):
    from scipy.stats import fisher_exact as scipy_fisher

    from fic.metrics import fisher_exact

    assert fisher_exact(table) == pytest.approx(scipy_fisher(table).pvalue, rel=1e-9, abs=1e-12)
