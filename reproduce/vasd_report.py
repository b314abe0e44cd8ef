"""The VASD part's report (reproduce/vasd.py): its tables, targets, text and summary.json entries from what
`vasd.run` measured."""

from __future__ import annotations

import math

from repro import Section, Table, Target
from vasd_estimates import arm, difference, rate, recovery, seed_spread
from vasd_settings import KINDS, SCALE, SETTINGS, VIEWS, qualifies, seeds_of

CANDIDATE_ABOUT = {
    "arithmetic-2-updates": "fic.data.synthetic arithmetic, start value + 2 updates (4 shards)",
    "arithmetic-1-update": "fic.data.synthetic arithmetic, start value + 1 update (3 shards)",
    "sum-of-two": "'What is A + B?' (A, B in 2..30), shards: the ask, the first number, the second (3 shards)",
}
RECOVERY_DEFINITION = ("(P_sharded(after) - P_sharded(before)) / (P_full(before) - P_sharded(before)): the share of "
                       "the multi-turn gap closed (fic.metrics.recovery)")  # fmt: skip


def _per_seed(test_views: dict, kind: str, before: dict) -> list[dict]:
    """Each seed's P per view and its recovery (`fic.metrics.recovery`: share of the gap closed; None without a gap
    before training)."""
    from fic.metrics import recovery as gap_closed

    rows = []
    for seed in seeds_of(kind):
        r = test_views[kind, seed]
        rec = gap_closed(before["p_full"], before["p_sharded"], r["p_sharded"])["recovery"]
        rows.append({"seed": seed, **{k: r[k] for k in ("p_full", "p_concat", "p_sharded")}, "recovery": rec})
    return rows


def _aggregate(per_seed: list[dict]) -> dict:
    keys = ("p_full", "p_concat", "p_sharded", "recovery")
    spread = {k: seed_spread([r[k] for r in per_seed]) for k in keys if all(r[k] is not None for r in per_seed)}
    return {"per_seed": per_seed, "mean": {k: s["mean"] for k, s in spread.items()}, "spread": spread}


def _d(x: dict) -> dict:
    """What summary.json keeps of a paired difference."""
    return {k: x[k] for k in ("diff", "low", "high", "p", "n_items", "n_seeds", "rate_a", "rate_b", "detectable")}


