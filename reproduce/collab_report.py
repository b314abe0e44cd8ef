"""The collab part's report: its summary.json entries, tables, targets and text (`build_section`) from what
`collab.run` measured.

A trained model at one training seed is read off its probes' summaries and `fic.followup_summary.compare`; at several
seeds every rate and difference from the base model pools the seeds, its interval resampling seeds and contexts
(`collab_seeds`), beside each seed's figures and their sd (`summary.seeds`). What the blind labels are read beside
(calibrated figures, the readers' floor, the targets) stays on the labelled seed (`LABELLED_SEED`), and says so.
IFBench items outside the judge's fit are a third dataset with rows of their own, never pooled into "overall"."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import repro
from collab_labels import (
    UNKNOWN,
    calibrated_differences,
    calibrated_rates,
    floor_rise,
    gain_target,
    reader_figures,
)
from collab_seeds import INTERVAL, pooled_difference, pooled_rate, spread
from collab_settings import (
    ARMS,
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


def _cell(summary: dict, dataset: str) -> dict | None:
    t = f"t{float(SETTINGS['probe']['temperatures'][0])}"
    return repro.rate_only(summary["genuine_rate"].get(dataset, {}).get(t, {}).get("none"))


def _turn_stats(folder: Path, dataset: str) -> dict:
    """Cheap signs of judge gaming in a probe's turns: mean words, share of distinct turns, share ending in '?'."""
    rows = [r for r in repro.read_jsonl(folder / "samples.jsonl") if r["dataset"] == dataset]
    turns = [r["user_turn"].strip() for r in rows]
    if not turns:
        return {}
    top, count = Counter(turns).most_common(1)[0]
    return {"mean_words": round(sum(len(t.split()) for t in turns) / len(turns), 1),
            "distinct": round(len(set(turns)) / len(turns), 3),
            "asks": round(sum(t.endswith("?") for t in turns) / len(turns), 3),
            "top_share": round(count / len(turns), 3), "top_turn": top[:120]}  # fmt: skip


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


KEEP = ("diff", "low", "high", "p", "n_items", "detectable", "reading")


def _differences(base: list[dict], other: list[dict]) -> dict:
    """`fic.followup_summary.compare(base, other)` with the fields summary.json keeps."""
    from fic.followup_summary import compare

    out = compare(base, other)
    return {"overall": {k: out["overall"][k] for k in KEEP} if out["overall"] else None,
            "by_dataset": {d: {k: c[k] for k in KEEP} for d, c in out["by_dataset"].items() if c}}  # fmt: skip


def _holm_overall(differences: dict) -> dict:
    """The arms' pooled differences from the base model as one family: each with its Holm-adjusted p
    (`fic.followup_summary.with_holm`); "detectable" is read on the adjusted p."""
    from fic.followup_summary import with_holm

    adjusted = with_holm({k: d.get("overall") for k, d in differences.items()})
    return {k: {**d, "overall": adjusted[k]} for k, d in differences.items()}


TRAINED_NOT_CORRECTED = (
    "no corrected rate: the judge's error rates were measured on SmolLM2's turns, and they do not transfer to a "
    "trained model's (fitted on SmolLM2's turns and scored on trained ones, kappa 0.17; labels/followup/README.md); "
    "the calibrated rate, from this model's own blind labels, is the trained arm's estimate"
)


def _estimates(summary: dict, model: str = "base", datasets: tuple[str, ...] = DATASETS) -> dict:
    """raw, corrected and generic floor per dataset and overall of one probe summary. A trained model's corrected
    rate is left out (`TRAINED_NOT_CORRECTED`): only the base model's turns measured the judge's errors."""
    out = {d: repro.estimate(summary["by_dataset"].get(d)) for d in datasets}
    out["overall"] = repro.estimate(summary.get("overall"))
    if model != "base":
        out = {
            d: {**e, "corrected": None, "corrected_note": TRAINED_NOT_CORRECTED} if e else e for d, e in out.items()
        }
    return out


