"""The bootstrap, once for every estimate of fic: resampling clusters with replacement, the percentile interval, the
bootstrap p-value, the item bootstrap of any statistic, and the two-level bootstrap over training seeds and test tasks.

Every bootstrap in fic draws its resamples with `draw_clusters` (numpy's Generator, `integers(0, G, (n_boot, G))`),
reads its interval off the replicates with `percentile_interval` (numpy's `np.quantile`, linear interpolation) and,
where it tests a difference against 0, its p with `bootstrap_p`. The callers: `fic.estimates` (`paired_difference`,
`cluster_mean`, `bootstrap_auroc`), `fic.judges.agreement.binary_agreement` (kappa, FPR and TPR over items),
`seed_task_bootstrap` below, and reproduce/probe_judge.py (Table 7, the label kappa).

`seed_task_bootstrap`: a trained model's score varies with the test tasks drawn and with the training seed; an
interval over tasks alone treats the seeds as fixed and is too narrow when they disagree. It resamples both: each
replicate draws the seeds with replacement and, independently, the tasks with replacement, and recomputes every arm's
pooled rate on that grid (a seed drawn twice counts twice, a task drawn twice counts twice; the crossed design's
"pigeonhole" bootstrap). One draw serves every arm, so the arms are paired by task and by seed: seed 1 of VASD and
seed 1 of its control trained on the same tasks and replay draws, and every arm is scored on the same tasks. An arm
scored at one seed only (the start model, which no seed changes) is the same in every seed draw.

With one seed it is the task (item-clustered, paired) bootstrap of `fic.estimates.paired_difference`, draw for draw.
With few seeds the seed level is coarse (3 seeds give 10 distinct multisets) and, like any bootstrap of S values,
it understates their variance by about (S - 1) / S; it still widens the interval where seeds disagree, which an
interval over tasks alone never does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np


def alpha_of(z: float) -> float:
    """The two-sided level a normal quantile names: 0.05 (to 4e-6) at z = 1.96, erfc(z / sqrt(2))."""
    return math.erfc(z / math.sqrt(2))


def draw_clusters(rng: np.random.Generator, n_clusters: int, n_boot: int) -> np.ndarray:
    """`n_boot` resamples of `n_clusters` clusters with replacement, as an `(n_boot, n_clusters)` array of indices.

    The one draw of every bootstrap here: with the same Generator state the same resamples, whichever estimate asks
    (one call of `rng.integers(0, G, G)` per replicate draws exactly these rows, in order)."""
    return rng.integers(0, n_clusters, size=(n_boot, n_clusters))


def percentile_interval(
    values: Sequence[float], alpha: float = 0.05, point: float | None = None
) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates: `np.quantile(values, [alpha / 2, 1 - alpha / 2])` (linear
    interpolation between order statistics, numpy's default). With `point` (the estimate on all the data) the
    interval is widened to hold it, where the replicates all fall on one side of it."""
    low, high = (float(q) for q in np.quantile(values, [alpha / 2, 1 - alpha / 2]))
    if point is not None:
        low, high = min(low, point), max(high, point)
    return low, high


def bootstrap_p(values: Sequence[float]) -> float:
    """The two-sided bootstrap p-value of a difference against 0: min(1, 2 min(P*(x <= 0), P*(x >= 0))) over the
    replicates, 1.0 when every replicate is exactly 0. A p of 0.0 means below 1 / len(values)."""
    x = np.asarray(values, dtype=float)
    if np.all(x == 0):
        return 1.0
    return min(1.0, 2 * min(float(np.mean(x <= 0)), float(np.mean(x >= 0))))


def item_bootstrap(
    groups: Sequence[Sequence],
    statistic: Callable[[list], Mapping[str, float | None]],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, dict]:
    """Statistics of rows that come in groups (the turns of one item), each with a percentile interval from
    resampling the groups with replacement.

    `statistic(rows)` maps a list of rows to named values (None where undefined, e.g. a rate of no turns). It is
    computed on all the rows, then on each of `n_boot` resamples: `draw_clusters` draws the groups, and a resample's
    rows are those of its groups, in draw order. A replicate where a value is None is left out of that value's
    interval. Deterministic for a given `seed`.

    Returns:
        `dict`: `{name: {"value", "low", "high"}}`: the value on all the rows and the `percentile_interval` of its
        replicates, widened to hold the value; low and high are None where the value is None or no replicate
        defines it.
    """
    rows = [row for group in groups for row in group]
    point = dict(statistic(rows))
    samples: dict[str, list[float]] = {name: [] for name in point}
    if groups and any(value is not None for value in point.values()):
        for idx in draw_clusters(np.random.default_rng(seed), len(groups), n_boot):
            for name, value in statistic([row for i in idx for row in groups[i]]).items():
                if value is not None:
                    samples[name].append(value)
    out = {}
    for name, value in point.items():
        if value is None or not samples[name]:
            out[name] = {"value": value, "low": None, "high": None}
        else:
            low, high = percentile_interval(samples[name], alpha, point=value)
            out[name] = {"value": value, "low": low, "high": high}
    return out


Outcomes = Mapping[Hashable, Mapping[Hashable, Sequence[bool]]]  # seed -> task -> verdicts of its runs