def _recovery_cell(r: dict) -> str:
    if r["estimate"] is None:
        return f"n/a ({r['reason'] or 'undefined'})"
    if r["low"] is None:
        return f"{r['estimate']:.3f} [n/a]"
    return f"{r['estimate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def section(m: dict) -> Section:
    """The part's tables, targets and summary from what `run` measured (`m`: plain data, no model)."""
    from fic.metrics import recovery_target

    ev, v, s = SETTINGS["eval"], SETTINGS["vasd"], SETTINGS["eval"]["sampled"]
    margin, test = v["keep_margin"], m["test"]
    task, config = m["choices"]["task"]["chosen"], m["choices"]["config"]["chosen"]
    before_o = test["before"]
    b = m["test_views"]["before"]
    # bootstrap arms {seed: {task: verdicts}} per view: the start model is seed-free, VASD and the control are paired
    # by seed where both have several (`fic.bootstrap`)
    bo = {view: arm({None: before_o}, view) for view in VIEWS}
    kinds = {kind: {view: arm({seed: test[kind, seed] for seed in seeds_of(kind)}, view) for view in VIEWS}
             for kind in KINDS}  # fmt: skip
    agg = {kind: _aggregate(_per_seed(m["test_views"], kind, b)) for kind in KINDS}
    va, ctl = kinds["vasd"], kinds["self_sft"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}"  # noqa: E731
    iv = lambda r: f"{pct(r['rate'])} [{pct(r['low'])}, {pct(r['high'])}]"  # noqa: E731

    def dd(x: dict) -> str:
        return f"{100 * x['diff']:+.1f} [{100 * x['low']:+.1f}, {100 * x['high']:+.1f}] p={x['p']:.3f}"

    diffs = {
        "sharded_gain": difference(bo["sharded"], va["sharded"]),
        "full_kept": difference(bo["full"], va["full"]),
        "concat_kept": difference(bo["concat"], va["concat"]),
        "remaining_gap": difference(bo["full"], va["sharded"]),
        "gap_before": difference(bo["full"], bo["sharded"]),
        "concat_vs_full_before": difference(bo["full"], bo["concat"]),
    }
    recov = recovery(bo["full"], bo["sharded"], va["sharded"])
    per_seed_diffs = [
        {"seed": seed, **{view: _d(difference(bo[view], {seed: test["vasd", seed][view]})) for view in VIEWS}}
        for seed in seeds_of("vasd")
    ]
    ablation_diffs = {view: difference(ctl[view], va[view]) for view in VIEWS}
    control_vs_before = {view: difference(bo[view], ctl[view]) for view in VIEWS}
    control_rec = recovery(bo["full"], bo["sharded"], ctl["sharded"])

    eps = 1e-9
    concat_gap = diffs["concat_vs_full_before"]
    before_rates = {view: rate(bo[view]) for view in VIEWS}
    vasd_rates, ctl_rates = ({view: rate(k[view]) for view in VIEWS} for k in (va, ctl))
    kept_full = diffs["full_kept"]["low"] >= -margin - eps
    kept_concat = diffs["concat_kept"]["low"] >= -margin - eps
    paper = ev["paper_sharded_over_full"]
    target = recovery_target(b["p_full"], b["p_sharded"], paper)  # the paper's ratio on the gap-closed scale
    recovered = recov["low"] is not None and target is not None and recov["low"] >= target - eps
    target_text = "n/a (no gap before training)" if target is None else f"{target:.3f}"
    targets = [
        Target("competent single turn", "P_full(before) >= 40%: interval's lower end", iv(before_rates["full"]),
               before_rates["full"]["low"] >= 0.4 - eps),
        Target("multi-turn loss", "P_sharded - P_full (before): interval below 0", dd(diffs["gap_before"]),
               diffs["gap_before"]["high"] < 0),
        Target("CONCAT like FULL", "P_concat - P_full (before): interval inside +-10 points",
               dd(diffs["concat_vs_full_before"]),
               -0.10 - eps <= concat_gap["low"] and concat_gap["high"] <= 0.10 + eps),
        Target("recovery", f"share of the gap closed >= {target_text} (the paper's P_sharded(after) >= {paper} x "
               "P_full, at this run's P_full and P_sharded before): interval's lower end", _recovery_cell(recov),
               recovered),
        Target("FULL kept", f"P_full after - before: lower end >= -{100 * margin:.0f} points", dd(diffs["full_kept"]),
               kept_full),
        Target("CONCAT kept", f"P_concat after - before: lower end >= -{100 * margin:.0f} points",
               dd(diffs["concat_kept"]), kept_concat),
        Target("distillation beats self-SFT", "P_sharded VASD - self-SFT: interval above 0",
               dd(ablation_diffs["sharded"]), ablation_diffs["sharded"]["low"] > 0),
    ]  # fmt: skip

    vasd_seeds, ctl_seeds = seeds_of("vasd"), seeds_of("self_sft")
    seed_cells = lambda kind, view: " / ".join(pct(r[f"p_{view}"]) for r in agg[kind]["per_seed"])  # noqa: E731

    def sd_cell(kind: str, view: str) -> str:
        spread = agg[kind]["spread"][f"p_{view}"]
        return f"{100 * spread['sd']:.1f}" if spread["n_seeds"] > 1 else "n/a (1 seed)"

    def seeds_text(seeds: list[int]) -> str:
        return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"

    same_seeds = vasd_seeds == ctl_seeds
    seeds_caption = (f"{len(vasd_seeds)} seeds each" if same_seeds else
                     f"VASD at {len(vasd_seeds)} seeds, the control at {seeds_text(ctl_seeds)}")  # fmt: skip
    pairing = ("and by seed between VASD and the control" if same_seeds else
               f"VASD - self-SFT pairs VASD's {len(vasd_seeds)} seeds per task with the control's "
               f"{seeds_text(ctl_seeds)} on the same task, whose seed variance is not in those intervals")  # fmt: skip
    main = Table(
        f"P per view, greedy, {len(before_o['full'])} test-split tasks ({task}; never used for a choice): the start "
        f"model, VASD and the self-SFT control with configuration {config} (chosen on dev), {seeds_caption} "
        "(pooled rate with its 95% interval: the start model's clustered by task, VASD's and the control's from "
        "resampling seeds and tasks; per seed; sd over seeds)",
        ["view", "before", "VASD pooled", "VASD per seed", "VASD sd", "self-SFT pooled", "self-SFT per seed",
         "self-SFT sd"],
        [[view.upper(), iv(before_rates[view]), iv(vasd_rates[view]), seed_cells("vasd", view), sd_cell("vasd", view),
          iv(ctl_rates[view]), seed_cells("self_sft", view), sd_cell("self_sft", view)] for view in VIEWS],
    )  # fmt: skip

    diff_table = Table(
        f"Differences on the test split, paired by task ({pairing}): points with the 95% interval and p of a "
        "bootstrap resampling seeds and tasks; recovery = (P_sharded(after) - P_sharded(before)) / (P_full(before) - "
        "P_sharded(before)), the share of the multi-turn gap closed, with the same bootstrap's interval",
        ["comparison", "difference [95% interval] p", "reading"],
        [
            ["SHARDED: VASD - before", dd(diffs["sharded_gain"]), _reading(diffs["sharded_gain"])],
            ["FULL: VASD - before (kept)", dd(diffs["full_kept"]), _kept_reading(diffs["full_kept"], margin)],
            ["CONCAT: VASD - before (kept)", dd(diffs["concat_kept"]), _kept_reading(diffs["concat_kept"], margin)],
            ["recovery of VASD: share of the gap closed", _recovery_cell(recov),
             f"target >= {target_text} (the paper's {paper} x P_full)"],
            ["remaining gap: P_sharded(VASD) - P_full(before)", dd(diffs["remaining_gap"]),
             _reading(diffs["remaining_gap"])],
            *[[f"{view.upper()}: VASD - self-SFT", dd(ablation_diffs[view]), _reading(ablation_diffs[view])]
              for view in VIEWS],
            *[[f"{view.upper()}: self-SFT - before", dd(control_vs_before[view]), _reading(control_vs_before[view])]
              for view in VIEWS],
            ["recovery of self-SFT: share of the gap closed", _recovery_cell(control_rec), ""],
        ],
    )  # fmt: skip
    lic = {"before": m["sampled"]["before"], "after": m["sampled"]["after"], "sampled": s}
    lic_table = Table(
        f"Lost-in-Conversation metrics, {s['n']} test tasks x {s['runs']} sampled runs (T={s['temperature']}): start "
        f"model and VASD seed {seeds_of('vasd')[0]}",
        ["model", "mode", "P", "A90", "U90-10", "episodes"],
        [[label, view.upper(), *(pct(lic[label][view][k]) for k in ("P", "A90", "U90_10")),
          lic[label][view]["episodes"]] for label in ("before", "after") for view in VIEWS],
    )  # fmt: skip
    ch = m["choices"]
    cand_rows = []
    for name, r in ch["start"]["numbers"].items():
        cand_rows.append([CANDIDATE_ABOUT[name], "as shipped", r["n"], SETTINGS["candidates"]["base_max_new_tokens"],
                          *_view_cells(r, pct), "yes" if qualifies(r) else "no"])  # fmt: skip
    for name, r in ch["task"]["numbers"].items():
        chosen = " (chosen)" if name == task else ""
        cand_rows.append([CANDIDATE_ABOUT[name] + chosen, m["start_model"], r["n"], ev["max_new_tokens"],
                          *_view_cells(r, pct), "yes" if qualifies(r) else "no"])  # fmt: skip
    cands = Table(
        "Choices on the dev split (1): task candidates, greedy (qualifies: P_full >= 40, |P_concat - P_full| <= 10, "
        "P_sharded <= 0.8 P_full)",
        ["candidate", "model", "dev tasks", "max new tokens", "P_full", "P_concat", "P_sharded", "qualifies"],
        cand_rows,
    )  # fmt: skip
    cc = ch["config"]
    mb, rec = cc["before"], cc.get("recorded")
    made_by = (f"; made by the run at {rec['commit']} on the same dev tasks, read from {rec['file']} (not rerun at "
               f"SCALE={SCALE})") if rec else ""  # fmt: skip
    grid = Table(
        f"Choices on the dev split (2): the training configuration, VASD seed {cc['seed']} on {mb['n']} dev tasks of "
        f"{task} (kept: P_full and P_concat within {100 * margin:.0f} points of the start model's; the recipe's "
        f"values unless the overrides say otherwise){made_by}",
        ["configuration", "overrides", "P_full", "P_concat", "P_sharded", "kept", "chosen"],
        [["start model", "", pct(mb["p_full"]), pct(mb["p_concat"]), pct(mb["p_sharded"]), "", ""]]
        + [[name, " ".join(cc["grid"][name]), pct(r["p_full"]), pct(r["p_concat"]), pct(r["p_sharded"]),
            "yes" if name in cc["kept"] else "no", "yes" if name == config else ""]
           for name, r in cc["numbers"].items()],
    )  # fmt: skip

    split = m["split"]
    overlap = sorted(set(split["dev"]) & set(split["test"]))
    test_ids = set(split["test"])
    read_by_choices = sorted({t for ids in m["seen"].values() for t in ids} & test_ids)
    vasd_mean = agg["vasd"]["mean"]
    summary = {
        "task": f"{CANDIDATE_ABOUT[task]}, chosen on dev; start model: {m['start_model']}",
        "split": {"how": "held-out tasks cut by a salted hash of their content "
                         f"({SETTINGS['split']['salt']}) into dev and test",
                  "dev_tasks": len(split["dev"]), "test_tasks": len(split["test"]), "overlap": len(overlap),
                  "test_tasks_read_by_choices": len(read_by_choices)},
        "dev": {"start": ch["start"], "task": ch["task"], "config": cc},
        "test": {
            "n": len(before_o["full"]), "seeds": vasd_seeds, "config": config, "overrides": cc["overrides"],
            "before": before_rates,
            "vasd": {**agg["vasd"], "pooled": vasd_rates, "per_seed_differences": per_seed_diffs},
            "sharded_gain": _d(diffs["sharded_gain"]),
            "recovery": {**recov, "definition": RECOVERY_DEFINITION, "target": target, "met": recovered,
                         "paper_sharded_over_full": paper, "remaining_gap": _d(diffs["remaining_gap"])},
            "kept": {"margin": margin, "full": {**_d(diffs["full_kept"]), "kept": kept_full},
                     "concat": {**_d(diffs["concat_kept"]), "kept": kept_concat}},
            "before_checks": {"gap": _d(diffs["gap_before"]), "concat_minus_full": _d(diffs["concat_vs_full_before"])},
        },
        "ablation": {
            "control": "self-SFT: same recipe, configuration, rows, steps and batch, per seed the same "
                       "training tasks and replay draws; mode=sequence temperature=0.0 (log-likelihood of the frozen "
                       "start model's greedy single-turn answer in the sharded view the student plays itself)",
            "seeds": ctl_seeds, "pairing": pairing,
            "self_sft": {**agg["self_sft"], "pooled": ctl_rates},
            "vasd_minus_self_sft": {view: _d(ablation_diffs[view]) for view in VIEWS},
            "self_sft_minus_before": {view: _d(control_vs_before[view]) for view in VIEWS},
            "self_sft_recovery": control_rec,
        },
        # the keys earlier readers use: before, after (VASD, mean of the seeds), recovery (pooled, as in `test`)
        "before": {k: b[k] for k in ("p_full", "p_concat", "p_sharded")},
        "after": {k: vasd_mean[k] for k in ("p_full", "p_concat", "p_sharded")},
        "recovery": recov["estimate"], "n": len(before_o["full"]),
        "lic": lic,
        "targets_met": {t.name: t.met for t in targets},
        "vasd_train": _vasd_train(m["training"]),
    }  # fmt: skip
    cfg = SETTINGS["sft"]
    rv = _recipe_values()
    about = {
        "model": f"SmolLM2-135M-Instruct (smollm2); start model: {m['start_model']} (recipe {cfg['recipe']}: "
                 "collaboration SFT with the loss on the assistant turns, single-turn conversations of both "
                 f"arithmetic candidates); VASD and the self-SFT control with recipe {v['recipe']} (LoRA r "
                 f"{rv['lora_r']}, the teacher the same weights with the adapter off; {rv['max_steps']} steps x "
                 f"{rv['per_device_train_batch_size']} rows) and the dev-chosen overrides {' '.join(cc['overrides'])}",
        "data": "fic.data.synthetic held-out tasks cut into dev (every choice) and test (the results) by a salted "
                "content hash; training tasks from the train split; rule user reveals shards verbatim",
        "sizes": f"dev: {SETTINGS['candidates']['base_n']} tasks per candidate (base model), "
                 f"{SETTINGS['candidates']['dev_n']} per arithmetic candidate; test: {len(before_o['full'])} tasks "
                 f"greedy, {s['n']} x {s['runs']} sampled",
        "seeds": f"VASD {seeds_text(vasd_seeds)}, self-SFT {seeds_text(ctl_seeds)} (training tasks, replay "
                 f"draws, teacher samples, torch); the dev grid at seed {v['grid_seed']}; SFT tasks seed "
                 f"{cfg['seed']}, sampling seed {s['seed']}",
    }  # fmt: skip
    config_how = (f" The configuration was chosen by the run at {rec['commit']} on the same dev tasks with the same "
                  f"task, start model and grid and is read from {rec['file']} (SCALE={SCALE}, for time; SCALE=gpu "
                  "runs the grid inside the run); VASD at the grid seed is trained here like the other seeds, with "
                  "the same training call." if rec else "")  # fmt: skip
    if cc.get("recorded_not_used"):
        config_how = (f" The recorded configuration was not used ({cc['recorded_not_used']}); the grid ran inside "
                      "this run.")  # fmt: skip
    control_how = ("" if same_seeds else
                   f" The control ran at {seeds_text(ctl_seeds)} only: its sd over seeds is n/a, VASD - self-SFT "
                   f"pairs VASD's {len(vasd_seeds)} seeds per task with the control's one run on that task, and the "
                   "control's seed variance is in none of the intervals.")  # fmt: skip
    text = [
        "Every choice was made by code on the dev split, from the numbers in the two dev tables: whether to run the "
        "single-turn SFT (SmolLM2 as shipped writes long explanations), which arithmetic candidate, and which "
        f"training configuration of the {len(cc['grid'])} in the dev grid (learning rate, LoRA rank, replay share, "
        f"KL direction, on-policy responses, full fine-tuning).{config_how} The test tasks ({len(split['test'])}, "
        f"none among the {len(split['dev'])} dev tasks; test tasks read by a choice: {len(read_by_choices)}) were "
        "scored once, after every choice.",
        "The single-turn SFT trains the FULL and CONCAT forms only, so a SHARDED gap before VASD is expected by "
        "construction; the self-SFT control asks whether distilling the teacher's distributions beats plain SFT on "
        "the same sharded view with the model's own greedy single-turn answers as targets (same trainer, "
        "configuration, rows and steps, per seed the same training tasks and replay draws; only the loss differs). "
        "Recovery above 1 (P_sharded after training above the start model's P_full: the student above its teacher) "
        f"would point to format learning, which the control also gets.{control_how}",
        "Recovery is the share of the multi-turn gap that training closed, (P_sharded(after) - P_sharded(before)) / "
        "(P_full(before) - P_sharded(before)) (`fic.metrics.recovery`; n/a without a gap before). The paper states "
        f"its target as a ratio, P_sharded(after) >= {paper} x P_full; at this run's before scores that is the same "
        f"as recovery >= {target_text} (`fic.metrics.recovery_target`), which the lower end of the recovery interval "
        "is checked against.",
        "Intervals: a bootstrap that resamples the seeds and, independently, the test tasks (`fic.bootstrap`), the "
        "same draw for every arm, so differences are paired by task and, between VASD and the control, by seed; the "
        f"start model is one model, the same in every seed draw. With {len(vasd_seeds)} seeds the seed level is "
        "coarse but it puts the seeds' disagreement into every interval; the seeds' own spread is the sd column and "
        "the per-seed cells, whose differences from the start model are task-bootstrap intervals. An effect is "
        "claimed only where its interval excludes 0. FULL / CONCAT count as kept when the lower end of after - "
        f"before is above -{100 * margin:.0f} points (a non-inferiority margin stated before the run); at n="
        f"{len(before_o['full'])} one standard error of P_full is "
        f"{100 * math.sqrt(max(b['p_full'] * (1 - b['p_full']), 1e-12) / max(len(before_o['full']), 1)):.1f} points.",
        "A90 and U90-10 come from the sampled runs; with one greedy run per task A90 equals P and U90-10 is 0.",
    ]
    return Section(summary=summary, about=about, tables=[main, diff_table, lic_table, cands, grid], text=text,
                   targets=targets)  # fmt: skip