def arm_entries(arms: dict, estimates: dict, differences: dict, trained: dict) -> dict:
    """`collab.arms`: per arm its rows and sources, training, and per dataset and overall the raw rate, corrected
    rate, generic floor and paired difference from the base model ({diff, low, high, p, ...})."""
    out = {}
    for arm in ARMS:
        groups = {}
        for d in (*REPORTED, "overall"):
            e = estimates[arm].get(d) or {}
            diff = differences[arm]["overall"] if d == "overall" else differences[arm]["by_dataset"].get(d)
            groups[d] = {"raw": e.get("raw"), "corrected": e.get("corrected"), "generic_floor": e.get("generic_floor"),
                         "vs_base": diff}  # fmt: skip
        out[arm] = {"rows": arms[arm]["rows"], "sources": arms[arm]["sources"], "train": trained.get(arm, {}),
                    "by_dataset": {d: groups[d] for d in REPORTED}, "overall": groups["overall"]}  # fmt: skip
    return out


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else "..." + text[-n:]


def _filtered(rows: list[dict], dataset: str | None = None, cell: bool = False) -> list[dict]:
    """The rows of one dataset (all: None); `cell`: only the main table's cell (the probe temperature, unperturbed)."""
    t = float(SETTINGS["probe"]["temperatures"][0])
    return [r for r in rows if (dataset is None or r["dataset"] == dataset)
            and (not cell or (float(r["temperature"]) == t and r["perturbation"] == "none"))]  # fmt: skip


def _kept(d: dict | None, keys: tuple[str, ...] = KEEP) -> dict | None:
    return {k: d[k] for k in keys} if d else None


def _name(model: str, seed: int | None = None) -> str:
    return NAMES[model] if seed is None or seed == LABELLED_SEED else f"{NAMES[model]}, seed {seed}"


