"""The collab part's tables (`tables`), rendered from the section's summary and the figures `collab_figures.figures`
computed: the held-out rates and differences, the per-seed table, the generic floors, the dev choices, the calibrated
figures, the readers' floor, the judge's labels, signs of judge gaming, the RL reward curve and the turns shown."""

from __future__ import annotations

from pathlib import Path

import repro
from collab_figures import filtered
from collab_labels import UNKNOWN
from collab_settings import (
    DATASETS,
    IFBENCH,
    LABELLED_SEED,
    NAMES,
    REPORTED,
    SETTINGS,
    TRAINED,
    TRAINING_JUDGE,
    point_key,
    run_name,
)


def tables(out: Path, summary: dict, m: dict, models: list[str], seeds: list[int],
           labelled_rise: dict) -> list[repro.Table]:  # fmt: skip
    """The section's tables in the report's order, from its `summary` and `collab_figures.figures` (`m`): `models` are
    the probed models, `seeds` the training seeds, `labelled_rise` each trained model's generic-floor rise on the
    labelled seed per dataset."""
    p, g = SETTINGS["probe"], SETTINGS["gsm8k"]
    multi = len(seeds) > 1
    temps = ", ".join(map(str, p["temperatures"]))
    measured = bool(g["models"])  # GSM8K accuracy: SCALE=gpu only
    hb = {k: c["healthbench"] for k, c in m["cells"].items()}
    mtb = {k: c["mt_bench"] for k, c in m["cells"].items()}
    ifb = {k: c[IFBENCH] for k, c in m["cells"].items()}
    acc_only = summary["gsm8k_accuracy"]
    n_hb, n_mtb = summary["heldout"]["healthbench_contexts"], summary["heldout"]["mt_bench_contexts"]
    tuning, rl_tuning = summary["hyperparameters"], summary["rl"]["hyperparameters"]
    chosen = tuning["chosen"]
    sft_note, rl_note = recorded_note(tuning), recorded_note(rl_tuning)
    n_rows = summary["sft"]["train_data"]["rows"]
    estimates, differences = summary["estimates"], summary["differences"]
    calibrated, cal_diffs, readers = summary["calibrated"], summary["calibrated_differences"], summary["readers"]
    curve = summary["rl"]["reward_curve"]
    n_if = summary["heldout"]["ifbench_items"]
    main = repro.Table(
        caption=f"Held-out genuine follow-up rate (%, 95% interval clustered by context, n turns) at T={temps}"
                + (f"; each trained model pooled over its {len(seeds)} training seeds, the interval resampling seeds "
                   "and contexts" if multi else "")
                + (", and GSM8K accuracy" if measured else " (GSM8K accuracy not measured at SCALE=cpu)")
                + "; IFBench items outside the judge's fit in a column of their own",
        columns=["model", f"HealthBench multi-turn ({n_hb} contexts)", f"MT-Bench held-out ({n_mtb} contexts)",
                 *([f"GSM8K test accuracy (n={g['limit']})"] if measured else []), f"IFBench ({n_if} items)"],
        rows=[[NAMES[k], repro.rate_cell(hb[k]), repro.rate_cell(mtb[k]),
               *(["not measured" if k not in acc_only or acc_only[k]["accuracy"] is None
                  else f"{100 * acc_only[k]['accuracy']:.1f}"] if measured else []), repro.rate_cell(ifb[k])]
              for k in models],
    )  # fmt: skip
    arm_table = repro.Table(
        caption=f"SFT data arms of the same budget ({n_rows} rows, {chosen['max_steps']} steps, learning rate "
                f"{chosen['learning_rate']:g}): raw, judge-corrected and generic-floor rate (%), and the paired "
                "difference from the base model on the same held-out contexts (points, 95% cluster-bootstrap "
                "interval, p); an effect is claimed only where the interval excludes 0"
                + (f"; each arm pooled over its {len(seeds)} training seeds, every interval resampling seeds and "
                   "contexts together (the base model is one model)" if multi else "")
                + "; overall pools HealthBench and MT-Bench, IFBench is reported apart",
        columns=["arm", "dataset", "raw", "corrected", "generic floor", "difference from base"],
        rows=[[NAMES[a], d, repro.interval_cell(e["raw"]), repro.interval_cell(e["corrected"]),
               repro.interval_cell(e["generic_floor"]), (e["vs_base"] or {}).get("reading", "n/a")]
              for a, entry in summary["arms"].items()
              for d, e in [*((d, entry["by_dataset"][d]) for d in DATASETS), ("overall", entry["overall"]),
                           (IFBENCH, entry["by_dataset"][IFBENCH])]],
    )  # fmt: skip
    compared = repro.Table(
        caption="Each trained model against the base model on the same held-out contexts: the paired difference of the "
                "genuine rate (points, 95% cluster-bootstrap interval over contexts, p); an effect is claimed only "
                "where the interval excludes 0"
                + (f"; trained models pooled over {len(seeds)} training seeds, seeds and contexts resampled together"
                   if multi else ""),
        columns=["model", "dataset", "difference from base"],
        rows=[[NAMES[k], d, (differences[k]["by_dataset"].get(d) or {}).get("reading", "n/a")]
              for k in differences for d in REPORTED],
    )  # fmt: skip
    floors = repro.Table(
        caption="Raw rate, judge-corrected rate (Rogan-Gladen, from the judge's error on labelled held-out turns) and "
                "generic floor (share still judged genuine after the context's answer is swapped for another "
                "context's), %, 95% intervals, for every model"
                + (f" (trained models pooled over {len(seeds)} training seeds, seeds and contexts resampled)" if multi
                   else ""),
        columns=["model", "dataset", "raw", "corrected", "generic floor"],
        rows=[[NAMES[k], d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")),
               repro.interval_cell(e.get("generic_floor"))] for k, by in estimates.items() for d, e in by.items()],
    )  # fmt: skip
    grid = repro.Table(
        caption=f"SFT learning rate and steps chosen on dev contexts (never the held-out ones){sft_note}: each grid "
                f"point trained "
                f"on {tuning['trained_on']['rows']} rows (a third of each arm) and probed on the dev contexts, "
                f"{tuning['dev']['samples']} turns per context; score = dev rate - dev generic floor (%)",
        columns=["learning rate", "steps", "dev rate", "dev generic floor", "score", "chosen"],
        rows=[["base model", "-", repro.rate_cell(tuning["dev"]["base"]["raw"]),
               repro.interval_cell(tuning["dev"]["base"]["generic_floor"]),
               f"{100 * tuning['dev']['base']['score']:.1f}", ""]]
             + [[f"{pt['learning_rate']:g}", pt["max_steps"], repro.rate_cell(pt["raw"]),
                 repro.interval_cell(pt["generic_floor"]), f"{100 * pt['score']:.1f}",
                 "yes" if point_key(pt) == point_key(chosen) else ""] for pt in tuning["points"]],
    )  # fmt: skip
    rl_chosen = rl_tuning["chosen"]
    rl_grid = repro.Table(
        caption=f"Follow-up RL learning rate chosen on the same dev contexts (never the held-out ones){rl_note}: one "
                f"RL run per rate (the recipe's {SETTINGS['rl_recipe']} otherwise, with "
                f"{', '.join(rl_tuning['overrides'])}), "
                "probed on dev; score = dev rate - dev "
                "generic floor (%)",
        columns=["learning rate", "dev rate", "dev generic floor", "score", "chosen"],
        rows=[[f"{pt['learning_rate']:g}", repro.rate_cell(pt["raw"]), repro.interval_cell(pt["generic_floor"]),
               f"{100 * pt['score']:.1f}", "yes" if point_key(pt) == point_key(rl_chosen) else ""]
              for pt in rl_tuning["points"]],
    )  # fmt: skip
    calib = repro.Table(
        caption="Calibrated (prediction-powered) rate from blind labels of about 30 held-out turns per model (%, 95% "
                "interval), beside the judge's raw rate; without labels, the command that writes them"
                + (f"; a trained model's labels and raw rate are of training seed {LABELLED_SEED}, the seed whose "
                   "turns were labelled" if multi else ""),
        columns=["model", "labels", "raw (judge)", "calibrated: HealthBench", "calibrated: MT-Bench",
                 "calibrated: overall", "to label"],
        rows=[[NAMES[k], c["status"], repro.interval_cell(m["labelled_estimates"][k]["overall"].get("raw")),
               *[repro.interval_cell((c.get("by_dataset") or {}).get(d)) for d in DATASETS],
               repro.interval_cell(c.get("overall")), "" if c["n_labels"] else f"`{c['command']}`"]
              for k, c in calibrated.items()],
    )  # fmt: skip
    shares = _label_shares(out, models, seeds)
    label_names = sorted({lab for by in shares.values() for d in by.values() for lab in d})
    labels = repro.Table(
        caption="Judge labels of the held-out turns (% of turns per model and dataset)"
                + (f"; a trained model's turns of all {len(seeds)} training seeds" if multi else ""),
        columns=["model", "dataset", *label_names],
        rows=[[NAMES[k], d, *[f"{100 * v.get(lab, 0.0):.1f}" for lab in label_names]]
              for k, by in shares.items() for d, v in by.items()],
    )  # fmt: skip
    stats = repro.Table(
        caption="Signs of judge gaming in the held-out turns: mean words, share of distinct turns, share ending in '?', "
                "and the most common turn with its share",
        columns=["model", "dataset", "mean words", "distinct", "ends in ?", "most common turn", "its share"],
        rows=[[_run_label(k), d, s.get("mean_words"), s.get("distinct"), s.get("asks"), s.get("top_turn"),
               s.get("top_share")]
              for k, v in summary["turn_stats"].items() for d, s in v.items()],
    )  # fmt: skip
    reward = repro.Table(
        caption=f"Follow-up RL reward curve (GRPO, reward from the `{TRAINING_JUDGE}` judge, contrastive; per logged step)"
                + (f", training seed {LABELLED_SEED} (every seed's first and last quarter: the paragraph on training seeds)"
                   if multi else ""),
        columns=["step", "mean reward", "reward std", "genuine share", "mean completion tokens"],
        rows=[[c["step"], c.get("reward"), c.get("reward_std"), c.get("followup/genuine_rate"),
               c.get("completions/mean_length")] for c in curve],
    )  # fmt: skip
    shown = repro.Table(
        caption="Held-out user turns of every trained model (5 per dataset), judged by the validated judge (end of the "
                "context shown; judge-gaming check)" + (f"; training seed {LABELLED_SEED}" if multi else ""),
        columns=["model", "dataset", "item", "end of the assistant answer", "model's user turn", "judge label"],
        rows=[[NAMES[k], r["dataset"], str(r["item_id"])[:10], _short(r["messages"][-1]["content"], 100),
               " ".join(r["user_turn"].split())[:200], r["label"]]
              for k in models if k != "base" for r in _shown_turns(out / f"probe_{k}")],
    )  # fmt: skip
    one = m["labelled_differences"]
    cal_table = repro.Table(
        caption="Each trained model against the base model, read by blind readers: the calibrated (PPI++) difference "
                "paired by context (points, 95% interval, p), beside the judge's difference and the rise in generic "
                "floor; fewer than 10 labelled contexts (HealthBench: 9) are not estimable"
                + (f"; every figure here is of training seed {LABELLED_SEED}, the seed whose turns were labelled "
                   "(the judge's pooled figures are in the tables above)" if multi else ""),
        columns=["model", "dataset", "judge: difference from base", "calibrated: difference from base",
                 "generic floor rise (points)"],
        rows=[[NAMES[k], d, ((one[k]["overall"] if d == "overall" else one[k]["by_dataset"].get(d))
                             or {}).get("reading", "n/a"),
               (((cal_diffs.get(k) or {}).get("overall") if d == "overall"
                 else ((cal_diffs.get(k) or {}).get("by_dataset") or {}).get(d)) or {}).get("reading", "no labels"),
               "n/a" if labelled_rise[k][d] is None else f"{100 * labelled_rise[k][d]:+.1f}"]
              for k in one for d in (*DATASETS, "overall")],
    )  # fmt: skip
    return [
        main,
        arm_table,
        compared,
        *([seeds_table(m, differences, seeds)] if multi else []),
        floors,
        grid,
        rl_grid,
        calib,
        cal_table,
        *([readers_table(readers)] if readers["measured"] else []),
        labels,
        stats,
        reward,
        shown,
    ]


