"""Part 4: clarification as a policy (`fic regret`) and Belief-Augmented Generation (`fic bag`) on SmolLM2.

Runs `fic bag` on dev items once per belief temperature of the grid and chooses one (`choose_temperature`), then
`fic regret` for every scenario and policy and `fic bag` for every variant at it, and reads their summary.json files:
every interval, regret part and faithfulness figure is the one the command wrote (`fic.eval.clarify.stats`). Settings:
`reproduce/settings/clarify.json`; tables and text: `clarify_report`; why it is set up so: `reproduce/results/README.md`.
"""

from __future__ import annotations

from pathlib import Path

import clarify_report as report
import repro
from clarify_report import MODEL_POLICIES, POLICIES, RULE_POLICIES
from repro import Section

TITLE = "Clarification as a policy (RegretBench-style regret) and Belief-Augmented Generation (BAG)"
SETTINGS = {"model": repro.MODEL, **repro.load_settings("clarify")}
# what a reported row reads from a `fic regret` summary (overall, per profile and on the first episodes)
KEEP = (
    "episodes", "regret", "value", "reference_value", "resolution_rate", "resolution", "reference_resolution_rate",
    "turns_mean", "reference_turns_mean", "user_tokens_mean", "ineffective_clarification", "stopping_errors",
    "abstain_rate", "out_of_turns_rate",
)  # fmt: skip
# what the part reads in each summary.json; a summary without it was written by an older fic
REGRET_NEEDS = ("regret_interval", "n_episodes", "resolution", "regret_parts", "per_profile")
BAG_NEEDS = ("accuracy_interval", "accuracy_all_items", "accuracy_any_intent", "faithfulness", "belief")
FAITH_KEYS = ("n", "k", "entropy_mean", "below_log_k", "by_route", "auroc_not_direct")


def regret_needs(policy: str) -> tuple[str, ...]:
    """`REGRET_NEEDS`, with `first` for a rule policy (`--first`) and `faithfulness` for BAG."""
    extra = ("first",) if policy in RULE_POLICIES else ("faithfulness",) if policy == "bag" else ()
    return (*REGRET_NEEDS, *extra)


def _episodes(policy: str) -> int:
    if policy in RULE_POLICIES:
        return SETTINGS["rule_episodes"]
    return SETTINGS["model_episodes"] if policy == "model" else SETTINGS["bag_episodes"]


def _regret(out: Path, scenario: str, policy: str, belief_temperature: float) -> Path:
    """`fic regret` for one scenario and policy; a rule policy also summarises the model policy's episodes (the
    first `model_episodes` of the same seeded draw) under `first`."""
    s = SETTINGS
    folder = out / "regret" / f"{scenario}-{policy}"
    args = [
        "regret", "--scenario", scenario, "--data", repro.SHARED / s["data"][scenario],
        "--policy", "bag" if policy.startswith("bag") else policy, "--profile", s["profiles"],
        "--limit", _episodes(policy), "--seed", s["seed"], "--cost", s["cost"], "--max-turns", s["max_turns"],
        "--max-intents", s["max_intents"], "--user", s["user"], "--tracker", s["tracker"], "--embedder", s["embedder"],
        "--out", folder,
    ]  # fmt: skip
    if policy in RULE_POLICIES:
        args += ["--first", s["model_episodes"]]
    if policy in MODEL_POLICIES:
        args += ["--model", s["model"], "--max-new-tokens", s["max_new_tokens"]]
    if policy.startswith("bag"):
        args += ["--k", s["k"], "--agree", s["agree"][policy], "--belief-temperature", belief_temperature]
    repro.fic(args, out / "logs" / f"regret-{scenario}-{policy}.log")
    return folder


def _bag(out: Path, variant: str, belief_temperature: float, dev: bool = False) -> Path:
    """`fic bag` on the reported items (the first `bag_items` of the seeded draw), or with `dev` on the
    `belief_temperature.dev_items` items right after them (`--skip bag_items`), never the reported ones."""
    s = SETTINGS
    if dev:
        folder = out / "bag_dev" / f"{variant}-t{belief_temperature}"
        select = ["--skip", s["bag_items"], "--limit", s["belief_temperature"]["dev_items"]]
        log = out / "logs" / f"bag-dev-{variant}-t{belief_temperature}.log"
    else:
        folder, select, log = out / "bag" / variant, ["--limit", s["bag_items"]], out / "logs" / f"bag-{variant}.log"
    repro.fic([
        "bag", "--model", s["model"], "--data", repro.SHARED / s["data"]["ambigqa"], "--variant", variant,
        "--k", s["k"], "--agree", s["agree"]["bag_plus"], "--belief-temperature", belief_temperature, *select,
        "--profile", s["bag_profile"], "--max-new-tokens", s["max_new_tokens"], "--seed", s["seed"], "--out", folder,
    ], log)  # fmt: skip
    return folder