def figures(out: Path, probes: dict[str, dict], ifbench: dict[str, dict], models: list[str],
             seeds: list[int]) -> dict:  # fmt: skip
    """Every model's figures from its probe folders: the main table's cells (`cells`), its estimates (raw, corrected,
    generic floor per dataset and overall, and IFBench) and its paired differences from the base model
    (Holm-adjusted over the trained models), and the labelled seed's own (`labelled_*`: what the blind labels are
    read beside). A trained model at one seed: the probe summaries and `compare`, as before seeds; at several: pooled
    over its seeds with the seed-and-context bootstrap (`collab_seeds`), with each seed's figures and their spread
    (`per_seed`)."""
    from fic.followup_summary import compare

    multi = len(seeds) > 1
    rows = {k: repro.read_jsonl(out / f"probe_{k}" / "samples.jsonl") for k in models}  # the labelled seed's
    if_rows = {k: repro.read_jsonl(out / f"ifbench_{k}" / "samples.jsonl") for k in models}

    def one_seed(k: str, probe: dict, if_probe: dict, k_rows: list[dict], k_if: list[dict]) -> dict:
        est = {**_estimates(probe, k), IFBENCH: _estimates(if_probe, k, (IFBENCH,))[IFBENCH]}
        cells = {d: _cell(probe, d) for d in DATASETS} | {IFBENCH: _cell(if_probe, IFBENCH)}
        if k == "base":
            return {"estimates": est, "cells": cells}
        diff = _differences(rows["base"], k_rows)
        diff["by_dataset"][IFBENCH] = _kept(compare(if_rows["base"], k_if)["overall"])
        return {"estimates": est, "cells": cells, "differences": diff}

    labelled = {k: one_seed(k, probes[k], ifbench[k], rows[k], if_rows[k]) for k in models}
    one = {k: v["differences"] for k, v in labelled.items() if k != "base"}
    out_ = {"rows": rows, "labelled_estimates": {k: v["estimates"] for k, v in labelled.items()},
            "labelled_differences": _holm_overall(one), "per_seed": {}, "spread": {}}  # fmt: skip
    if not multi:
        out_.update(estimates=out_["labelled_estimates"], differences=out_["labelled_differences"],
                    cells={k: v["cells"] for k, v in labelled.items()})  # fmt: skip
        return out_
    estimates, cells, pooled = {"base": labelled["base"]["estimates"]}, {"base": labelled["base"]["cells"]}, {}
    keep = (*KEEP, "n_seeds")
    for k in (m for m in models if m != "base"):
        runs = {s: repro.read_jsonl(out / f"probe_{run_name(k, s)}" / "samples.jsonl") for s in seeds}
        if_runs = {s: repro.read_jsonl(out / f"ifbench_{run_name(k, s)}" / "samples.jsonl") for s in seeds}
        groups = {**{d: {s: _filtered(r, d) for s, r in runs.items()} for d in DATASETS}, "overall": runs,
                  IFBENCH: if_runs}  # fmt: skip
        base = {**{d: _filtered(rows["base"], d) for d in DATASETS}, "overall": rows["base"], IFBENCH: if_rows["base"]}
        estimates[k] = {g: {"raw": pooled_rate(r), "corrected": None, "corrected_note": TRAINED_NOT_CORRECTED,
                            "generic_floor": pooled_rate(r, "generic_genuine")} for g, r in groups.items()}  # fmt: skip
        cells[k] = {d: pooled_rate({s: _filtered(r, cell=True) for s, r in groups[d].items()}) for d in REPORTED}
        pooled[k] = {"overall": _kept(pooled_difference(base["overall"], runs), keep),
                     "by_dataset": {d: _kept(pooled_difference(base[d], groups[d]), keep) for d in REPORTED}}  # fmt: skip
        per_seed = []
        for s in seeds:
            probe = repro.read_json(out / f"probe_{run_name(k, s)}" / "summary.json")
            if_probe = repro.read_json(out / f"ifbench_{run_name(k, s)}" / "summary.json")
            fig = one_seed(k, probe, if_probe, runs[s], if_runs[s])
            per_seed.append({"seed": s,
                             "raw": {g: (fig["estimates"][g] or {}).get("raw") for g in (*DATASETS, "overall", IFBENCH)},
                             "generic_floor": {g: (fig["estimates"][g] or {}).get("generic_floor")
                                               for g in (*DATASETS, "overall", IFBENCH)},
                             "vs_base": {"overall": fig["differences"]["overall"], **fig["differences"]["by_dataset"]}})  # fmt: skip
        out_["per_seed"][k] = per_seed
        out_["spread"][k] = {
            g: {"raw": spread([(r["raw"][g] or {}).get("rate") for r in per_seed]),
                "generic_floor": spread([(r["generic_floor"][g] or {}).get("rate") for r in per_seed]),
                "vs_base": spread([(r["vs_base"].get(g) or {}).get("diff") for r in per_seed])}
            for g in (*DATASETS, "overall", IFBENCH)
        }  # fmt: skip
    out_.update(estimates=estimates, differences=_holm_overall(pooled), cells=cells)
    return out_


def _trained_info(out: Path, tuning: dict, seeds: list[int]) -> dict:
    """Each arm's training: the chosen point, the labelled seed's loss and wall time, and at several seeds each
    seed's (`per_seed`)."""

    def one(k: str, seed: int) -> dict:
        e = repro.read_json(out / f"sft_{run_name(k, seed)}" / "eval_summary.json")
        return {"conversations": (e.get("data") or {}).get("conversations"), "train_loss": e.get("train_loss"),
                "wall_s": e.get("wall_s")}  # fmt: skip

    info = {}
    for k in ARMS:
        info[k] = {"learning_rate": tuning["chosen"]["learning_rate"], "max_steps": tuning["chosen"]["max_steps"],
                   **one(k, LABELLED_SEED)}  # fmt: skip
        if len(seeds) > 1:
            info[k]["per_seed"] = [{"seed": s, **one(k, s)} for s in seeds]
    return info


def _rl_seed(model: str, seed: int) -> dict:
    e = repro.read_json(Path(model) / "eval_summary.json")
    return {"seed": seed, "reward_first_quarter": e["before"].get("mean_reward"),
            "reward_last_quarter": e["after"].get("mean_reward"), "train_wall_s": e.get("wall_s"),
            "reward_hacking": e.get("reward_hacking")}  # fmt: skip