def _shown_turns(folder: Path, per_dataset: int = 5) -> list[dict]:
    """Held-out turns of a probe: the first sample of each context first, then the next samples, `per_dataset` each."""
    rows = repro.read_jsonl(folder / "samples.jsonl")
    shown = []
    for dataset in DATASETS:
        t = float(SETTINGS["probe"]["temperatures"][0])
        mine = [r for r in rows if r["dataset"] == dataset and r["perturbation"] == "none" and r["temperature"] == t]
        mine.sort(key=lambda r: (r["sample"], str(r["item_id"])))
        shown += mine[:per_dataset]
    return shown


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else "..." + text[-n:]


def _name(model: str, seed: int | None = None) -> str:
    return NAMES[model] if seed is None or seed == LABELLED_SEED else f"{NAMES[model]}, seed {seed}"


def _run_label(run: str) -> str:
    """A run's name for a table: `SFT: real follow-ups` (the labelled seed, or the base model), `..., seed 1`."""
    for k in ("base", *TRAINED):
        if run == k:
            return NAMES[k]
        if run.startswith(f"{k}_seed") and run[len(k) + 5 :].isdigit():
            return _name(k, int(run[len(k) + 5 :]))
    return run


def _label_shares(out: Path, models: list[str], seeds: list[int]) -> dict:
    """Per model and dataset (the held-out ones, then IFBench), the share of each judge label among its turns at the
    probe temperature, unperturbed: every training seed's turns of a trained model."""
    from fic.metrics import label_distribution

    shares = {}
    for k in models:
        runs = [run_name(k, s) for s in (seeds if k != "base" else [None])]
        rows = {kind: [r for run in runs for r in repro.read_jsonl(out / f"{kind}_{run}" / "samples.jsonl")]
                for kind in ("probe", "ifbench")}  # fmt: skip
        shares[k] = {}
        for d in REPORTED:
            cell = filtered(rows["ifbench" if d == IFBENCH else "probe"], d, cell=True)
            if cell:
                shares[k][d] = label_distribution([r["label"] for r in cell])
    return shares


