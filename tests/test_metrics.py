"""The genuine follow-up rate (one definition for every place that reports it) and the metric names."""

import pytest

from fic import metric_names
from fic.metrics import genuine_rate, wilson_interval


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
