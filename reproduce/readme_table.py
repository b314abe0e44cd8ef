#!/usr/bin/env python
"""The README's `make reproduce` results table, written from the committed summary.

    python reproduce/readme_table.py

prints the Markdown block that the README's "Reproducing the papers on CPU" section holds (`tests/test_readme.py`
checks that the README contains exactly this block), so every number of that table is read from
`reproduce/results/summary.json`, the last fresh-clone `make reproduce`. The reading column states an effect only
where its 95% interval excludes 0 and otherwise says "no detectable effect at this size", with the minimum
detectable effect where the summary has one. After a new run, copy its summary there and paste this output into
the README. Plain json, no torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from repro import few_clusters, judge_transfer, transfer_text

RESULTS = Path(__file__).resolve().parent / "results"
SUMMARY = RESULTS / "summary.json"
NAMES = {"gsm8k": "GSM8K", "mt_bench": "MT-Bench", "healthbench": "HealthBench", "ifbench": "IFBench",
         "ifeval": "IFEval", "pooled": "pooled"}  # fmt: skip
ARMS = {"real": "real follow-ups", "template_unfiltered": "template, unfiltered",
        "template_filtered": "template, judge-filtered", "rl": "follow-up RL"}  # fmt: skip


def _rate(c: dict) -> str:
    """`12% [5, 24]` of a rate `{rate, low, high}`; "not estimable: ..." under 10 items."""
    return few_clusters(c) or f"{100 * c['rate']:.0f}% [{100 * c['low']:.0f}, {100 * c['high']:.0f}]"


def _points(d: dict) -> str:
    """`-4.7 points [-12.0, +2.3]` of a paired difference `{diff, low, high}`."""
    return f"{100 * d['diff']:+.1f} points [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _ratio(r: dict) -> str:
    return f"{r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"


def detectable(d: dict) -> bool:
    """An effect is stated only where the interval of the difference excludes 0 and, for a difference read in a family
    of comparisons (the collab arms against the base model), its Holm-adjusted p is under 0.05."""
    if "detectable_holm" in d:
        return bool(d["detectable_holm"])
    return d["low"] > 0 or d["high"] < 0


def reading(d: dict) -> str:
    """`detectable` or `no detectable effect at this size (minimum detectable effect N points)`."""
    if detectable(d):
        return "detectable"
    mde = f" (minimum detectable effect {100 * d['mde']:.0f} points)" if d.get("mde") else ""
    return f"no detectable effect at this size{mde}"


def _minutes(s: dict, part: str) -> str:
    return f"{s['minutes_per_part'][part]:.1f} min"


def _probe(s: dict) -> tuple[str, str]:
    probe = s["probe"]
    diffs = probe["differences"]
    datasets = [d for d in NAMES if d in probe and d != "pooled"]
    temps = sorted(probe[datasets[0]], key=float)
    cold, hot = temps[0], temps[-1]
    n_items = sorted({probe[d][cold]["none"]["n_items"] for d in datasets})
    per_item = sorted({probe[d][hot]["none"]["n"] // probe[d][hot]["none"]["n_items"] for d in datasets})
    result = (
        f"genuine follow-up rate at T={float(cold)}: "
        + ", ".join(f"{NAMES[d]} {_rate(probe[d][cold]['none'])}" for d in datasets)
        + f"; at T={float(hot)}: " + ", ".join(_rate(probe[d][hot]["none"]) for d in datasets)
        + f" ({'/'.join(map(str, n_items))} items per dataset outside the judge's fit, 1 turn per item at T=0 and "
        f"{'/'.join(map(str, per_item))} at T > 0). T={float(hot)} - T={float(cold)}, paired and item-clustered: "
        + ", ".join(f"{NAMES[d]} {_points(diffs[d]['temperature'])}" for d in [*datasets, "pooled"])
        + ". Controls at T=0, pooled: "
        + ", ".join(f"{name.split('@')[0]} {_points(d)}" for name, d in diffs["pooled"]["controls"].items())
    )  # fmt: skip
    moved = [d for d in [*datasets, "pooled"] if detectable(diffs[d]["temperature"])]
    pooled = diffs["pooled"]["temperature"]
    text = (f"temperature: {reading(pooled)} pooled" if not moved
            else "temperature: detectable on " + ", ".join(NAMES[d] for d in moved))  # fmt: skip
    if moved and "pooled" not in moved:
        text += f"; pooled {reading(pooled)}"
    controls = diffs["pooled"]["controls"]
    moved_controls = [name.split("@")[0] for name, d in controls.items() if detectable(d)]
    text += "; controls: " + (", ".join(moved_controls) + " detectable" if moved_controls
                              else "no detectable effect at this size")  # fmt: skip
    return result, text


def _judge(s: dict) -> tuple[str, str]:
    """The judge row: its agreement with blind labels on turns outside every fit (the transfer table), SmolLM2's and
    trained models', with intervals over items."""
    t = s["judge"].get("transfer")
    if t is None:  # a summary written before judge_about carried the transfer figures: the same file's figures
        t = judge_transfer(s["judge"]["kind"])
    result = f"`{s['judge']['name']}` judge vs blind labels on turns outside every fit: {transfer_text(t)}"
    return result, "Table 7 (test split) in the report; transfer: labels/followup/judge_calibration.json"