def seeds_table(m: dict, differences: dict, seeds: list[int]) -> repro.Table:
    """Each trained model at each training seed: its raw rate and its difference from the base model (one seed each,
    item-clustered, as a one-seed run reports them), the sd over seeds, and the pooled difference whose interval
    resamples seeds and contexts."""

    def pct(x: float | None, sign: bool = False) -> str:
        return "n/a" if x is None else (f"{100 * x:+.1f}" if sign else f"{100 * x:.1f}")

    def sd(cell: dict | None) -> str:
        return "n/a" if cell is None else f"{100 * cell['sd']:.1f}"

    rows = []
    for k, per_seed in m["per_seed"].items():
        for g in (*DATASETS, "overall", IFBENCH):
            pooled = differences[k]["overall"] if g == "overall" else differences[k]["by_dataset"].get(g)
            few = next((repro.few_clusters(r["raw"][g]) for r in per_seed if repro.few_clusters(r["raw"][g])), None)
            rows.append([NAMES[k], g, few or " / ".join(pct((r["raw"][g] or {}).get("rate")) for r in per_seed),
                         "n/a" if few else sd(m["spread"][k][g]["raw"]),
                         " / ".join(pct((r["vs_base"].get(g) or {}).get("diff"), True) for r in per_seed),
                         sd(m["spread"][k][g]["vs_base"]), (pooled or {}).get("reading", "n/a")])  # fmt: skip
    return repro.Table(
        caption=f"Trained models at each training seed ({' / '.join(map(str, seeds))}): the judge's raw rate (%) and "
        "the paired difference from the base model (points; HealthBench's 9 contexts are not estimable), "
        "with their sd over the seeds, beside the pooled difference whose 95% interval resamples seeds and "
        "contexts together (Holm-adjusted over the trained models on overall)",
        columns=[
            "model",
            "dataset",
            "raw rate per seed",
            "sd over seeds",
            "difference from base per seed",
            "sd over seeds",
            "pooled difference (seeds and contexts resampled)",
        ],
        rows=rows,
    )


