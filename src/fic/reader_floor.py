"""The readers' generic floor and the two readings of context-free requests, from blind label rows.

A context-free request ("Can you explain that more simply?", "Can you give an example?") fits after any answer. The
guideline counts it genuine (it asks about the answer), so a model that learns to write it gains readers' genuine
labels without reading the answer. Two measurements say how much of a rate is that:

- **The readers' floor.** `fic review --foil-share S` mixes into the blind session, unmarked, turns a model wrote
  after one item's answer shown after another item's conversation (`fic.eval.review.foils`). The readers' genuine
  rate on those foil turns is their floor, as the judge's `generic_floor` is the judge's; the floor-subtracted
  reading is the readers' rate on the real turns minus their rate on the foils.
- **The context_free flag.** The reader ticks `context_free` on a genuine label whose request would fit after any
  answer (GUIDELINE.md, "Context-free requests"). Reading `counted`: such turns are genuine (the guideline's label);
  reading `not_counted`: they are not. Label files made before the flag existed carry no flag: there the second
  reading is unknown and said to be, never guessed.

Every rate is clustered by item (the item the turn was written after) with `fic.estimates.cluster_rate`'s interval,
and not estimable (figures None, a note) under `fic.estimates.MIN_CLUSTERS` items. The floor-subtracted difference
takes its interval from a bootstrap over items that draws each item's real and foil turns together.
`reader_readings` gives one model's figures (what `fic rates` reports); `reader_difference` an arm against the base
model: the readers' gain, their floor's rise and the gain less that rise, paired by item. Pure functions of plain label
rows (`genuine`, `context_free`, and the turn's `dataset` / `item_id`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from fic.bootstrap import alpha_of, bootstrap_p, draw_clusters, percentile_interval
from fic.estimates import MIN_CLUSTERS, cluster_rate

READINGS = ("counted", "not_counted")
UNKNOWN_FLAG = ("{n} of {genuine} genuine labels carry no context_free flag (labelled before the guideline asked "
                "for it): the reading without context-free requests is unknown")  # fmt: skip


class LabelRowError(ValueError):
    """A label row whose context_free flag is not usable; the message names it."""


def _item(row: dict) -> tuple[str, str]:
    return (str(row["dataset"]), str(row["item_id"]))


def check_flag(row: dict) -> None:
    """Raise `LabelRowError` when a row's `context_free` is neither true, false, null nor absent, or is true on a
    label that is not genuine (the flag marks a genuine request that would fit after any answer)."""
    flag = row.get("context_free")
    if flag is not None and not isinstance(flag, bool):
        raise LabelRowError(f"context_free must be true, false or absent, got {flag!r}")
    if flag and not row.get("genuine"):
        raise LabelRowError("context_free is true on a label that is not genuine; the flag marks a genuine "
                            "follow-up that would fit after any answer (GUIDELINE.md, 'Context-free requests')")  # fmt: skip


def flag_state(labels: Sequence[dict]) -> dict:
    """`{known, n_genuine, n_flagged, n_unknown, note}`: whether every genuine label says whether it is context-free
    (rows that are not genuine need no flag)."""
    genuine = [r for r in labels if r.get("genuine")]
    unknown = sum(1 for r in genuine if r.get("context_free") is None)
    flagged = sum(1 for r in genuine if r.get("context_free") is True)
    note = UNKNOWN_FLAG.format(n=unknown, genuine=len(genuine)) if unknown else ""
    return {"known": not unknown, "n_genuine": len(genuine), "n_flagged": flagged, "n_unknown": unknown, "note": note}


def reading_flags(labels: Sequence[dict], reading: str) -> list[bool] | None:
    """Each label's genuine decision under `reading`: `counted` (the label as given) or `not_counted` (a context-free
    genuine label counts as not genuine); None for `not_counted` when a genuine label carries no flag."""
    if reading not in READINGS:
        raise ValueError(f"reading: unknown {reading!r}; valid: {', '.join(READINGS)}")
    if reading == "counted":
        return [bool(r["genuine"]) for r in labels]
    if not flag_state(labels)["known"]:
        return None
    return [bool(r["genuine"]) and r.get("context_free") is not True for r in labels]


def without_context_free(labels: Sequence[dict]) -> list[dict] | None:
    """The label rows under reading `not_counted` (`genuine` false where `context_free` is true), for any estimate
    that reads `genuine` (`fic.followup_summary.summarize(rows, labels=...)`'s calibrated rate); None when a genuine
    label carries no flag."""
    flags = reading_flags(labels, "not_counted")
    if flags is None:
        return None
    return [{**r, "genuine": flag} for r, flag in zip(labels, flags)]


def reader_rate(flags: Sequence[bool], clusters: Sequence[Hashable]) -> dict:
    """`cluster_rate` of the readers' decisions, or not estimable under `MIN_CLUSTERS` items: `{rate, low, high, n,
    n_items, note}` (rate, low, high None then, and with no labels at all)."""
    cell = cluster_rate(list(flags), list(clusters))
    out = {k: cell[k] for k in ("rate", "low", "high", "n", "n_items")}
    if cell["n_items"] < MIN_CLUSTERS:
        return {**out, "rate": None, "low": None, "high": None,
                "note": f"not estimable: {cell['n_items']} items (< {MIN_CLUSTERS})"}  # fmt: skip
    return {**out, "note": ""}


def floor_subtracted(real: Sequence[bool], real_clusters: Sequence[Hashable], foil: Sequence[bool],
                     foil_clusters: Sequence[Hashable], n_boot: int = 2000, seed: int = 0,
                     z: float = 1.96) -> dict:  # fmt: skip
    """The readers' rate on the real turns minus their rate on the foil turns, with a 95% percentile interval from
    `n_boot` resamples of the items (the union of both sides' items, each drawn with its real and its foil turns, so
    an item on both sides stays paired) and the two-sided bootstrap p. Not estimable (diff, low, high, p None, a note)
    when either side holds fewer than `MIN_CLUSTERS` items. Deterministic for a given `seed`.

    Returns `{diff, low, high, p, rate_real, rate_foil, n_real, n_foil, n_items_real, n_items_foil, note}`."""
    if len(real) != len(real_clusters) or len(foil) != len(foil_clusters):
        raise ValueError("give one item key per decision on each side")
    items = list(dict.fromkeys([*real_clusters, *foil_clusters]))
    where = {item: i for i, item in enumerate(items)}
    k = np.zeros((2, len(items)))
    n = np.zeros((2, len(items)))
    for side, (flags, clusters) in enumerate(((real, real_clusters), (foil, foil_clusters))):
        for flag, item in zip(flags, clusters):
            k[side, where[item]] += bool(flag)
            n[side, where[item]] += 1
    g_real, g_foil = int((n[0] > 0).sum()), int((n[1] > 0).sum())
    rate = lambda side: float(k[side].sum() / n[side].sum()) if n[side].sum() else None  # noqa: E731
    out = {"rate_real": rate(0), "rate_foil": rate(1), "n_real": len(real), "n_foil": len(foil),
           "n_items_real": g_real, "n_items_foil": g_foil}  # fmt: skip
    if min(g_real, g_foil) < MIN_CLUSTERS:
        note = f"not estimable: {g_real} items with real labels, {g_foil} with foil labels (< {MIN_CLUSTERS})"
        return {"diff": None, "low": None, "high": None, "p": None, **out, "note": note}
    idx = draw_clusters(np.random.default_rng(seed), len(items), n_boot)
    kr, nr, kf, nf = k[0][idx].sum(1), n[0][idx].sum(1), k[1][idx].sum(1), n[1][idx].sum(1)
    both = (nr > 0) & (nf > 0)  # a resample without one side's items has no difference
    diffs = kr[both] / nr[both] - kf[both] / nf[both]
    diff = out["rate_real"] - out["rate_foil"]
    low, high = percentile_interval(diffs, alpha_of(z), point=diff)
    return {"diff": diff, "low": low, "high": high, "p": bootstrap_p(diffs), **out, "note": ""}


def reader_difference(base_real: Sequence[dict], base_foils: Sequence[dict], arm_real: Sequence[dict],
                      arm_foils: Sequence[dict], reading: str = "counted", n_boot: int = 2000, seed: int = 0,
                      z: float = 1.96) -> dict:  # fmt: skip
    """A trained arm against the base model in the readers' eyes, on the same items: the gain in their genuine rate
    on real turns (arm minus base), the rise of their floor (on foils) and the floor-subtracted gain (the gain minus
    the floor rise), each with a 95% percentile interval and two-sided p from one bootstrap over the items that draws
    each item's turns of all four label sets together (the arms' contexts are the same items, so they stay paired).

    Label rows as `reader_readings` takes them, read under `reading` (`counted` or `not_counted`). Returns `{"gain",
    "floor_rise", "floor_subtracted_gain": {diff, low, high, p}, "rates": {base_real, base_floor, arm_real,
    arm_floor}, "n_items": {...}, "note"}`; under `MIN_CLUSTERS` items in any of the four sets, or when the reading is
    unknown (a genuine label without the context_free flag), every diff is None and `note` says why."""
    sets = {"base_real": base_real, "base_floor": base_foils, "arm_real": arm_real, "arm_floor": arm_foils}
    flags = {name: reading_flags(rows, reading) for name, rows in sets.items()}
    empty = {"diff": None, "low": None, "high": None, "p": None}
    n_items = {name: len({_item(r) for r in rows}) for name, rows in sets.items()}
    out = {"reading": reading, "rates": {}, "n_items": n_items}
    unknown = [name for name, f in flags.items() if f is None]
    few = [f"{name} {n}" for name, n in n_items.items() if n < MIN_CLUSTERS]
    if unknown or few:
        note = (flag_state([*base_real, *base_foils, *arm_real, *arm_foils])["note"] if unknown else
                f"not estimable: items with labels {', '.join(few)} (< {MIN_CLUSTERS})")  # fmt: skip
        rates = {name: (sum(f) / len(f) if f else None) for name, f in flags.items() if f is not None}
        return {**out, "rates": rates, "gain": dict(empty), "floor_rise": dict(empty),
                "floor_subtracted_gain": dict(empty), "note": note}  # fmt: skip
    items = list(dict.fromkeys(_item(r) for rows in sets.values() for r in rows))
    where = {item: i for i, item in enumerate(items)}
    k = np.zeros((4, len(items)))
    n = np.zeros((4, len(items)))
    for side, name in enumerate(sets):
        for row, flag in zip(sets[name], flags[name]):
            k[side, where[_item(row)]] += flag
            n[side, where[_item(row)]] += 1
    rates = k.sum(1) / n.sum(1)
    idx = draw_clusters(np.random.default_rng(seed), len(items), n_boot)
    ks, ns = k[:, idx].sum(2), n[:, idx].sum(2)  # (4, n_boot)
    ok = (ns > 0).all(0)
    boot = ks[:, ok] / ns[:, ok]
    stats = {"gain": (rates[2] - rates[0], boot[2] - boot[0]), "floor_rise": (rates[3] - rates[1], boot[3] - boot[1])}
    stats["floor_subtracted_gain"] = (
        stats["gain"][0] - stats["floor_rise"][0],
        stats["gain"][1] - stats["floor_rise"][1],
    )
    for name, (point, draws) in stats.items():
        low, high = percentile_interval(draws, alpha_of(z), point=float(point))
        out[name] = {"diff": float(point), "low": low, "high": high, "p": bootstrap_p(draws)}
    out["rates"] = {name: float(r) for name, r in zip(sets, rates)}
    return {**out, "note": ""}


def seeded_reader_difference(base_real: Sequence[dict], base_foils: Sequence[dict],
                             arms_real: Mapping[Hashable, Sequence[dict]], arms_foils: Mapping[Hashable, Sequence[dict]],
                             reading: str = "counted", n_boot: int = 2000, seed: int = 0,
                             z: float = 1.96) -> dict:  # fmt: skip
    """`reader_difference` for a trained model at several training seeds (`{seed: label rows}`, real and foil, the
    same seeds on both sides) against the seed-free base model: an arm's rate pools its seeds' labels, and each of
    `n_boot` replicates draws the items with replacement (the union of every set's items, each drawn with all its
    turns, as `reader_difference` draws them, and first, so with one seed the two agree draw for draw), then the seeds
    with replacement. Returns `reader_difference`'s dict with `n_seeds`; under `MIN_CLUSTERS` items in any pooled set,
    or an unknown reading, every diff is None and `note` says why."""
    seeds = list(arms_real)
    if not seeds or set(seeds) != set(arms_foils):
        raise ValueError("arms_real and arms_foils: give the same seeds, at least one")
    pooled_real = [r for s in seeds for r in arms_real[s]]
    pooled_foils = [r for s in seeds for r in arms_foils[s]]
    out = reader_difference(base_real, base_foils, pooled_real, pooled_foils, reading, n_boot=1, seed=seed, z=z)
    out["n_seeds"] = len(seeds)
    if out["note"]:
        return out
    sets = [("real", base_real), ("floor", base_foils)]
    sets += [("real", arms_real[s]) for s in seeds] + [("floor", arms_foils[s]) for s in seeds]
    flags = [reading_flags(rows, reading) for _, rows in sets]
    items = list(dict.fromkeys(_item(r) for _, rows in sets for r in rows))
    where = {item: i for i, item in enumerate(items)}
    k, n = np.zeros((len(sets), len(items))), np.zeros((len(sets), len(items)))
    for j, ((_, rows), f) in enumerate(zip(sets, flags)):
        for row, flag in zip(rows, f):
            k[j, where[_item(row)]] += flag
            n[j, where[_item(row)]] += 1
    rng = np.random.default_rng(seed)
    idx = draw_clusters(rng, len(items), n_boot)
    pick = rng.integers(0, len(seeds), size=(n_boot, len(seeds)))
    ks, ns = k[:, idx].sum(2), n[:, idx].sum(2)  # (sets, n_boot)
    cols = np.arange(n_boot)
    arm = {}
    for side, first in (("real", 2), ("floor", 2 + len(seeds))):
        arm[side] = (ks[first + pick.T, cols].sum(0), ns[first + pick.T, cols].sum(0))
    ok = (ns[0] > 0) & (ns[1] > 0) & (arm["real"][1] > 0) & (arm["floor"][1] > 0)
    gain = arm["real"][0][ok] / arm["real"][1][ok] - ks[0][ok] / ns[0][ok]
    rise = arm["floor"][0][ok] / arm["floor"][1][ok] - ks[1][ok] / ns[1][ok]
    for name, draws in (("gain", gain), ("floor_rise", rise), ("floor_subtracted_gain", gain - rise)):
        point = out[name]["diff"]
        low, high = percentile_interval(draws, alpha_of(z), point=point)
        out[name] = {"diff": point, "low": low, "high": high, "p": bootstrap_p(draws)}
    return out


def reader_readings(real: Sequence[dict], foils: Sequence[dict], samples: Sequence[dict] | None = None,
                    seed: int = 0) -> dict:  # fmt: skip
    """The readers' figures of one model (one probe folder) from its real labels and its foil labels.

    Args:
        real: label rows of the model's own turns (`fic.eval.rates.read_labels`).
        foils: label rows of its foil turns (`fic.eval.rates.read_foil_labels`), keyed by the turn's own item.
        samples: the run's sample rows: where given, the judge's floor on the same foil turns (their
            `generic_genuine`, the judge's verdict after the same foil answer) is added for comparison.

    Returns:
        `{"n_real", "n_foils", "context_free": flag_state of all labels, "counted": {...}, "not_counted": {...} or
        None, "not_counted_note", "judge_floor_same_turns"}`, where each reading is `{"real": reader_rate,
        "floor": reader_rate of the foils, "floor_subtracted": floor_subtracted}` (`floor` and `floor_subtracted`
        None without foil labels).
    """
    state = flag_state([*real, *foils])
    out = {"n_real": len(real), "n_foils": len(foils), "context_free": state}
    real_items, foil_items = [_item(r) for r in real], [_item(r) for r in foils]
    for reading in READINGS:
        real_flags, foil_flags = reading_flags(real, reading), reading_flags(foils, reading)
        if reading == "not_counted" and not state["known"]:
            out[reading] = None
            continue
        entry = {"real": reader_rate(real_flags, real_items), "floor": None, "floor_subtracted": None}
        if foils:
            entry["floor"] = reader_rate(foil_flags, foil_items)
            entry["floor_subtracted"] = floor_subtracted(real_flags, real_items, foil_flags, foil_items, seed=seed)
        out[reading] = entry
    out["not_counted_note"] = state["note"]
    out["judge_floor_same_turns"] = None
    if samples is not None and foils:
        by_key = {_key(r): r for r in samples}
        judged = [(by_key[_key(f)].get("generic_genuine"), _item(f)) for f in foils if _key(f) in by_key]
        judged = [(bool(g), item) for g, item in judged if g is not None]
        if judged:
            out["judge_floor_same_turns"] = reader_rate([g for g, _ in judged], [i for _, i in judged])
    return out


def _key(row: dict) -> tuple:
    return (str(row["dataset"]), str(row["item_id"]), float(row["temperature"]), row["perturbation"],
            int(row["sample"]))  # fmt: skip


def _pct(cell: dict | None, value: str = "rate") -> str:
    if not cell:
        return "-"
    if cell.get(value) is None:
        return f"n/e ({cell['note']})"
    sign = "+" if value == "diff" else ""
    return f"{cell[value]:{sign}.3f} [{cell['low']:{sign}.3f}, {cell['high']:{sign}.3f}]"


def reader_lines(readings: dict) -> list[str]:
    """What `fic rates` prints of `reader_readings`: one line per reading, and the flag's state."""
    lines = []
    for reading, what in (("counted", "context-free counted genuine"), ("not_counted", "context-free not counted")):
        entry = readings.get(reading)
        if entry is None:
            lines.append(f"readers ({what}): unknown: {readings.get(f'{reading}_note') or 'no labels'}")
            continue
        real = entry["real"]
        line = f"readers ({what}): genuine {_pct(real)} on {real['n']} real turns ({real['n_items']} items)"
        if entry["floor"] is None:
            line += " | floor: no foil labels (fic review --foil-share S)"
        else:
            floor = entry["floor"]
            line += (f" | floor {_pct(floor)} on {floor['n']} foil turns ({floor['n_items']} items)"
                     f" | floor-subtracted {_pct(entry['floor_subtracted'], 'diff')}")  # fmt: skip
        lines.append(line)
    state = readings["context_free"]
    if state["known"]:
        lines.append(f"readers: {state['n_flagged']} of {state['n_genuine']} genuine labels flagged context_free")
    if readings.get("judge_floor_same_turns"):
        lines.append(f"judge's floor on the same foil turns: {_pct(readings['judge_floor_same_turns'])}")
    return lines