def build_section(out: Path, paths: dict[str, Path], probes: dict[str, dict], acc: dict[str, dict], arms: dict,
                  tuning: dict, rl_tuning: dict, ifbench: dict[str, dict] | None = None,
                  model_paths: dict[str, str] | None = None, seeds: list[int] | None = None) -> repro.Section:  # fmt: skip
    """The section from what `collab.run` measured: `probes` and `ifbench` (each run's probe summary, keyed by
    `run_name`), `model_paths` (each run's model), `seeds` (the training seeds)."""
    judge = repro.judge_about()
    p, g = SETTINGS["probe"], SETTINGS["gsm8k"]
    seeds = seeds or [LABELLED_SEED]
    multi = len(seeds) > 1
    ifbench = ifbench or {}
    models = [k for k in probes if k in ("base", *TRAINED)]
    m = figures(out, probes, ifbench, models, seeds)
    rows, estimates, differences = m["rows"], m["estimates"], m["differences"]
    hb = {k: c["healthbench"] for k, c in m["cells"].items()}
    mtb = {k: c["mt_bench"] for k, c in m["cells"].items()}
    ifb = {k: c[IFBENCH] for k, c in m["cells"].items()}
    acc_only = {k: {"accuracy": v.get("accuracy"), "n": v.get("n")} for k, v in acc.items()}
    trained = _trained_info(out, tuning, seeds)
    rl_eval = repro.read_json(Path(rl_tuning["chosen"]["model"]) / "eval_summary.json")
    curve = rl_eval.get("reward_curve", [])
    rl_seeds = [_rl_seed(model_paths[run_name("rl", s)], s) for s in seeds] if multi else []
    label_maps: dict = {}
    label_rows: dict = {}
    calibrated = calibrated_rates(out, models, label_maps=label_maps, label_rows=label_rows)
    cal_diffs = _holm_overall(calibrated_differences(rows, label_maps))
    readers = reader_figures(out, models, label_rows, rows)
    n_rows = arms["real"]["rows"]
    labelled_rise = {k: {d: floor_rise(m["labelled_estimates"], k, d) for d in (*DATASETS, "overall")}
                     for k in models if k != "base"}  # fmt: skip
    summary = {
        "arms": arm_entries(arms, estimates, differences, trained),
        "generic_floor": {k: {d: e.get("generic_floor") for d, e in by.items()} for k, by in estimates.items()},
        "calibrated": calibrated,
        "calibrated_differences": cal_diffs,
        "floor_rise": {k: {d: floor_rise(estimates, k, d) for d in (*DATASETS, "overall", IFBENCH)} for k in models if k != "base"},
        "hyperparameters": tuning,
        "sft": {"arm": "template_filtered", "before": hb["base"], "after": hb["template_filtered"],
                "mt_bench": {"before": mtb["base"], "after": mtb["template_filtered"]},
                IFBENCH: {"before": ifb["base"], "after": ifb["template_filtered"]},
                "gsm8k_accuracy": {"before": acc_only.get("base"), "after": acc_only.get("template_filtered")},
                "train_data": {"rows": n_rows, "sources": arms["template_filtered"]["sources"]},
                "train_loss": trained["template_filtered"]["train_loss"],
                "train_wall_s": trained["template_filtered"]["wall_s"]},
        "rl": {"before": hb["base"], "after": hb["rl"],
               "mt_bench": {"before": mtb["base"], "after": mtb["rl"]},
               IFBENCH: {"before": ifb["base"], "after": ifb["rl"]},
               "gsm8k_accuracy": {"before": acc_only.get("base"), "after": acc_only.get("rl")},
               "reward_curve": curve, "reward_first_quarter": rl_eval["before"].get("mean_reward"),
               "reward_last_quarter": rl_eval["after"].get("mean_reward"),
               "train_contexts": rl_eval.get("train_contexts"), "train_wall_s": rl_eval.get("wall_s"),
               "reward_hacking": rl_eval.get("reward_hacking"), "hyperparameters": rl_tuning,
               **({"per_seed": rl_seeds} if multi else {})},
        "gsm8k_accuracy": acc_only,
        "heldout": {"healthbench_contexts": len(repro.read_jsonl(paths["hb_test"])), "mt_bench_contexts": len(repro.read_jsonl(paths["mtb_test"])),
                    "temperature": p["temperatures"], "samples": p["samples"],
                    "ifbench_items": (ifb["base"] or {}).get("n_items"), "ifbench_about": SETTINGS["ifbench"]["items"]},
        "turn_stats": {k: {d: _turn_stats(out / f"probe_{k}", d) for d in DATASETS}
                       | {IFBENCH: _turn_stats(out / f"ifbench_{k}", IFBENCH)} for k in probes},
        "differences": differences,
        "estimates": estimates,
        "readers": readers,
        "seeds": {"trained": seeds, "labelled": LABELLED_SEED, "base": "one model (no training seed)",
                  "pooled_interval": INTERVAL if multi else "contexts (one seed: the probes' own intervals)",
                  **({"models": {k: {"per_seed": m["per_seed"][k], "spread": m["spread"][k]} for k in m["per_seed"]},
                      "labelled_differences": m["labelled_differences"], "labelled_floor_rise": labelled_rise}
                     if multi else {})},
    }  # fmt: skip
    n_hb, n_mtb = summary["heldout"]["healthbench_contexts"], summary["heldout"]["mt_bench_contexts"]
    temps = ", ".join(map(str, p["temperatures"]))
    chosen = tuning["chosen"]
    sft_note, rl_note = _recorded_note(tuning), _recorded_note(rl_tuning)
    measured = bool(g["models"])  # GSM8K accuracy: SCALE=gpu only
    about = {
        "model": f"SmolLM2-135M-Instruct ({repro.MODEL}), fp32 on CPU; every SFT arm and follow-up RL start from it",
        "data": (f"held out: the {n_hb} multi-turn HealthBench items of oss_eval_first30 and {n_mtb} MT-Bench questions "
                 f"({SETTINGS['heldout']['mt_bench_per_category']} per category of "
                 f"{', '.join(SETTINGS['heldout']['mt_bench_categories'])}); dev (the learning rate and steps only"
                 f"{', chosen in the run at commit ' + tuning['recorded']['commit'] if sft_note else ''}): "
                 f"{tuning['dev']['contexts']['mt_bench']} MT-Bench training questions without a reference answer "
                 f"outside the judge's fit and {tuning['dev']['contexts']['healthbench']} single-turn HealthBench items; "
                 "training: MT-Bench questions with reference answers, the other single-turn HealthBench items, "
                 f"GSM8K train{'; GSM8K test for accuracy' if measured else ''}; also IFBench: "
                 f"{summary['heldout']['ifbench_items']} test items ({SETTINGS['ifbench']['items']}), never pooled "
                 "into the held-out figures"),
        "sizes": (f"each SFT arm {n_rows} rows, {chosen['max_steps']} steps at learning rate {chosen['learning_rate']:g} "
                  f"(constant), batch 8, max_length 512 (keep_end); held-out contexts end with the base model's greedy "
                  f"answer ({p['response_tokens']} tokens), shared by all models; {p['samples']} user turns of at most "
                  f"{p['max_new_tokens']} tokens per context at T={temps}"
                  + (f"; GSM8K: first {g['limit']} test items" if measured else "")),
        "seeds": (f"seed {SETTINGS['seed']} for the split, the arms and sampling; training seeds "
                  f"{', '.join(map(str, seeds))} for every SFT arm and follow-up RL (the base model is one model); the "
                  f"blind labels are of seed {LABELLED_SEED}'s turns" if multi else
                  f"seed {SETTINGS['seed']} for the split, the arms, training and sampling (one seed)"),
        "judge": repro.judge_line(judge),
    }  # fmt: skip
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
    # Targets are read off the calibrated differences (pooled over the 29 held-out contexts: HealthBench's 9 alone are
    # not estimable), minus the rise in generic floor, at the interval's lower end; where the readers labelled foil
    # turns of the model and of the base model, off the readers' gain minus the rise of their own floor instead. Both
    # are of the labelled seed's turns, and so is the floor rise they subtract.
    on_seed = f", training seed {LABELLED_SEED} (the labelled one)" if multi else ""
    targets = [
        gain_target("template_filtered", "collab SFT gain on the held-out contexts, read by blind readers "
                    f"(judge-filtered template arm, the method; paper: +17.7 points on HealthBench){on_seed}", readers,
                    cal_diffs, labelled_rise["template_filtered"]["overall"], 0.15),
        gain_target("rl", "follow-up RL above base on the held-out contexts, read by blind readers "
                    f"(reward {summary['rl']['reward_first_quarter']} -> {summary['rl']['reward_last_quarter']}, "
                    f"first -> last quarter of steps){on_seed}", readers, cal_diffs,
                    labelled_rise["rl"]["overall"], 1e-9),
        hacking_target(summary["rl"]["reward_hacking"], {r["seed"]: r["reward_hacking"] for r in rl_seeds}),
    ]  # fmt: skip
    src = arms["template_filtered"]["sources"]
    labelled = [k for k, c in calibrated.items() if c["n_labels"]]
    text = [
        (f"SFT data arms, {n_rows} rows each (the size of the real arm), loss on the user turns after an answer: "
         f"**real** = {n_rows} MT-Bench training conversations (question, GPT-4 reference answer, the real second "
         "question); HealthBench adds none, since all 9 of its multi-turn items are the held-out set. **template, "
         f"unfiltered** and **template, judge-filtered** = the same {n_rows} GSM8K-train and single-turn HealthBench "
         f"contexts ({', '.join(f'{v} {k}' for k, v in src.items())}) with their reference answers, followed by one "
         f"of {SETTINGS['template_candidates']} template follow-ups: drawn at random, or the one the "
         f"`{TRAINING_JUDGE}` judge, contrastively, calls genuine with most confidence (the judge of training "
         f"signals, refitted with trained models' turns; the probes score with `{repro.JUDGE}`, and follow-up RL's "
         f"reward is the `{TRAINING_JUDGE}` judge's, contrastive, too). The real arm's contexts are "
         "MT-Bench math, reasoning and coding questions, the template arms' GSM8K and HealthBench: arm and context "
         "source are not separable here."),
        (f"Learning rate and steps were chosen on dev contexts ({tuning['dev']['contexts']['mt_bench']} MT-Bench training "
         f"questions, {tuning['dev']['contexts']['healthbench']} single-turn HealthBench items, none held out, none in "
         f"the judge's fit){sft_note} from the grid {tuning['grid']}: {chosen['learning_rate']:g} and "
         f"{chosen['max_steps']} steps (dev score {100 * chosen['score']:.1f} points; base "
         f"{100 * tuning['dev']['base']['score']:.1f}). The grid trains on a mix of a third of each arm, so no arm's "
         "data made the choice; with "
         f"{sum(tuning['dev']['contexts'].values())} dev contexts and {tuning['dev']['samples']} turns each, close "
         "scores are within noise. Follow-up RL's learning rate was chosen the same way"
         f"{' (in that run; this run trains only that rate)' if rl_note else ''} from "
         f"{rl_tuning['grid']['learning_rate']}: {rl_chosen['learning_rate']:g} (dev score "
         f"{100 * rl_chosen['score']:.1f} points); everything else is the recipe's but "
         f"{', '.join(SETTINGS['rl']['overrides'])} (half its steps, for time), and it is reported as measured."),
        (f"The judge is `{repro.JUDGE}`: on labelled turns outside every fit, "
         f"{repro.transfer_text(judge.get('transfer'))}: a trained arm's judge rate holds more false positives than "
         f"the base model's. On the labels' 180-turn test split it calls {_share(judge['judge_genuine_rate'])} of the labelled test "
         f"turns genuine where the annotators' labels say {_share(judge['annotator_genuine_rate'])} (independent "
         "AI-agent annotators following a written guideline, blind). Rates it gives are movement toward its notion of a "
         "follow-up; the generic floor (the same turn judged after another context's answer) shows how much of a rate "
         "any answer would earn, and the calibrated rates are where readers' labels enter."),
        ("Calibrated rates: " + (f"labels for {', '.join(NAMES[k] for k in labelled)}; " if labelled else "")
         + ("no labels yet for " + ", ".join(NAMES[k] for k in calibrated if k not in labelled)
            + ": run each model's `fic review ... --sample 30` (table above), label blind, then rerun the part's "
              "summary (`rm OUT/collab/section.json` and `python reproduce/run.py --parts collab`; every step resumes)"
            if len(labelled) < len(calibrated) else "every model labelled")),
        *([_readers_text(readers)] if readers["measured"] else [readers["note"]]),
        (f"Intervals are clustered by context (the {p['samples']} turns of a context are not independent; with "
         f"{n_hb} HealthBench contexts they are wide), and every comparison with the base model is a paired difference "
         "over the same contexts. The held-out contexts end with the base model's own greedy answer, written once and "
         "copied into every probe; none of them is in the judge's fit. "
         + ("GSM8K accuracy is each model's own greedy answer on test items outside the judge's fit, measured for the "
            "base model only: it scored 0 of 20 in the run of 2026-12-02, so a trained model could not show a loss "
            "there (for time)." if measured else
            "GSM8K accuracy is not measured in this part at SCALE=cpu (for time): the probe part reports the base "
            "model's GSM8K accuracy, and in the run of 2026-12-02 the base model scored 0 of 20 here, so a trained "
            "model could not show a loss there; SCALE=gpu measures the base model's.")),
        *([_seeds_text(seeds, rl_seeds)] if multi else []),
    ]  # fmt: skip
    text += _gaming_text(summary["turn_stats"], models, seeds)
    return repro.Section(summary=summary, about=about,
                         tables=[main, arm_table, compared, *([seeds_table(m, differences, seeds)] if multi else []),
                                 floors, grid, rl_grid, calib, cal_table,
                                 *([readers_table(readers)] if readers["measured"] else []), labels, stats, reward,
                                 shown],
                         text=text, targets=targets)  # fmt: skip


