"""The bootstrap (`fic.bootstrap`). The two-level bootstrap over seeds and tasks on hand-built verdicts: with one
seed it is the paired task bootstrap, disagreeing seeds widen its interval, it pairs arms by task and seed, and it
is deterministic for a given rng seed. Against independent references: the p-value is calibrated under a simulated
null, and the kappa interval is np.quantile of resampled kappas computed by hand."""

import importlib
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from fic.bootstrap import bootstrap_p, percentile_interval, seed_task_bootstrap
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


def test_paired_bootstrap_p_is_calibrated_under_the_null():
    """2,000 simulated runs with no difference (both arms draw their turns from the same item propensities, 40
    items x 4 turns): the bootstrap p of `paired_difference` (`fic.bootstrap.bootstrap_p`) falls below 0.05 in 5% of
    them, within 3.5 binomial standard errors (0.017): a one-sided p (about 10%) or one that ignores the pairing
    (far below 5%) fails."""
    rng = np.random.default_rng(1)
    sims, items, turns = 2000, 40, 4
    q = rng.beta(1, 3, (sims, items))
    a = rng.random((sims, items, turns)) < q[..., None]
    b = rng.random((sims, items, turns)) < q[..., None]
    p = np.array([paired_difference(dict(enumerate(x.tolist())), dict(enumerate(y.tolist())), n_boot=1000, seed=s)["p"]
                  for s, (x, y) in enumerate(zip(a, b))])  # fmt: skip
    tolerance = 3.5 * math.sqrt(0.05 * 0.95 / sims)
    assert abs(np.mean(p < 0.05) - 0.05) <= tolerance, np.mean(p < 0.05)


def _kappa_by_hand(pairs: list[tuple[bool, bool]]) -> float:
    """Cohen's kappa of two binary raters from the 2 x 2 table (1.0 where chance agreement is already 1)."""
    n = len(pairs)
    both, neither = sum(h and j for h, j in pairs), sum(not h and not j for h, j in pairs)
    h1, j1 = sum(h for h, _ in pairs), sum(j for _, j in pairs)
    p_o, p_e = (both + neither) / n, (h1 * j1 + (n - h1) * (n - j1)) / n**2
    return 1.0 if p_e == 1 else (p_o - p_e) / (1 - p_e)


@pytest.mark.parametrize("draws", [39, 200, 1000])
def test_kappa_interval_is_np_quantile_of_the_item_resamples(draws):
    """`binary_agreement`'s kappa interval is np.quantile (linear interpolation) at 2.5% and 97.5% of the kappas of
    `draws` item resamples (numpy's Generator, `integers(0, G, (draws, G))`, items in order of first appearance),
    widened to hold the point; reproduce/probe_judge.py's judge validation table gives the same interval."""
    from fic.judges.agreement import binary_agreement

    rng = random.Random(3)
    items = [rng.randrange(18) for _ in range(90)]
    human = [rng.random() < 0.35 for _ in items]
    judged = [h if rng.random() < 0.8 else not h for h in human]
    out = binary_agreement(human, judged, items, draws=draws, seed=5)

    groups: dict = {}
    for h, j, g in zip(human, judged, items):
        groups.setdefault(g, []).append((h, j))
    order = list(groups.values())
    resamples = np.random.default_rng(5).integers(0, len(order), size=(draws, len(order)))
    kappas = [_kappa_by_hand([p for i in row for p in order[i]]) for row in resamples]
    point = _kappa_by_hand(list(zip(human, judged)))
    low, high = np.quantile(kappas, [0.025, 0.975])
    assert out["kappa"]["value"] == pytest.approx(point, abs=1e-12)
    assert (out["kappa"]["low"], out["kappa"]["high"]) == pytest.approx((min(low, point), max(high, point)), abs=1e-12)

    reproduce = str(Path(__file__).parents[1] / "reproduce")
    if reproduce not in sys.path:
        sys.path.insert(0, reproduce)
    probe = importlib.import_module("probe_judge")
    label = {True: "genuine_followup", False: "new_task_prompt"}
    row = probe.agreement_row([(label[h], label[j], g) for h, j, g in zip(human, judged, items)], draws, seed=5)
    kappa = out["kappa"]
    assert (row["genuine_kappa"], row["genuine_kappa_low"], row["genuine_kappa_high"]) == tuple(kappa.values())


def test_percentile_interval_and_p_on_known_replicates():
    values = [0.3, -0.1, 0.2, 0.5, 0.1, 0.4, 0.0, 0.25]
    assert percentile_interval(values, 0.05) == tuple(np.quantile(values, [0.025, 0.975]))
    assert percentile_interval(values, 0.5, point=0.45) == (np.quantile(values, 0.25), 0.45)
    assert bootstrap_p(values) == 2 * 2 / 8  # two of eight at or below 0
    assert bootstrap_p([0.0, 0.0]) == 1.0 and bootstrap_p([0.1] * 5) == 0.0
