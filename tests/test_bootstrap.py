"""The two-level bootstrap over seeds and tasks (`fic.bootstrap.seed_task_bootstrap`) on hand-built verdicts: with one
seed it is the paired task bootstrap, disagreeing seeds widen its interval, it pairs arms by task and seed, and it
is deterministic for a given rng seed."""

import random

import pytest

from fic.bootstrap import seed_task_bootstrap
from fic.estimates import paired_difference
from fic.metrics import recovery


def _verdicts(rate: float, n_tasks: int, salt: str, runs: int = 1) -> dict:
    """{task: [verdict per run]} with about `rate` True, reproducible from `salt`."""
    rng = random.Random(salt)
    return {f"t{i}": [rng.random() < rate for _ in range(runs)] for i in range(n_tasks)}


def _diff(r):
    return r["b"] - r["a"]


def test_one_seed_is_the_paired_task_bootstrap_draw_for_draw():
    a, b = _verdicts(0.3, 40, "a", runs=2), _verdicts(0.6, 40, "b", runs=2)
    two = seed_task_bootstrap({"a": {0: a}, "b": {0: b}}, _diff, n_boot=1000, seed=7)
    one = paired_difference(a, b, n_boot=1000, seed=7)
    assert two["estimate"] == pytest.approx(one["diff"])
    assert (two["low"], two["high"], two["p"]) == pytest.approx((one["low"], one["high"], one["p"]))
    assert two["n_seeds"] == 1 and two["n_tasks"] == 40 and two["detectable"] == one["detectable"]
    # a seed-free arm (the start model) against a one-seed arm: the same
    mixed = seed_task_bootstrap({"a": {None: a}, "b": {3: b}}, _diff, n_boot=1000, seed=7)
    assert (mixed["low"], mixed["high"]) == (two["low"], two["high"])


def test_seeds_that_agree_add_nothing_and_seeds_that_disagree_widen_the_interval():
    before = _verdicts(0.3, 60, "before")
    same = _verdicts(0.6, 60, "after")
    agree = seed_task_bootstrap({"a": {None: before}, "b": {s: same for s in range(3)}}, _diff, seed=1)
    task_only = seed_task_bootstrap({"a": {None: before}, "b": {0: same}}, _diff, seed=1)
    # three identical seeds: any seed draw gives the same pooled rates, so the interval is the task bootstrap's
    assert agree["estimate"] == pytest.approx(task_only["estimate"])
    assert (agree["low"], agree["high"]) == pytest.approx((task_only["low"], task_only["high"]), abs=1e-9)
    # seeds at 0.35, 0.6 and 0.85 with the same pooled rate: the seed level widens the interval
    seeds = {0: _verdicts(0.35, 60, "s0"), 1: _verdicts(0.6, 60, "s1"), 2: _verdicts(0.85, 60, "s2")}
    apart = seed_task_bootstrap({"a": {None: before}, "b": seeds}, _diff, seed=1)
    pooled = {t: [f for s in seeds.values() for f in s[t]] for t in before}  # the seeds of a task as one cluster
    clustered = paired_difference(before, pooled, seed=1)
    assert apart["estimate"] == pytest.approx(clustered["diff"]) and apart["n_seeds"] == 3
    assert apart["high"] - apart["low"] > 1.5 * (clustered["high"] - clustered["low"])


def test_arms_are_paired_by_seed():
    """Two arms whose seeds move together: their difference does not carry the seeds' spread."""
    base = {s: _verdicts(0.3 + 0.25 * s, 60, f"seed{s}") for s in range(3)}
    shifted = {s: {t: [True] if t in ("t0", "t1", "t2") else v for t, v in by_task.items()}
               for s, by_task in base.items()}  # fmt: skip
    paired = seed_task_bootstrap({"a": base, "b": shifted}, _diff, seed=2)
    spread_a = seed_task_bootstrap({"a": base}, lambda r: r["a"], seed=2)
    assert paired["high"] - paired["low"] < 0.5 * (spread_a["high"] - spread_a["low"])
    assert paired["low"] >= 0  # b never below a on any task or seed


def test_recovery_through_the_bootstrap_and_undefined_replicates():
    full, sharded = _verdicts(0.8, 50, "full"), _verdicts(0.2, 50, "sharded")
    after = {s: _verdicts(0.5 + 0.05 * s, 50, f"after{s}") for s in range(3)}
    arms = {"f": {None: full}, "s": {None: sharded}, "a": after}
    r = seed_task_bootstrap(arms, lambda x: recovery(x["f"], x["s"], x["a"])["recovery"], seed=0)
    rates = r["rates"]
    assert r["estimate"] == pytest.approx((rates["a"] - rates["s"]) / (rates["f"] - rates["s"]))
    assert r["low"] < r["estimate"] < r["high"] and r["n_undefined"] == 0
    # no gap before training: undefined on the data and on every replicate, never a division by zero
    none = seed_task_bootstrap({"f": {None: sharded}, "s": {None: full}, "a": after},
                               lambda x: recovery(x["f"], x["s"], x["a"])["recovery"], n_boot=200)  # fmt: skip
    assert none["estimate"] is None and none["low"] is None and none["p"] is None and not none["detectable"]


def test_deterministic_for_a_given_rng_seed():
    arms = {"a": {None: _verdicts(0.4, 30, "a")}, "b": {s: _verdicts(0.5, 30, f"b{s}") for s in range(3)}}
    first = seed_task_bootstrap(arms, _diff, n_boot=500, seed=5)
    assert seed_task_bootstrap(arms, _diff, n_boot=500, seed=5) == first
    other = seed_task_bootstrap(arms, _diff, n_boot=500, seed=6)
    assert other["estimate"] == first["estimate"] and (other["low"], other["high"]) != (first["low"], first["high"])


def test_tasks_are_those_every_arm_and_seed_has_and_bad_input_is_named():
    a = {0: {"t1": [True], "t2": [False], "t3": [True]}, 1: {"t1": [False], "t2": [True], "t3": []}}
    b = {0: {"t1": [True], "t2": [True], "t3": [True], "t4": [True]}, 1: {"t1": [True], "t2": [True], "t3": [True]}}
    r = seed_task_bootstrap({"a": a, "b": b}, _diff, n_boot=50)
    assert r["n_tasks"] == 2 and r["rates"] == {"a": 0.5, "b": 1.0}  # t3 has no verdict at seed 1 of a; t4 only in b
    with pytest.raises(ValueError, match="seeds"):
        seed_task_bootstrap({"a": a, "b": {0: b[0], 2: b[1]}}, _diff)
    with pytest.raises(ValueError, match="no task"):
        seed_task_bootstrap({"a": {0: {"x": [True]}}, "b": {0: {"y": [True]}}}, _diff)
    with pytest.raises(ValueError, match="no seed"):
        seed_task_bootstrap({"a": {}}, _diff)
    with pytest.raises(ValueError, match="empty"):
        seed_task_bootstrap({}, _diff)