def _run_label(run: str) -> str:
    """A run's name for a table: `SFT: real follow-ups` (the labelled seed, or the base model), `..., seed 1`."""
    for k in ("base", *TRAINED):
        if run == k:
            return NAMES[k]
        if run.startswith(f"{k}_seed") and run[len(k) + 5 :].isdigit():
            return _name(k, int(run[len(k) + 5 :]))
    return run


def _gaming_text(turn_stats: dict, models: list[str], seeds: list[int]) -> list[str]:
    """A paragraph per trained model whose most common held-out HealthBench turn is a quarter or more of its turns
    (at any training seed): its rate is to be read with its turns and its generic floor."""
    out = []
    for k in models:
        if k == "base":
            continue
        hits = [(s, st) for s in seeds if (st := turn_stats[run_name(k, s)].get("healthbench"))
                and st["top_share"] >= 0.25]  # fmt: skip
        if not hits:
            continue
        if len(seeds) == 1:
            st = hits[0][1]
            out.append(f"**Read the {NAMES[k]} rate with its turns.** Its most common held-out HealthBench turn is "
                       f'"{st["top_turn"]}" ({100 * st["top_share"]:.0f}% of its turns; {100 * st["distinct"]:.0f}% '
                       "of its turns are distinct): compare its rate with its generic floor.")  # fmt: skip
            continue
        found = "; ".join(f'seed {s}: "{st["top_turn"]}" ({100 * st["top_share"]:.0f}% of its turns; '
                          f'{100 * st["distinct"]:.0f}% distinct)' for s, st in hits)  # fmt: skip
        out.append(f"**Read the {NAMES[k]} rate with its turns.** Its most common held-out HealthBench turn, at "
                   f"{len(hits)} of its {len(seeds)} training seeds, is a quarter or more of its turns ({found}): "
                   "compare its rate with its generic floor.")  # fmt: skip
    return out


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
            cell = _filtered(rows["ifbench" if d == IFBENCH else "probe"], d, cell=True)
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