def read_summary(folder: Path, command: str, needs: tuple[str, ...]) -> dict:
    """The summary.json `fic COMMAND` wrote into `folder`; a StepError in one line when it lacks a statistic the part
    reads."""
    path = folder / "summary.json"
    summary = repro.read_json(path)
    missing = [k for k in needs if k not in summary]
    if missing:
        raise repro.StepError(
            f"{path} has no {', '.join(missing)} (written by an older `fic {command}`): rerun `fic {command}` into "
            f"{folder} (it resumes and rewrites the summary), or `python reproduce/run.py --redo clarify`"
        )
    return summary


def item_ids(folder: Path) -> set[str]:
    """The ids of the items of a `fic bag` folder."""
    from fic.jsonl import load_keyed

    return {str(r["id"]) for r in load_keyed(folder / "items.jsonl").values()}


def dev_belief(summary: dict) -> dict:
    """A belief temperature's dev numbers, read from its `fic bag` summary: n, ambiguous items, mean entropy, share
    of items below ln K, and the AUROC of the entropy for the item being ambiguous (None with one class only)."""
    f, b = summary["faithfulness"], summary["belief"]
    return {"n": f["n"], "ambiguous": b["ambiguous"], "entropy_mean": f["entropy_mean"],
            "below_log_k": f["below_log_k"], "auroc_ambiguous": b["auroc_ambiguous"]}  # fmt: skip


def constant_belief(d: dict) -> bool:
    """Dev beliefs that cannot route anything: every item at ln K (`below_log_k` 0) or every item at 0 entropy."""
    return d["below_log_k"] is not None and (d["below_log_k"] == 0 or (d["entropy_mean"] or 0.0) <= 1e-9)


def choose_temperature(dev: dict[float, dict]) -> dict:
    """{"chosen", "informative", "refused"}: the grid temperature whose dev beliefs are not constant
    (`constant_belief`) with the highest AUROC; ties (to 1e-9) or no AUROC: the share below ln K nearest one half,
    then the higher temperature. When every temperature's beliefs are constant, `informative` is False and the
    chosen one is the highest temperature (BAG then shows the model beliefs that say nothing, and the report says so).
    """
    refused = sorted(t for t, d in dev.items() if constant_belief(d))
    usable = [t for t in dev if t not in refused]

    def rank(t: float) -> tuple:
        d = dev[t]
        auc = -1.0 if d["auroc_ambiguous"] is None else round(d["auroc_ambiguous"], 9)
        return auc, -round(abs((d["below_log_k"] or 0.0) - 0.5), 9), t

    chosen = max(usable, key=rank) if usable else max(dev)
    return {"chosen": chosen, "informative": bool(usable), "refused": refused}


def belief_temperature(out: Path) -> dict:
    """Run the dev grid and choose the belief temperature (`clarify.belief_temperature` in summary.json)."""
    s, b = SETTINGS, SETTINGS["belief_temperature"]
    folders = {float(t): _bag(out, b["variant"], float(t), dev=True) for t in b["grid"]}
    dev = {t: dev_belief(read_summary(folder, "bag", BAG_NEEDS)) for t, folder in folders.items()}
    return {
        "grid": [float(t) for t in b["grid"]], "dev_items": b["dev_items"], "skip": s["bag_items"],
        "variant": b["variant"], "criterion": b["criterion"], "dev": {str(t): d for t, d in dev.items()},
        **choose_temperature(dev), "dev_ids": sorted(set().union(*map(item_ids, folders.values()))),
    }  # fmt: skip


def check_disjoint(choice: dict, reported: set[str]) -> None:
    """The dev items must not be reported items: a choice made on them would be a choice made on the test."""
    shared = set(choice["dev_ids"]) & reported
    if shared:
        raise repro.StepError(f"belief temperature: dev items {sorted(shared)} are also reported items")


def keep(group: dict) -> dict:
    """A reported row of a `fic regret` summary group: `KEEP`, the two rates, and its episode-clustered intervals."""
    kept = {k: group[k] for k in KEEP if k in group}
    kept["resolution_rate"] = group["resolution"]["rate"]
    kept["ineffective_clarification_rate"] = group["ineffective_clarification"]["rate"]
    kept["stopping_error_rate"] = group["stopping_errors"]["rate"]
    kept["clustered"] = {"n_episodes": group["n_episodes"], "n": group["episodes"],
                         "regret": group["regret_interval"], "resolution": group["resolution"]}  # fmt: skip
    return kept


