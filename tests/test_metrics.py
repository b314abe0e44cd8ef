"""The genuine follow-up rate and recovery (one definition each, for every place that reports them) and the metric
names."""

import pytest

from fic import metric_names
from fic.metrics import genuine_rate, recovery, recovery_target, wilson_interval


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