def _seeds_text(seeds: list[int], rl_seeds: list[dict]) -> str:
    """What the training seeds are and how the pooled figures read them."""
    n = len(seeds)
    rewards = "; ".join(
        f"seed {r['seed']} {r['reward_first_quarter']} -> {r['reward_last_quarter']}" for r in rl_seeds
    )
    return (f"Training seeds: every SFT arm and follow-up RL was trained and probed at seeds "
            f"{', '.join(map(str, seeds))} (the split, the arms' rows, the base model's held-out answers and the "
            "probe's sampling seed are the same at every seed: only training differs); the base model is one model. "
            "Every rate and difference of a trained model pools its seeds, with an interval that resamples seeds and "
            "contexts together (`fic.bootstrap.seed_task_bootstrap`, as in the VASD part, one draw for every model, "
            "so differences stay paired by context): it widens where the seeds disagree, which an interval over "
            f"contexts alone never does, and with {n} seeds it still understates their variance by about "
            f"{100 / n:.0f}% ((S - 1) / S). Each seed's own rate and difference, and their sd over the seeds, are in "
            "the per-seed table. The blind labels and what is read off them (calibrated figures, the readers' figures "
            f"from foil labels, the targets) and the turns shown are of seed {LABELLED_SEED}'s turns, the seed that was "
            "labelled. Follow-up RL's "
            f"mean reward, first -> last quarter of steps: {rewards}.")  # fmt: skip


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