def regret_entry(summary: dict, rule: bool) -> dict:
    """The part's entry of one scenario and policy, read from its `fic regret` summary."""
    entry = {**keep(summary), "regret_parts": summary["regret_parts"]}
    entry["per_profile"] = {pr: keep(g) for pr, g in summary["per_profile"].items()}
    if rule:  # the rule policy on the model policy's episodes (`fic regret --first`)
        entry["matched"] = keep(summary["first"])
    return entry


def bag_entry(b: dict) -> dict:
    """The part's entry of one `fic bag` variant, read from its summary (`n_items`: the answered items its accuracy
    interval rests on)."""
    acc = b["accuracy_interval"]
    return {
        "accuracy": b["accuracy"], "low": acc["low"], "high": acc["high"], "n_items": acc.get("n_items"),
        "answered": b["answered"], "correct": b["correct"], "abstained": b["abstained"], "n": b["n"],
        "accuracy_all_items": b["accuracy_all_items"], "accuracy_any_intent": b["accuracy_any_intent"],
        "routing": b["routing"], "auroc_entropy_not_direct": b["faithfulness"]["auroc_entropy_not_direct"],
        "semantic_entropy_mean": b["faithfulness"]["entropy_mean"],
    }  # fmt: skip


def routing_test(bag: dict) -> dict:
    """How often BAG and the prompt-only baseline clarify on the same items, and Fisher's exact test of the 2x2 table
    (variant x clarified or not): whether showing the model its K samples changes how often it asks."""
    from fic.metrics import fisher_exact

    counts = {}
    for variant in ("bag", "prompt_only"):
        routing, n = bag[variant]["routing"], bag[variant]["n"]
        clarified = (routing.get("clarify") or {}).get("n", 0)
        counts[variant] = {"clarify": clarified, "other": n - clarified, "n": n}
    table = [[counts[v]["clarify"], counts[v]["other"]] for v in ("bag", "prompt_only")]
    return {**counts, "fisher_p": fisher_exact(table)}


def run(out: Path) -> Section:
    s = SETTINGS
    choice = belief_temperature(out)
    temp = choice["chosen"]
    folders = {(sc, p): _regret(out, sc, p, temp) for sc in s["scenarios"] for p in POLICIES}
    bags = {v: _bag(out, v, temp) for v in s["bag_variants"]}
    check_disjoint(choice, set().union(*map(item_ids, bags.values())))

    summary: dict = {}
    faith: dict = {}
    regret = {(sc, p): read_summary(folder, "regret", regret_needs(p)) for (sc, p), folder in folders.items()}
    for sc in s["scenarios"]:
        summary[sc] = {p: regret_entry(regret[(sc, p)], p in RULE_POLICIES) for p in POLICIES}
    bag = {v: read_summary(folder, "bag", BAG_NEEDS) for v, folder in bags.items()}
    for v in s["bag_variants"]:
        faith[f"bag_items/{v}"] = {k: bag[v]["faithfulness"][k] for k in FAITH_KEYS}
    summary["bag_vs_prompt_only"] = {v: bag_entry(bag[v]) for v in s["bag_variants"]}
    summary["routing_test"] = routing_test(summary["bag_vs_prompt_only"])
    summary["belief_temperature"] = choice
    for sc in s["scenarios"]:
        faith[f"regret_first_turn/{sc}"] = {k: regret[(sc, "bag")]["faithfulness"][k] for k in FAITH_KEYS}
    summary["faithfulness"] = faith

    return Section(
        summary=summary,
        about={
            "model": "SmolLM2-135M-Instruct (`smollm2`), fp32, CPU, as the `model` policy (greedy) and inside BAG "
            f"(K={s['k']} samples at T={temp}, chosen on dev items, greedy strategy prompt); "
            f"{s['max_new_tokens']} tokens per reply",
            "data": f"products: `{s['data']['products']}` (DummyJSON catalog, up to {s['max_intents']} candidates per "
            f"episode); AmbigQA: `{s['data']['ambigqa']}` (ambiguous items with >= 2 disambiguations)",
            "sizes": f"episodes x 5 profiles: rule policies {s['rule_episodes']}, `model` {s['model_episodes']}, "
            f"BAG/BAG+ {s['bag_episodes']} per scenario; `fic bag` {s['bag_items']} AmbigQA items per variant, and "
            f"{choice['dev_items']} other (dev) items per belief temperature ({', '.join(map(str, choice['grid']))}); "
            f"cost {s['cost']} per turn, at most {s['max_turns']} clarification turns",
            "seeds": str(s["seed"]),
            "simulated user": "rule-based offline user (no LLM) under five profiles (cooperative, terse, vague, "
            "contradicts once, verbose), all-MiniLM-L6-v2 fallback for questions its rules cannot place; rule "
            "state tracker; the reference plans with each profile's reply model",
            "judge": "none (intent resolution and answer accuracy are checked by rules)",
        },
        tables=report.tables(summary, s),
        text=report.text(summary, s),
        targets=[],
    )