def seed_task_bootstrap(
    arms: Mapping[str, Outcomes],
    statistic: Callable[[dict[str, float]], float | None],
    n_boot: int = 2000,
    seed: int = 0,
    z: float = 1.96,
) -> dict:
    """A statistic of several arms' pooled rates with a percentile interval from resampling seeds and tasks.

    Each arm is `{seed: {task: [verdict of each run]}}`. An arm's rate is pooled: True verdicts over all verdicts of
    its seeds and tasks. Only tasks with at least one verdict in every arm and seed count. Arms with more than one
    seed must have the same seeds (they are paired by seed); an arm with one seed is seed-free (the same in every seed
    draw). Each of `n_boot` replicates draws the tasks with replacement, then the seeds with replacement, from one
    numpy Generator seeded with `seed`; the tasks are drawn first and exactly as `fic.estimates.paired_difference`
    draws its items, so with one seed the two agree draw for draw.

    Args:
        arms (`Mapping[str, Mapping[Hashable, Mapping[Hashable, Sequence[bool]]]]`): Arm name -> seed -> task ->
            verdicts.
        statistic (`Callable[[dict[str, float]], float | None]`): The number from `{arm: pooled rate}`, e.g.
            `lambda r: r["after"] - r["before"]`; None where it is undefined (such replicates are left out and
            counted in `n_undefined`).
        n_boot (`int`, *optional*, defaults to `2000`): Bootstrap replicates.
        seed (`int`, *optional*, defaults to `0`): Seed of the numpy Generator.
        z (`float`, *optional*, defaults to `1.96`): Normal quantile naming the interval's level (1.96 for 95%).

    Returns:
        `dict`: `{"estimate", "low", "high", "p", "detectable", "rates", "n_tasks", "n_seeds", "n_boot",
        "n_undefined"}`: the statistic on all the data, its percentile interval, the two-sided bootstrap p against 0
        (`min(1, 2 min(P*(x <= 0), P*(x >= 0)))`, 1.0 when every replicate is 0; for a difference), `detectable` when
        the interval excludes 0, each arm's pooled rate, and the sizes. `estimate`, `low`, `high` and `p` are None
        when the statistic is undefined on all the data or on every replicate.

    Raises:
        `ValueError`: when no arm is given, an arm has no seed, seeded arms have different seeds, or no task has
            verdicts in every arm and seed.
    """
    if not arms:
        raise ValueError("arms: empty; give at least one arm {seed: {task: verdicts}}")
    seeded = {name: list(by_seed) for name, by_seed in arms.items() if len(by_seed) > 1}
    for name, by_seed in arms.items():
        if not by_seed:
            raise ValueError(f"arms[{name!r}]: no seed; give {{seed: {{task: verdicts}}}}")
    seed_keys = next(iter(seeded.values()), [None])
    for name, keys in seeded.items():
        if set(keys) != set(seed_keys):
            raise ValueError(f"arms[{name!r}]: seeds {sorted(keys, key=str)} differ from {sorted(seed_keys, key=str)};"
                             " arms at several seeds are paired by seed and need the same ones")  # fmt: skip
    tasks = [t for t in next(iter(next(iter(arms.values())).values()))
             if all(len(by_task.get(t, ())) for by_seed in arms.values() for by_task in by_seed.values())]  # fmt: skip
    if not tasks:
        raise ValueError("no task has verdicts in every arm and seed; a paired bootstrap needs the same tasks")
    counts = {}  # arm -> (k, n), arrays of shape (seeds, tasks); one row for a seed-free arm
    for name, by_seed in arms.items():
        rows = seed_keys if name in seeded else list(by_seed)
        k = np.array([[sum(map(bool, by_seed[s][t])) for t in tasks] for s in rows], dtype=float)
        n = np.array([[len(by_seed[s][t]) for t in tasks] for s in rows], dtype=float)
        counts[name] = (k, n)
    rates = {name: float(k.sum() / n.sum()) for name, (k, n) in counts.items()}
    estimate = statistic(dict(rates))

    rng = np.random.default_rng(seed)
    n_tasks, n_seeds = len(tasks), len(seed_keys)
    task_draw = draw_clusters(rng, n_tasks, n_boot)
    seed_draw = draw_clusters(rng, n_seeds, n_boot)
    rows = np.arange(n_boot)[:, None]
    task_w = np.zeros((n_boot, n_tasks))
    np.add.at(task_w, (rows, task_draw), 1.0)
    seed_w = np.zeros((n_boot, n_seeds))
    np.add.at(seed_w, (rows, seed_draw), 1.0)
    boot_rates = {}
    for name, (k, n) in counts.items():
        if k.shape[0] == 1:  # seed-free: every seed draw sees the same scores
            boot_rates[name] = (task_w @ k[0]) / (task_w @ n[0])
        else:
            boot_rates[name] = (np.einsum("bs,st,bt->b", seed_w, k, task_w)
                                / np.einsum("bs,st,bt->b", seed_w, n, task_w))  # fmt: skip
    values = [statistic({name: float(r[b]) for name, r in boot_rates.items()}) for b in range(n_boot)]
    kept = np.array([v for v in values if v is not None], dtype=float)
    out = {"estimate": estimate, "low": None, "high": None, "p": None, "detectable": False, "rates": rates,
           "n_tasks": n_tasks, "n_seeds": n_seeds, "n_boot": n_boot, "n_undefined": n_boot - len(kept)}  # fmt: skip
    if estimate is None or not len(kept):
        return out
    low, high = percentile_interval(kept, alpha_of(z))
    p = bootstrap_p(kept)
    return {**out, "low": low, "high": high, "p": p, "detectable": bool(low > 0 or high < 0)}