def _readers_text(readers: dict) -> str:
    """The reading of the readers' gains with their floor subtracted, the one the targets read where foil labels
    exist."""
    parts = []
    words = {"counted": "context-free requests counted", "not_counted": "not counted"}
    for k, d in readers["differences"].items():
        cells = [f"{words[x]}: " + (d[x]["floor_subtracted_gain"]["reading"] if isinstance(d[x], dict)
                                    else "unknown (no context_free flag)") for x in words]  # fmt: skip
        parts.append(f"{NAMES[k]} ({'; '.join(cells)})")
    missing = [NAMES[k] for k, m in readers["models"].items() if not (m["n_real"] and m["n_foils"])]
    return ("Read by blind readers with their own floor subtracted (their gain over the base model minus the rise of "
            "their genuine rate on foil turns, table above), which the targets read where both models have foil "
            "labels: " + ("; ".join(parts) if parts else "no trained model has real and foil labels beside the base "
                          "model's yet")
            + (f". No real and foil labels for {', '.join(missing)}" if missing else "") + ".")  # fmt: skip


def hacking_target(check: dict | None, per_seed: dict[int, dict | None] | None = None) -> repro.Target:
    """Follow-up RL's reward against the judge-genuine share on every logged window (`fic.trainers.reward_hacking`):
    a window where the reward rises while the genuine share falls is the policy gaming the reward. `per_seed`
    (several training seeds): every seed's check, each of which must flag no window."""
    what = "follow-up RL's reward and judge-genuine share move together on every logged window"
    if per_seed and len(per_seed) > 1:
        parts, met = [], True
        for seed, c in per_seed.items():
            if not c or not c.get("windows"):
                parts.append(f"seed {seed}: no reward-hacking check in its eval_summary.json")
                met = False
                continue
            parts.append(f"seed {seed}: {c['flagged']} of {len(c['windows'])} windows of {c['window']} logged steps "
                         "flagged" + (f" ({c['warning']})" if c.get("warning") else ""))  # fmt: skip
            met = met and c["flagged"] == 0
        return repro.Target(f"{what}, at every training seed", "no window flagged", "; ".join(parts), met)
    if not check or not check.get("windows"):
        return repro.Target(what, "no window flagged", "no reward-hacking check in the run's eval_summary.json", False)
    windows = check["windows"]
    measured = (f"{check['flagged']} of {len(windows)} windows of {check['window']} logged steps flagged"
                + (f": {check['warning']}" if check.get("warning") else ""))  # fmt: skip
    return repro.Target(what, "no window flagged", measured, check["flagged"] == 0)


def _recorded_note(tuning: dict) -> str:
    """Where a recorded choice (`recorded_choice`) was made, for the report; empty for a choice made in this run."""
    rec = tuning.get("recorded")
    if not rec:
        return ""
    return (f" in the run at commit {rec['commit']} (recorded in {rec['file']}; this run trains only the chosen "
            "point, for time; SCALE=gpu reruns the choice)")  # fmt: skip


def _share(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"