def _view_cells(r: dict, pct) -> list[str]:
    return [pct(r["p_full"]), pct(r["p_concat"]), pct(r["p_sharded"])]


def _reading(x: dict) -> str:
    return "detectable" if x["low"] > 0 or x["high"] < 0 else "no detectable difference at this size"


def _kept_reading(x: dict, margin: float) -> str:
    if x["high"] < 0:
        return "detectable drop" + (" (within the margin)" if x["low"] >= -margin else "")
    return f"kept (no drop beyond {100 * margin:.0f} points)" if x["low"] >= -margin else "not shown kept"


def _recipe_values() -> dict:
    """The recipe's values with the part's overrides (`key=value`) applied."""
    values = dict(SETTINGS["vasd"]["recipe_values"])
    for item in SETTINGS["vasd"]["overrides"]:
        key, value = item.split("=", 1)
        if key in values:
            values[key] = type(values[key])(value) if not isinstance(values[key], bool) else value == "true"
    return values


def _vasd_train(training: dict) -> dict:
    """What VASD and the control trained on. The trainer's `rows` is the size of the synthetic train set it was
    given (`synthetic_tasks`); each run saw `max_steps` x `per_device_train_batch_size` of them (one process, no
    gradient accumulation), which is `rows_trained`."""
    values = _recipe_values()
    out = {"rows_trained": values["max_steps"] * values["per_device_train_batch_size"],
           "steps": values["max_steps"], "batch_size": values["per_device_train_batch_size"]}  # fmt: skip
    rows = [t["rows"] for t in training.values() if "rows" in t]
    if rows:
        out["rows_available"] = rows[0]
    out["runs"] = {name: {k: t[k] for k in ("train_loss", "wall_s") if k in t} for name, t in training.items()}
    return out
