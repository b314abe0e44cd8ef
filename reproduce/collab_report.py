"""The collab part's report: its summary.json entries, targets and text (`build_section`) from what `collab.run`
measured; its figures come from `collab_figures`, its tables from `collab_tables`.

A trained model at one training seed is read off its probes' summaries and `fic.followup_summary.compare`; at several
seeds every rate and difference from the base model pools the seeds, its interval resampling seeds and contexts
(`collab_seeds`), beside each seed's figures and their sd (`summary.seeds`). What the blind labels are read beside
(calibrated figures, the readers' floor, the targets) stays on the labelled seed (`LABELLED_SEED`), and says so.
IFBench items outside the judge's fit are a third dataset with rows of their own, never pooled into "overall"."""

from __future__ import annotations

from pathlib import Path

import repro
from collab_figures import arm_entries, figures, holm_overall, rl_seed, trained_info, turn_stats
from collab_labels import calibrated_differences, calibrated_rates, floor_rise, gain_target, reader_figures
from collab_seeds import INTERVAL
from collab_settings import DATASETS, IFBENCH, LABELLED_SEED, NAMES, SETTINGS, TRAINED, TRAINING_JUDGE, run_name
from collab_tables import recorded_note, tables


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
    trained = trained_info(out, tuning, seeds)
    rl_eval = repro.read_json(Path(rl_tuning["chosen"]["model"]) / "eval_summary.json")
    curve = rl_eval.get("reward_curve", [])
    rl_seeds = [rl_seed(model_paths[run_name("rl", s)], s) for s in seeds] if multi else []
    label_maps: dict = {}
    label_rows: dict = {}
    calibrated = calibrated_rates(out, models, label_maps=label_maps, label_rows=label_rows)
    cal_diffs = holm_overall(calibrated_differences(rows, label_maps))
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
        "turn_stats": {k: {d: turn_stats(out / f"probe_{k}", d) for d in DATASETS}
                       | {IFBENCH: turn_stats(out / f"ifbench_{k}", IFBENCH)} for k in probes},
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
    sft_note, rl_note = recorded_note(tuning), recorded_note(rl_tuning)
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
    rl_chosen = rl_tuning["chosen"]
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
    return repro.Section(summary=summary, about=about, tables=tables(out, summary, m, models, seeds, labelled_rise),
                         text=text, targets=targets)  # fmt: skip


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


def _share(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"
