"""The collab part's figures, read off what `collab.run` measured: every model's main-table cells, estimates (raw,
corrected, generic floor) and paired differences from the base model, at one training seed from the probes'
summaries and `fic.followup_summary.compare`, at several pooled over the seeds (`collab_seeds`) with each seed's own;
the arms' entries of summary.json, each arm's training, follow-up RL's per seed, and signs of judge gaming in a
probe's turns. `collab_report` builds the section from them, `collab_tables` its tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import repro
from collab_seeds import pooled_difference, pooled_rate, spread
from collab_settings import ARMS, DATASETS, IFBENCH, LABELLED_SEED, REPORTED, SETTINGS, run_name


def _cell(summary: dict, dataset: str) -> dict | None:
    t = f"t{float(SETTINGS['probe']['temperatures'][0])}"
    return repro.rate_only(summary["genuine_rate"].get(dataset, {}).get(t, {}).get("none"))


def turn_stats(folder: Path, dataset: str) -> dict:
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


KEEP = ("diff", "low", "high", "p", "n_items", "detectable", "reading")


def _differences(base: list[dict], other: list[dict]) -> dict:
    """`fic.followup_summary.compare(base, other)` with the fields summary.json keeps."""
    from fic.followup_summary import compare

    out = compare(base, other)
    return {"overall": {k: out["overall"][k] for k in KEEP} if out["overall"] else None,
            "by_dataset": {d: {k: c[k] for k in KEEP} for d, c in out["by_dataset"].items() if c}}  # fmt: skip


def holm_overall(differences: dict) -> dict:
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


def filtered(rows: list[dict], dataset: str | None = None, cell: bool = False) -> list[dict]:
    """The rows of one dataset (all: None); `cell`: only the main table's cell (the probe temperature, unperturbed)."""
    t = float(SETTINGS["probe"]["temperatures"][0])
    return [r for r in rows if (dataset is None or r["dataset"] == dataset)
            and (not cell or (float(r["temperature"]) == t and r["perturbation"] == "none"))]  # fmt: skip


def _kept(d: dict | None, keys: tuple[str, ...] = KEEP) -> dict | None:
    return {k: d[k] for k in keys} if d else None


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
            "labelled_differences": holm_overall(one), "per_seed": {}, "spread": {}}  # fmt: skip
    if not multi:
        out_.update(estimates=out_["labelled_estimates"], differences=out_["labelled_differences"],
                    cells={k: v["cells"] for k, v in labelled.items()})  # fmt: skip
        return out_
    estimates, cells, pooled = {"base": labelled["base"]["estimates"]}, {"base": labelled["base"]["cells"]}, {}
    keep = (*KEEP, "n_seeds")
    for k in (m for m in models if m != "base"):
        runs = {s: repro.read_jsonl(out / f"probe_{run_name(k, s)}" / "samples.jsonl") for s in seeds}
        if_runs = {s: repro.read_jsonl(out / f"ifbench_{run_name(k, s)}" / "samples.jsonl") for s in seeds}
        groups = {**{d: {s: filtered(r, d) for s, r in runs.items()} for d in DATASETS}, "overall": runs,
                  IFBENCH: if_runs}  # fmt: skip
        base = {**{d: filtered(rows["base"], d) for d in DATASETS}, "overall": rows["base"], IFBENCH: if_rows["base"]}
        estimates[k] = {g: {"raw": pooled_rate(r), "corrected": None, "corrected_note": TRAINED_NOT_CORRECTED,
                            "generic_floor": pooled_rate(r, "generic_genuine")} for g, r in groups.items()}  # fmt: skip
        cells[k] = {d: pooled_rate({s: filtered(r, cell=True) for s, r in groups[d].items()}) for d in REPORTED}
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
    out_.update(estimates=estimates, differences=holm_overall(pooled), cells=cells)
    return out_


def trained_info(out: Path, tuning: dict, seeds: list[int]) -> dict:
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


def rl_seed(model: str, seed: int) -> dict:
    e = repro.read_json(Path(model) / "eval_summary.json")
    return {"seed": seed, "reward_first_quarter": e["before"].get("mean_reward"),
            "reward_last_quarter": e["after"].get("mean_reward"), "train_wall_s": e.get("wall_s"),
            "reward_hacking": e.get("reward_hacking")}  # fmt: skip