def _collab_row(s: dict, model: str) -> tuple[str, str]:
    c = s["collab"]
    overall = c["differences"][model]["overall"]
    raw = c["estimates"][model]["overall"]["raw"]
    base = c["estimates"]["base"]["overall"]["raw"]
    cal, cal_base = c["calibrated"][model], c["calibrated"]["base"]
    result = (f"judge: {_rate(base)} (base) -> {_rate(raw)}, {_points(overall)} on "
              f"{overall['n_items']} held-out contexts")  # fmt: skip
    if cal.get("overall") and cal_base.get("overall"):
        result += (f"; calibrated by {cal['n_labels']} blind labels: {_rate(cal_base['overall'])} (base) -> "
                   f"{_rate(cal['overall'])}")  # fmt: skip
    else:
        result += f"; calibrated: {cal['status']}"
    paired = ((c.get("calibrated_differences") or {}).get(model) or {}).get("overall")
    if paired and paired.get("diff") is not None:
        rise = (c.get("floor_rise") or {}).get(model, {}).get("overall")
        result += (f", paired by context {_points(paired)}"
                   + ("" if rise is None else f" (the judge's generic floor {100 * rise:+.1f} points)"))  # fmt: skip
    readers = _readers(c, model)
    if readers:
        result += (f"; blind readers with foils mixed in: gain {_points(readers['gain'])}, their floor "
                   f"{100 * readers['floor_rise']['diff']:+.1f} points, gain minus floor rise "
                   f"{_points(readers['floor_subtracted_gain'])}")  # fmt: skip
    if model == "rl":
        hp = c["rl"]["hyperparameters"]
        result += f"; learning rate {hp['chosen']['learning_rate']:g} chosen on dev from {hp['grid']['learning_rate']}"
    judge = "judge: " + ("detectable" if detectable(overall) else "no detectable effect at this size")
    if paired and paired.get("diff") is not None:
        judge += "; calibrated: " + ("detectable" if detectable(paired) else "no detectable difference")
    elif cal.get("overall") and cal_base.get("overall"):  # a summary from before the paired calibrated difference
        lo, hi = cal["overall"], cal_base["overall"]
        apart = lo["low"] > hi["high"] or lo["high"] < hi["low"]
        judge += "; calibrated intervals " + ("apart" if apart else "overlap (no detectable difference)")
    if readers:
        judge += "; readers minus their floor: " + (
            "detectable" if detectable(readers["floor_subtracted_gain"]) else "no detectable difference"
        )
    return result, judge


def _readers(c: dict, model: str) -> dict | None:
    """The blind readers' reading of a trained model against the base model with context-free requests counted
    genuine (`collab.readers.differences`, `fic.reader_floor.reader_difference`): their gain, the rise of their own
    floor on foil turns and the gain minus that rise (Holm-adjusted over the trained models); None where the readers
    labelled no foils or under 10 items."""
    d = (((c.get("readers") or {}).get("differences") or {}).get(model) or {}).get("counted")
    if not isinstance(d, dict) or d["floor_subtracted_gain"]["diff"] is None:
        return None
    return d


def _vasd_recovery(r: dict) -> tuple[str, str]:
    """The recovery cell and the name of its target. Recovery is the share of the multi-turn gap closed
    (`fic.metrics.recovery`); a summary written before that definition holds P_sharded(after) / P_full(before)
    under `ratio`, and is shown under that name, never as recovery."""
    if "ratio" in r:
        return (f"P_sharded(after) / P_full(before) {_ratio(r['ratio'])} (target {r['target']:.2f}, the paper's "
                "ratio)", "ratio target")  # fmt: skip
    if r["estimate"] is None:
        return f"recovery n/a ({r['reason']})", "recovery target"
    cell = f"{r['estimate']:.2f}" + ("" if r["low"] is None else f" [{r['low']:.2f}, {r['high']:.2f}]")
    target = "n/a" if r["target"] is None else f"{r['target']:.2f}"
    paper = r["paper_sharded_over_full"]
    return (f"recovery {cell} of the sharded gap closed, seeds and tasks resampled (target {target}: the paper's "
            f"P_sharded >= {paper:g} x P_full at these before scores)", "recovery target")  # fmt: skip


