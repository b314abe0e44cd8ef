"""The probe part's tables (the probe paper's Tables 1, 2 (base model), 3/5, 4 and 6, the T=1 power table and the
estimates table) and Figures 1/4, built from the `fic probe` summary and the part's readings (`probe_readings`).
"""

from __future__ import annotations

from pathlib import Path

import repro
from probe_readings import CONTROLS, MDE_NOTE, effect_reading, points
from repro import Table

from fic.metric_names import temperature_key

FIGURE = "figures_1_4_rate_vs_temperature.png"
TABLE2 = {"healthbench": "HealthBench (held out)", "mt_bench": "MT-Bench (stands in for Coval)", "ifbench": "IFBench"}
TABLE2_TEMPERATURE = 0.7  # the collab part's held-out temperature, so this base-model row reads beside its table


def _sweep_cell(cell: dict | None, greedy: bool) -> str:
    if not cell or cell.get("rate") is None:
        return "n/a"
    n_items = cell.get("n_items") or 0
    size = f"{n_items} items, greedy" if greedy else f"{n_items} items x {cell['n'] // max(n_items, 1)}"
    return f"{repro.interval_cell(cell)} ({size})"


def sweep_table(rates: dict, datasets: list[str], temps: list[float], samples: int) -> Table:
    return Table(
        "Table 4: genuine follow-up rate by temperature (%, 95% interval clustered by item; items x turns per item; "
        f"{samples} turns per item at T > 0); no perturbation. Figures 1 and 4 draw it",
        ["dataset", *[f"T={t}" for t in temps]],
        [[d, *[_sweep_cell(rates.get(d, {}).get(temperature_key(t), {}).get("none"), float(t) == 0.0) for t in temps]]
         for d in datasets],
    )  # fmt: skip


def controls_table(rates: dict, changed: dict, differences: dict, datasets: list[str], temps: list[float]) -> Table:
    rows = []
    for d in datasets:
        for t in temps:
            cells = rates.get(d, {}).get(temperature_key(t), {})
            greedy = float(t) == 0.0
            row = [d, str(t), _sweep_cell(cells.get("none"), greedy)]
            for p in CONTROLS:
                row += [_sweep_cell(cells.get(p), greedy), _changed(changed, p, d, t),
                        effect_reading(differences[d]["controls"].get(f"{p}@{t}", {}))]  # fmt: skip
            rows.append(row + [_changed(changed, "reseed", d, t)])
    return Table(
        "Table 1: controls: genuine rate (%, 95% interval clustered by item; items x turns per item) of the base "
        "context and under "
        "each perturbation, its paired difference from the base, and % of turns that changed against the "
        "unperturbed turn of the same seed, beside the seed floor (the same context sampled with another seed "
        "changes that share of turns by itself; 0 at T=0, where the seed does not matter)",
        ["dataset", "T", "base", "truncate", "% changed", "truncate - base", "appended question", "% changed",
         "question - base", "seed floor: % changed"], rows,
    )  # fmt: skip


def _changed(changed: dict, p: str, d: str, t: float) -> str:
    c = changed.get(p, {}).get(f"{d}@{temperature_key(t)}")
    return f"{100 * c['changed']:.0f}" if c else "n/a"


def table2(rates: dict, estimates: dict, datasets: list[str]) -> Table:
    """The probe paper's Table 2 columns for the base model (the collab part adds the trained models)."""
    names = [d for d in TABLE2 if d in datasets]
    at = temperature_key(TABLE2_TEMPERATURE)

    def row(name: str, cell) -> list:
        return [name, *[repro.interval_cell(cell(d)) for d in names]]

    return Table(
        "Table 2 (base model): genuine follow-up rate of SmolLM2-135M-Instruct on the held-out sets (%, 95% "
        "intervals clustered by item); MT-Bench stands in for Coval, which is not available offline",
        ["estimate", *[TABLE2[d] for d in names]],
        [row(f"raw, T={TABLE2_TEMPERATURE}", lambda d: rates.get(d, {}).get(at, {}).get("none")),
         row("raw, every turn of the part", lambda d: estimates[d].get("raw")),
         row("judge-corrected, every turn", lambda d: estimates[d].get("corrected")),
         row("generic floor, every turn", lambda d: estimates[d].get("generic_floor"))],
    )  # fmt: skip


def accuracy_table(accuracy: dict, rows: list[dict], rates: dict, datasets: list[str], hot: float) -> Table:
    """Tables 3 and 5: answer accuracy beside the follow-up rate, and the rate split by whether the answer was
    right (unperturbed turns of every temperature)."""
    from fic.followup_summary import raw_rate

    def split(d: str, flag: bool) -> str:
        group = [r for r in rows if r["dataset"] == d and r["perturbation"] == "none" and r.get("correct") is flag]
        return repro.rate_cell(raw_rate(group)) if group else "n/a"

    return Table(
        "Tables 3 and 5: answer accuracy beside the genuine follow-up rate (%, 95% intervals clustered by item); the "
        "rate when the answer was right and wrong pools the unperturbed turns of every temperature",
        ["dataset", "answer accuracy", "follow-up T=0", f"follow-up T={hot}", "follow-up, answer right",
         "follow-up, answer wrong"],
        [[d, _accuracy(accuracy.get(d)), repro.interval_cell(rates.get(d, {}).get(temperature_key(0.0), {}).get("none")),
          repro.interval_cell(rates.get(d, {}).get(temperature_key(hot), {}).get("none")), split(d, True),
          split(d, False)] for d in datasets],
    )  # fmt: skip


