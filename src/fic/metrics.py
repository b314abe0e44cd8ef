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
