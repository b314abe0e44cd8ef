"""The VASD part's estimators (reproduce/vasd.py, "Estimates"): pooled rates, paired differences and recovery of
bootstrap arms {seed: {task_id: [correct per run]}}, and one number's spread over the seeds."""

from __future__ import annotations

import statistics


def arm(results: dict[int, dict], view: str) -> dict:
    """One view of a kind's models as a bootstrap arm (`fic.bootstrap`): {seed: {task_id: [correct per run]}}; the
    start model is `{None: result}`, one seed-free model."""
    return {seed: result.get(view, {}) for seed, result in results.items()}


def rate(a: dict) -> dict:
    """The pooled rate of an arm with a 95% interval: for the start model (one model, no seed) item-clustered
    (`fic.estimates.cluster_rate`, Wilson at the clustered effective size); for the seeded arms the seeds and tasks
    resampled (`seed_rate`). `{rate, low, high, n, n_items, n_seeds, interval}`."""
    if len(a) > 1:
        return seed_rate(a)
    from fic.estimates import cluster_rate

    by_task = next(iter(a.values()))
    flags = [f for v in by_task.values() for f in v]
    r = cluster_rate(flags, [t for t, v in by_task.items() for _ in v])
    return {**r, "n_seeds": 1, "interval": "tasks (item-clustered Wilson)"}


def seed_rate(a: dict) -> dict:
    """The pooled rate of an arm at several seeds with the percentile interval of `fic.bootstrap.seed_task_bootstrap`
    (seeds and tasks resampled)."""
    from fic.bootstrap import seed_task_bootstrap

    x = seed_task_bootstrap({"x": a}, lambda r: r["x"])
    n = sum(len(v) for by_task in a.values() for v in by_task.values())
    return {"rate": x["estimate"], "low": x["low"], "high": x["high"], "n": n, "n_items": x["n_tasks"],
            "n_seeds": x["n_seeds"], "interval": "seeds and tasks resampled"}  # fmt: skip


def difference(a: dict, b: dict) -> dict:
    """rate(b) - rate(a) on the same tasks (and the same seeds, where both have several), with the two-level
    bootstrap interval and p of `fic.bootstrap.seed_task_bootstrap`: `{diff, low, high, p, n_items, n_seeds, rate_a,
    rate_b, detectable}`. Arms at one seed give the paired task bootstrap of `fic.estimates.paired_difference`."""
    from fic.bootstrap import seed_task_bootstrap

    x = seed_task_bootstrap({"a": a, "b": b}, lambda r: r["b"] - r["a"])
    return {"diff": x["estimate"], "low": x["low"], "high": x["high"], "p": x["p"], "n_items": x["n_tasks"],
            "n_seeds": x["n_seeds"], "rate_a": x["rates"]["a"], "rate_b": x["rates"]["b"],
            "detectable": x["detectable"]}  # fmt: skip


def recovery(full_before: dict, sharded_before: dict, sharded_after: dict) -> dict:
    """Recovery, the share of the multi-turn gap closed (`fic.metrics.recovery`), pooled over the seeds and tasks,
    with the two-level bootstrap interval (seeds and tasks resampled; replicates without a gap before are left out
    and counted in `n_undefined`); `reason` says why it is None when there is no gap before training."""
    from fic.bootstrap import seed_task_bootstrap
    from fic.metrics import recovery as gap_closed

    arms = {"full_b": full_before, "sharded_b": sharded_before, "sharded_a": sharded_after}
    x = seed_task_bootstrap(arms, lambda r: gap_closed(r["full_b"], r["sharded_b"], r["sharded_a"])["recovery"])
    point = gap_closed(x["rates"]["full_b"], x["rates"]["sharded_b"], x["rates"]["sharded_a"])
    return {"estimate": x["estimate"], "low": x["low"], "high": x["high"], "n_items": x["n_tasks"],
            "n_seeds": x["n_seeds"], "n_undefined": x["n_undefined"], "gap_before": point["gap_before"],
            "closed": point["closed"], "reason": point["reason"]}  # fmt: skip


def seed_spread(values: list[float]) -> dict:
    """Mean, sample sd, min and max of one number over the seeds."""
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n_seeds": len(values)}  # fmt: skip
