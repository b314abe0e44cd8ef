"""The calibrated paired difference (`fic.ppi.ppi_paired_difference`), its use in the checkpoint comparison, and
the rule that an estimate resting on fewer than `MIN_CLUSTERS` items is not estimable."""

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from fic.estimates import MIN_CLUSTERS, cluster_mean, paired_difference
from fic.followup_summary import compare, compare_calibrated, ppi_arm
from fic.ppi import ppi_paired_difference, ppi_rate


def expit(x):
    return 1 / (1 + np.exp(-x))


def arm(rng, p_item, turns, n_labels, sensitivity=0.8, specificity=0.9):
    """One arm as `ppi_rate`'s arguments: item g's turns genuine with probability p_item[g] (item keys 0..G-1, the
    same in both arms), the judge right with the given sensitivity and specificity, and a reader's labels on
    `n_labels` turns drawn at random."""
    y = rng.random((len(p_item), turns)) < np.asarray(p_item)[:, None]
    f = np.where(y, rng.random(y.shape) < sensitivity, rng.random(y.shape) < 1 - specificity)
    items = np.repeat(np.arange(len(p_item)), turns).tolist()
    y, f = y.ravel().tolist(), f.ravel().tolist()
    lab = rng.choice(len(y), size=n_labels, replace=False)
    return {"labelled_human": [y[i] for i in lab], "labelled_judge": [f[i] for i in lab], "all_judge": f,
            "all_clusters": items, "labelled_clusters": [items[i] for i in lab]}  # fmt: skip


def test_pairing_by_item_narrows_the_interval_of_correlated_arms():
    # Both arms draw their turns from the same items, whose propensities vary widely: an item that is genuine in one
    # arm tends to be in the other, and the difference cancels that shared part.
    rng = np.random.default_rng(0)
    u = rng.normal(-1, 2.5, 40)
    a, b = arm(rng, expit(u), 8, 60), arm(rng, expit(u + 0.5), 8, 60)
    d = ppi_paired_difference(a, b)
    ra, rb = ppi_rate(**a), ppi_rate(**b)
    # each arm's estimate is ppi_rate's, with its lambda; unpaired, the variances would add
    assert (d["lambda_a"], d["lambda_b"]) == (ra["lambda"], rb["lambda"])
    assert d["rate_a"] == pytest.approx(ra["rate"]) and d["rate_b"] == pytest.approx(rb["rate"])
    assert d["diff"] == pytest.approx(rb["rate"] - ra["rate"])
    assert d["se_unpaired"] == pytest.approx(math.hypot(ra["se"], rb["se"]))
    assert d["se"] < 0.85 * d["se_unpaired"]
    assert d["high"] - d["low"] == pytest.approx(2 * 1.96 * d["se"]) and d["low"] < d["diff"] < d["high"]
    assert d["se"] <= d["labels_only"]["se"]
    assert (d["n_items"], d["n_items_shared"], d["n_labels_a"], d["n_labels_b"], d["n_a"]) == (40, 40, 60, 60, 320)
    assert d["p"] == pytest.approx(math.erfc(abs(d["diff"]) / d["se"] / math.sqrt(2))) and d["note"] == ""
    assert d["detectable"] == (d["low"] > 0 or d["high"] < 0)
    # arms of unrelated items under the same keys: pairing buys little
    c = ppi_paired_difference(a, arm(rng, expit(rng.normal(-1, 2.5, 40)), 8, 60))
    assert c["se"] > 0.8 * c["se_unpaired"]