def power_table(differences: dict, datasets: list[str], hot: float) -> Table:
    return Table(
        f"T={hot} against greedy: the paired difference of the unperturbed rate (points, 95% cluster-bootstrap "
        f"interval over items, p) and the minimum detectable effect ({MDE_NOTE}, 2.8 standard errors); an effect "
        "is claimed only where the interval excludes 0",
        ["dataset", f"T={hot} - T=0", "items", "minimum detectable effect (points)", "reading"],
        [[d, points(c) if c else "n/a", c.get("n_items"), mde_cell(c),
          effect_reading(c)] for d in [*datasets, "pooled"] for c in [differences[d]["temperature"]]],
    )  # fmt: skip


def mde_cell(cell: dict) -> str:
    if not cell or cell["diff"] is None:
        return "n/a"
    return f"{100 * cell['mde']:.0f}" if cell["mde"] else "n/a (the interval has no width)"


def failure_modes(rows: list[dict]) -> dict:
    """Label shares of the unperturbed turns of every temperature: pooled over datasets with an item-clustered
    interval, and per dataset. `{"pooled": {label: {rate, low, high, n, n_items}}, "by_dataset": {d: {label: share}}}`."""
    from fic.estimates import cluster_rate

    kept = [r for r in rows if r["perturbation"] == "none" and r.get("label")]
    labels = sorted({r["label"] for r in kept})
    items = [(r["dataset"], str(r["item_id"])) for r in kept]
    pooled = {x: cluster_rate([r["label"] == x for r in kept], items) for x in labels}
    by_dataset: dict[str, dict[str, float]] = {}
    for d in sorted({r["dataset"] for r in kept}):
        group = [r["label"] for r in kept if r["dataset"] == d]
        by_dataset[d] = {x: group.count(x) / len(group) for x in labels}
    return {"pooled": {x: {k: c[k] for k in ("rate", "low", "high", "n", "n_items")} for x, c in pooled.items()},
            "by_dataset": by_dataset}  # fmt: skip


def failure_modes_table(modes: dict, datasets: list[str]) -> Table:
    names = [d for d in datasets if d in modes["by_dataset"]]
    return Table(
        "Table 6: failure modes, pooled over datasets and temperatures (% of unperturbed turns, 95% interval "
        "clustered by item), with each dataset's share",
        ["label", "pooled", *names],
        [[x, repro.interval_cell(c), *[f"{100 * modes['by_dataset'][d].get(x, 0.0):.1f}" for d in names]]
         for x, c in modes["pooled"].items()],
    )  # fmt: skip


def estimates_table(estimates: dict) -> Table:
    return Table(
        "Estimates per dataset, pooled over every turn of the part: raw (item-clustered), judge-corrected "
        "(Rogan-Gladen) and the generic floor (share still judged genuine after the answer is swapped for another "
        "item's), % with 95% intervals",
        ["dataset", "raw", "corrected", "generic floor", "turns", "items"],
        [[d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")),
          repro.interval_cell(e.get("generic_floor")), (e.get("raw") or {}).get("n"),
          (e.get("raw") or {}).get("n_items")] for d, e in estimates.items()],
    )  # fmt: skip


def draw_figure(path: Path, rates: dict, datasets: list[str], temps: list[float]) -> None:
    """Figures 1 and 4: the unperturbed genuine rate against temperature, one line per dataset, with its 95%
    item-clustered interval as error bars (a PNG, matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, d in enumerate(datasets):
        cells = [(float(t), rates.get(d, {}).get(temperature_key(t), {}).get("none")) for t in temps]
        cells = [(t + 0.01 * (k - len(datasets) / 2), c) for t, c in cells if c and c.get("rate") is not None]
        if not cells:
            continue
        x = [t for t, _ in cells]
        y = [100 * c["rate"] for _, c in cells]
        err = [[100 * (c["rate"] - c["low"]) for _, c in cells], [100 * (c["high"] - c["rate"]) for _, c in cells]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=d)
    ax.set_xlabel("user-turn sampling temperature")
    ax.set_ylabel("genuine follow-up rate (%)")
    ax.set_title("Genuine follow-up rate vs temperature (95% intervals)")
    ax.set_xticks([float(t) for t in temps])
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _accuracy(cell: dict | None) -> str:
    if not cell or cell.get("accuracy") is None:
        return "n/a (no checker)"
    return f"{100 * cell['accuracy']:.1f}% of {cell['n']}"