def _vasd_config(t: dict) -> str:
    """The training configuration the dev grid chose (`lora-r16-lr1e-3`, from the recipe with its overrides); a summary
    from before the grid chose `single_turn_mix` only."""
    if "config" in t:
        return f"configuration `{t['config']}` ({', '.join(t['overrides']) or 'the recipe as it is'})"
    return f"`single_turn_mix` {t['single_turn_mix']:g}"


def _kept(d: dict) -> str:
    """A single-turn view after VASD: kept (lower end within the margin), a drop (the interval below 0), or neither."""
    if d["kept"]:
        return "kept"
    return "drops (interval below 0)" if d["high"] < 0 else "no drop detected, not shown kept"


def _vasd(s: dict) -> tuple[str, str]:
    t, a = s["vasd"]["test"], s["vasd"]["ablation"]
    kept, ctrl = t["kept"], a["vasd_minus_self_sft"]
    recovery, target_name = _vasd_recovery(t["recovery"])
    result = (
        f"on {t['n']} test tasks never used for a choice, {len(t['seeds'])} seeds each for VASD and self-SFT, "
        f"{_vasd_config(t)} chosen on dev: {recovery}; SHARDED {_points(t['sharded_gain'])}, FULL "
        f"{_points(kept['full'])}, CONCAT {_points(kept['concat'])}; VASD - self-SFT (same budget) on SHARDED "
        f"{_points(ctrl['sharded'])}"
    )  # fmt: skip
    met = t["recovery"]["met"]
    text = (f"{target_name} {'met' if met else 'not met'}; "
            + ", ".join(f"{view.upper()} {_kept(kept[view])}" for view in ("full", "concat"))
            + f"; distillation vs self-SFT: {reading(ctrl['sharded'])}")  # fmt: skip
    return result, text


def _clarify(s: dict) -> tuple[str, str]:
    c = s["clarify"]

    def regret(policy: str) -> str:
        cells = [c[scenario][policy]["clustered"]["regret"] for scenario in ("products", "ambigqa")]
        episodes = c["products"][policy]["clustered"]["n_episodes"]
        # under fic.estimates.MIN_CLUSTERS episodes the clustered mean is not estimable: "n/e"
        return (" / ".join("n/e" if r["mean"] is None else f"{r['mean']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
                           for r in cells) + f" ({episodes} episodes)")  # fmt: skip

    faith = c["faithfulness"]["bag_items/bag"]
    auroc = faith["auroc_not_direct"]
    result = (
        f"regret (products / AmbigQA, intervals clustered by episode): SmolLM2 {regret('model')}, always-ask "
        f"{regret('always_ask')}, BAG {regret('bag')}; BAG's belief (answer-grouped, K={faith['k']}, T="
        f"{c['belief_temperature']['chosen']:g} chosen on dev items): mean entropy "
        f"{faith['entropy_mean']:.3f} (ln K = {math.log(faith['k']):.3f}), {100 * faith['below_log_k']:.0f}% of "
        f"{faith['n']} items below ln K, AUROC for not answering directly "
        + (f"n/a ({auroc.get('note') or 'one class'})" if auroc["auroc"] is None
           else f"{auroc['auroc']:.2f} [{auroc['low']:.2f}, {auroc['high']:.2f}]")
    )  # fmt: skip
    test = c.get("routing_test")
    if test:
        result += (f"; clarified: BAG {test['bag']['clarify']}/{test['bag']['n']} items, prompt-only "
                   f"{test['prompt_only']['clarify']}/{test['prompt_only']['n']} (Fisher p = {test['fisher_p']:.3f})")  # fmt: skip
    carries = faith["below_log_k"] > 0 and auroc["auroc"] is not None and auroc["low"] > 0.5
    return result, ("belief carries detectable signal" if carries
                    else "belief: no detectable signal at this size")  # fmt: skip


def markdown(summary: dict) -> str:
    """The README block: one sentence naming the source, then the table."""
    rows = [
        ("probe", *_probe(summary), _minutes(summary, "probe")),
        ("judge", *_judge(summary), "(in probe)"),
        *[(f"collab: {ARMS[m]}", *_collab_row(summary, m), _minutes(summary, "collab") if m == "real" else "(in collab)")
          for m in ARMS],
        ("VASD", *_vasd(summary), _minutes(summary, "vasd")),
        ("clarify", *_clarify(summary), _minutes(summary, "clarify")),
    ]  # fmt: skip
    lines = [
        "From `reproduce/results/summary.json` (`python reproduce/readme_table.py` prints this table,",
        "`tests/test_readme.py` checks that the README holds it); rates in %, differences in points, 95% intervals:",
        "",
        "| part | result on SmolLM2-135M-Instruct | read on the intervals | time |",
        "|---|---|---|---|",
        *[f"| {part} | {result} | {text} | {time} |" for part, result, text, time in rows],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    print(markdown(json.loads(SUMMARY.read_text(encoding="utf-8"))), end="")


if __name__ == "__main__":
    main()