def test_a_perfect_judge_gives_the_judges_raw_difference():
    # The judge agrees with the reader on every labelled turn, so the rectifier mean_n(y - lambda f) is
    # (1 - lambda) mean_n(f) and the estimate is the judge's rate whenever the labelled turns' judged share is the
    # run's, whatever lambda: here the reader labels a sample stratified on the verdict, half of the turns judged
    # genuine and half of the others. (With a simple random sample it differs by (1 - lambda) (mean_n(f) -
    # mean_N(f)), lambda near 1.)
    rng = np.random.default_rng(3)

    def perfect_arm(p_item):
        f = (rng.random((len(p_item), 6)) < p_item[:, None]).ravel()
        f[np.flatnonzero(~f)[0]] ^= f.sum() % 2 == 1  # an even number of each verdict, so halves are exact
        items = np.repeat(np.arange(len(p_item)), 6).tolist()
        lab = [i for v in (True, False) for i in rng.permutation(np.flatnonzero(f == v))[: (f == v).sum() // 2]]
        f = f.tolist()
        return {"labelled_human": [f[i] for i in lab], "labelled_judge": [f[i] for i in lab], "all_judge": f,
                "all_clusters": items, "labelled_clusters": [items[i] for i in lab]}  # fmt: skip

    p = rng.beta(1, 3, 25)
    a, b = perfect_arm(p), perfect_arm(np.minimum(p + 0.2, 1))
    d = ppi_paired_difference(a, b)
    raw = np.mean(b["all_judge"]) - np.mean(a["all_judge"])
    assert d["raw_diff"] == pytest.approx(raw) and d["diff"] == pytest.approx(raw, abs=1e-12)
    assert d["lambda_a"] > 0.5 and d["lambda_b"] > 0.5
    assert d["high"] - d["low"] < d["labels_only"]["high"] - d["labels_only"]["low"]


def per_item_terms(arm: dict, lam: float) -> dict:
    """An arm's linearisation by item, e_g = lambda (F_g - mean_N(f) N_g) / N + (R_g - mean_n(y - lambda f) n_g) / n
    (`ppi_rate`'s docstring), in plain Python."""
    y, f, f_all = arm["labelled_human"], arm["labelled_judge"], arm["all_judge"]
    rectifier = [yi - lam * fi for yi, fi in zip(y, f)]
    mean_f, mean_r = sum(f_all) / len(f_all), sum(rectifier) / len(y)
    e: dict = {}
    for g, fi in zip(arm["all_clusters"], f_all):
        e[g] = e.get(g, 0.0) + lam * (fi - mean_f) / len(f_all)
    for g, ri in zip(arm["labelled_clusters"], rectifier):
        e[g] = e.get(g, 0.0) + (ri - mean_r) / len(y)
    return e


def test_paired_interval_is_its_closed_form():
    """diff +- z se with se^2 = G / (G - 1) sum_g (e_bg - e_ag)^2 over the items of either arm, each arm at the
    lambda `ppi_rate` tunes for it (the docstring's formula), the labels-only one where it is narrower."""
    rng, tuned = np.random.default_rng(4), 0
    for _ in range(5):
        u = rng.normal(-1, 2, 25)
        a, b = arm(rng, expit(u), 5, 45), arm(rng, expit(u + 0.4), 5, 45)
        b["all_clusters"] = [g + 3 for g in b["all_clusters"]]  # items 0-2 only in a, 25-27 only in b
        b["labelled_clusters"] = [g + 3 for g in b["labelled_clusters"]]
        d = ppi_paired_difference(a, b)
        ra, rb = ppi_rate(**a), ppi_rate(**b)

        def closed_form(lam_a: float, lam_b: float, a=a, b=b) -> tuple[int, float]:
            e_a, e_b = per_item_terms(a, lam_a), per_item_terms(b, lam_b)
            keys = set(e_a) | set(e_b)
            s2 = sum((e_b.get(g, 0.0) - e_a.get(g, 0.0)) ** 2 for g in keys)
            return len(keys), math.sqrt(len(keys) / (len(keys) - 1) * s2)

        g, se = closed_form(ra["lambda"], rb["lambda"])
        _, se_labels = closed_form(0.0, 0.0)
        if se > se_labels:
            se = se_labels
        diff = d["rate_b"] - d["rate_a"]
        assert g == d["n_items"] == 28 and d["se"] == pytest.approx(se, abs=1e-12)
        assert d["labels_only"]["se"] == pytest.approx(se_labels, abs=1e-12)
        assert (d["low"], d["high"]) == pytest.approx((diff - 1.96 * se, diff + 1.96 * se), abs=1e-12)
        assert d["p"] == pytest.approx(2 * (1 - NormalDist().cdf(abs(diff) / se)), abs=1e-12)
        tuned += d["lambda_a"] > 0 and d["lambda_b"] > 0
    assert tuned >= 3, "most draws use the judge (lambda > 0), not the labels alone"


def test_simulation_the_paired_interval_covers_the_true_difference():
    # 1,000 draws of 30 items x 4 turns per arm, coverage held between 0.90 and 0.98 (a too-narrow interval fails
    # below, a too-wide one above; the binomial standard error is 0.007). Item g has logit propensity
    # u_g ~ N(-1, 1.2^2) in arm a and u_g + 0.6 in arm b (strongly paired); the judge has sensitivity 0.8,
    # specificity 0.9; a reader labels 40 turns per arm. The truth is the population difference
    # E expit(u + 0.6) - E expit(u) (the intervals are clustered by item, so they target the population the items
    # are drawn from). The interval is a little short of 95% with this few items (the docstring's 92.5%).
    rng = np.random.default_rng(0)
    u = rng.normal(-1, 1.2, 1_000_000)
    truth = float(np.mean(expit(u + 0.6)) - np.mean(expit(u)))
    draws, hits, labels_only = 1000, 0, 0
    for items in rng.normal(-1, 1.2, (draws, 30)):
        d = ppi_paired_difference(arm(rng, expit(items), 4, 40), arm(rng, expit(items + 0.6), 4, 40))
        hits += d["low"] <= truth <= d["high"]
        labels_only += d["labels_only"]["low"] <= truth <= d["labels_only"]["high"]
    print(f"coverage of {truth:.4f} over {draws} draws: {hits / draws}, labels only {labels_only / draws}")
    assert 0.90 <= hits / draws <= 0.98
    assert 0.90 <= labels_only / draws <= 0.98


def test_under_ten_clusters_nothing_is_estimated():
    assert MIN_CLUSTERS == 10
    rng = np.random.default_rng(1)
    nine, ten = np.full(9, 0.3), np.full(10, 0.3)
    d = ppi_paired_difference(arm(rng, nine, 4, 36), arm(rng, nine, 4, 36))
    assert (d["diff"], d["low"], d["high"], d["p"], d["se"], d["rate_a"], d["detectable"]) == (None,) * 6 + (False,)
    assert d["note"] == "not estimable: 9 clusters (< 10) with labelled turns in arm a"
    assert ppi_paired_difference(arm(rng, ten, 4, 40), arm(rng, ten, 4, 40))["diff"] is not None
    # the items holding labels count, not the run's items: 40 items, labels on the turns of 5 of them
    few = arm(rng, np.full(40, 0.3), 4, 40)
    few["labelled_clusters"] = [k % 5 for k in few["labelled_clusters"]]
    d = ppi_paired_difference(arm(rng, np.full(40, 0.3), 4, 40), few)
    assert d["diff"] is None and d["note"] == "not estimable: 5 clusters (< 10) with labelled turns in arm b"
    r = ppi_rate(**few)
    assert (r["rate"], r["low"], r["high"], r["lambda"], r["labels_only"]["rate"]) == (None,) * 5
    assert r["note"] == "not estimable: 5 clusters (< 10) with labelled turns" and r["n_labels"] == 40
    assert ppi_rate([True] * 9, [True] * 9, [True] * 20)["rate"] is None  # unclustered: each label its own item
    p = paired_difference({i: [True, False] for i in range(9)}, {i: [True, True] for i in range(9)})
    assert (p["diff"], p["low"], p["high"], p["p"], p["detectable"]) == (None, None, None, None, False)
    assert p["note"] == "not estimable: 9 clusters (< 10)" and (p["n_items"], p["rate_a"], p["rate_b"]) == (
        9,
        0.5,
        1.0,
    )
    assert paired_difference({i: [True, False] for i in range(10)}, {i: [True, True] for i in range(10)})["note"] == ""
    m = cluster_mean([1.0, 0.0] * 9, list(range(9)) * 2)
    assert (m["mean"], m["low"], m["high"], m["n_items"], m["note"]) == (
        None,
        None,
        None,
        9,
        "not estimable: 9 clusters (< 10)",
    )
    with pytest.raises(ValueError, match="arm b: missing labelled_clusters"):
        ppi_paired_difference(arm(rng, ten, 4, 40), {**arm(rng, ten, 4, 40), "labelled_clusters": None})


def rows_for(items, turns, genuine, dataset="d"):
    return [{"dataset": dataset, "item_id": str(i), "temperature": 1.0, "perturbation": "none", "sample": s,
             "user_turn": f"t{i}.{s}", "label": "x", "genuine": genuine(i, s)}
            for i in range(items) for s in range(turns)]  # fmt: skip


def key(row):
    return (row["dataset"], row["item_id"], row["temperature"], row["perturbation"], row["sample"])


def test_compare_calibrated_and_the_checkpoint_comparison(tmp_path):
    from fic.eval.comparison import probe_differences

    before = rows_for(20, 3, lambda i, s: i % 4 == 0)
    after = rows_for(20, 3, lambda i, s: i % 2 == 0 or s == 0)
    # the reader disagrees with the judge on one turn in six
    label = lambda r, n: r["genuine"] if n % 6 else not r["genuine"]  # noqa: E731
    labels_before = {key(r): label(r, n) for n, r in enumerate(before) if n % 2 == 0}
    labels_after = {key(r): label(r, n) for n, r in enumerate(after) if n % 2 == 1}
    out = compare_calibrated(before, after, labels_before, labels_after)
    cell = out["overall"]
    assert cell == {
        **ppi_paired_difference(ppi_arm(before, labels_before), ppi_arm(after, labels_after)),
        "reading": cell["reading"],
    }
    assert cell["reading"].startswith(f"+{100 * cell['diff']:.1f} points [") and set(out["by_dataset"]) == {"d"}
    assert compare_calibrated(before, after, labels_before, {})["overall"] is None  # an arm without labels
    assert compare_calibrated(before[:27], after[:27], labels_before, labels_after)["overall"]["reading"].startswith(
        "not estimable: 9 clusters (< 10)"
    )
    assert compare(before[:27], after[:27])["overall"]["reading"] == "not estimable: 9 clusters (< 10)"

    # checkpoint evaluation: both probe folders hold labels -> `calibrated` beside the judged difference
    records = []
    for step, rows, labels in ((10, before, labels_before), (20, after, labels_after)):
        probe = tmp_path / f"checkpoint-{step}" / "eval" / "probe"
        probe.mkdir(parents=True)
        (probe / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (probe / "labels.jsonl").write_text("".join(
            json.dumps({**dict(zip(("dataset", "item_id", "temperature", "perturbation", "sample"), k)),
                        "genuine": v}) + "\n" for k, v in labels.items()))  # fmt: skip
        records.append({"step": step, "checkpoint": f"checkpoint-{step}"})
    (diff,) = probe_differences(tmp_path, records)
    assert diff["overall"]["diff"] == pytest.approx(compare(before, after)["overall"]["diff"])
    assert diff["calibrated"]["overall"]["diff"] == pytest.approx(cell["diff"])
    (tmp_path / "checkpoint-20" / "eval" / "probe" / "labels.jsonl").unlink()
    assert "calibrated" not in probe_differences(tmp_path, records)[0]