READINGS = {"counted": "counted genuine", "not_counted": "not counted"}


def _rate_text(cell: dict | None) -> str:
    """`12.5 [5.0, 20.1] n=40` (%) of a `fic.reader_floor.reader_rate`, or its note (not estimable under 10 items)."""
    if not cell:
        return "n/a"
    if cell.get("rate") is None:
        return cell.get("note") or "n/a"
    return f"{100 * cell['rate']:.1f} [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}] n={cell['n']}"


def _points_text(cell: dict | None) -> str:
    """`+12.0 points [+3.1, +20.9], p=0.01` of a difference `{diff, low, high, p}`, or its note."""
    if not cell:
        return "n/a"
    if cell.get("diff") is None:
        return cell.get("note") or "n/a"
    return f"{100 * cell['diff']:+.1f} points [{100 * cell['low']:+.1f}, {100 * cell['high']:+.1f}], p={cell['p']:.2f}"


def readers_table(readers: dict) -> repro.Table:
    """The readers' generic floor (`collab_labels.reader_figures`): per model and reading, their genuine rate on the
    real turns, on the foil turns and the difference; per trained model, the readers' gain over the base model, the
    rise of their floor and the gain minus that rise (Holm-adjusted over the trained models)."""
    unknown = "unknown: the labels carry no context_free flag"
    no_pair = "n/a: needs real and foil labels of this model and the base model"
    rows = []
    for k, m in readers["models"].items():
        for reading, words in READINGS.items():
            r = m.get(reading)
            if isinstance(r, dict):
                own = [_rate_text(r["genuine"]), _rate_text(r["floor"]) if r["floor"] else "no foil labels",
                       _points_text(r["floor_subtracted"]) if r["floor_subtracted"] else "n/a"]  # fmt: skip
            else:
                own = [unknown if r == UNKNOWN else "no labels"] * 3
            d = (readers["differences"].get(k) or {}).get(reading)
            if k == "base":
                vs = ["-"] * 3
            elif isinstance(d, dict):
                vs = [d[stat]["reading"] for stat in ("gain", "floor_rise", "floor_subtracted_gain")]
            else:
                vs = [unknown if d == UNKNOWN else no_pair] * 3
            where = f"{m['n_real']} real; foils: {m['foil_labels']['status']}" if reading == "counted" else ""
            who = m.get("annotators")
            if where and who and not who["same"]:
                where += (f"; real and foil turns labelled by other annotators (real: {', '.join(who['real'])}; "
                          f"foils: {', '.join(who['foils'])})")  # fmt: skip
            rows.append([NAMES[k], words, where, *own, *vs])
    return repro.Table(
        caption="The readers' generic floor: blind readers' genuine rate on each model's labelled held-out turns, on "
                "its foil turns (a turn the model wrote, shown after another context's conversation, mixed unmarked "
                "into the same session) and the difference (%, 95% intervals clustered by context); against the base "
                "model, paired by context, the readers' gain, the rise of their floor and the gain minus that rise "
                "(points, 95% item-bootstrap interval, p, Holm-adjusted over the trained models); context-free "
                "requests counted genuine (the guideline's label) and not counted; under 10 labelled contexts not "
                "estimable",
        columns=["model", "context-free requests", "labels", "readers: genuine (real turns)", "readers' floor (foils)",
                 "floor-subtracted", "gain over base", "floor rise over base", "gain minus floor rise"],
        rows=rows,
    )  # fmt: skip


def recorded_note(tuning: dict) -> str:
    """Where a recorded choice (`recorded_choice`) was made, for the report; empty for a choice made in this run."""
    rec = tuning.get("recorded")
    if not rec:
        return ""
    return (f" in the run at commit {rec['commit']} (recorded in {rec['file']}; this run trains only the chosen "
            "point, for time; SCALE=gpu reruns the choice)")  # fmt: skip
