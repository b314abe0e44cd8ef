"""Pure metric functions: rates with intervals, % changed, agreement (kappa), Lost-in-Conversation scores, regret.

Every function here takes plain Python data (lists, dicts, numbers) and returns plain data, so each one can be
tested on hand-built inputs against hand-computed values.
"""

from __future__ import annotations

import math


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion; (0.0, 0.0) when `total` is 0."""
    if total == 0:
        return (0.0, 0.0)
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate_with_interval(flags: list[bool]) -> dict:
    """Share of True in `flags` with its 95% Wilson interval: {"rate", "low", "high", "n"}."""
    n = len(flags)
    k = sum(1 for f in flags if f)
    low, high = wilson_interval(k, n)
    return {"rate": k / n if n else 0.0, "low": low, "high": high, "n": n}


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty list")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def lic_scores(scores_by_task: dict[str, list[float]]) -> dict:
    """Lost-in-Conversation metrics over tasks, each with N run scores in [0, 1].

    P (averaged performance) is the mean over tasks of the mean run score; A90 (aptitude) the mean of each task's
    90th-percentile score; U90_10 (unreliability) the mean of each task's 90th minus 10th percentile.
    """
    tasks = [s for s in scores_by_task.values() if s]
    if not tasks:
        return {"P": 0.0, "A90": 0.0, "U90_10": 0.0, "n_tasks": 0}
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "P": mean([mean(s) for s in tasks]),
        "A90": mean([percentile(s, 90) for s in tasks]),
        "U90_10": mean([percentile(s, 90) - percentile(s, 10) for s in tasks]),
        "n_tasks": len(tasks),
    }
