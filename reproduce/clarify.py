"""Part 4, clarification as a policy (RegretBench-style regret) and Belief-Augmented Generation (BAG) on SmolLM2.

Two `fic regret` scenarios (products: a catalog category and up to 10 candidate products; AmbigQA: an ambiguous
question and its disambiguations), every episode played under the five rule-based user profiles, with the rule
policies (reference, always-answer, always-ask) beside SmolLM2 as the free `model` policy and SmolLM2 through BAG
and BAG+. In `fic regret` the `bag` policy decides at the first turn from K samples shown to the model; after a
clarification it resamples K answers and answers with the largest cluster when at least `--agree` of them agree,
else abstains. BAG+ is that with agree 0.7; plain BAG here is agree = 1/K (the largest cluster always answers, so it
never abstains after a clarification). Then `fic bag` on AmbigQA items: BAG against the prompt-only baseline (the
same strategy prompt without the samples) on answer accuracy against the hidden intent's answers.

The rule policies are cheap and get more episodes; the model policies get fewer (their first turn is the same under
every profile and computed once). Every episode's regret is against the reference on the same episode and profile,
and the rule policies are also scored on the model policies' episodes (the first episodes of the same seeded
draw), so the rows can be compared on the same episodes.

The effective n is the number of episodes, not episodes x profiles: an episode's request (and a model policy's
first turn) is the same under every profile, so regret and resolution carry intervals with the episode as the
cluster (`fic.estimates.cluster_mean`, `cluster_rate`). The five profiles change what the simulated user says (its
wording and length; `vague` also withholds the value half of the time), but the rule tracker reads the same value
out of a cooperative, terse, verbose or contradicts-once reply (the correction comes in the same reply), so a rule
policy, which acts on the tracked state, can only tell `vague` apart; the profiles reach a model policy only after
it asks a question.

Belief temperature, chosen on dev items before the reported runs: `fic bag --variant bag` runs once per temperature
of `SETTINGS["belief_temperature"]["grid"]` on `dev_items` AmbigQA items taken right after the reported ones in the
same seeded draw (`fic bag --skip bag_items`; disjoint from the reported items, which is checked). A temperature
whose dev beliefs are constant (every item at ln K, where the K samples all differ, or every item at 0) is refused:
such a belief cannot route anything, and an AUROC over it is 0.5 by ties (the fresh clone of 7eebd76 chose T=1.0 on an
AUROC of 0.60 over 5 ambiguous items, and every reported belief was then at ln 5). Of the others, the highest dev
AUROC of the belief entropy for the item being ambiguous; ties: the most spread (share below ln K nearest one half),
then the higher temperature (`choose_temperature`). Every reported BAG run uses it: both `fic bag` variants
(prompt_only only records its belief's entropy) and the `fic regret --policy bag` runs (BAG and BAG+). The grid runs
at every scale (three dev runs of 10 items; not yet timed at these sizes).

Sizes: 30 reported `fic bag` items and 10 episodes for each model policy, so that no interval rests on fewer than 10
clusters (`fic.estimates.MIN_CLUSTERS`); the routing of BAG and the prompt-only baseline on the same items is compared
with Fisher's exact test (`routing_test`). Each regret row is split into its parts (`fic.metrics.regret_parts`).

Strategy faithfulness: does BAG's route follow its belief? The K samples are grouped by normalised answer
(`fic.eval.clarify.text.cluster_answers`) before their semantic entropy; the table gives the mean entropy per route
and the AUROC of entropy for not answering directly (`clarify.faithfulness` in summary.json).
"""

from __future__ import annotations

from pathlib import Path

import repro
from repro import Section, Table

TITLE = "Clarification as a policy (RegretBench-style regret) and Belief-Augmented Generation (BAG)"
SETTINGS = {
    "model": repro.MODEL,
    "data": {"products": "products_dummyjson/products.json", "ambigqa": "ambigqa/dev_light.json"},
    "scenarios": ["products", "ambigqa"],
    "profiles": "all",
    "user": "rules",
    "tracker": "rules",
    "embedder": "minilm",
    "cost": 0.1,
    "max_turns": 6,
    "max_intents": 10,
    "rule_episodes": 40,
    "model_episodes": 10,
    "bag_episodes": 10,
    "k": 5,
    "agree": {"bag": 0.2, "bag_plus": 0.7},
    "max_new_tokens": 32,
    "bag_items": 30,
    "bag_variants": ["prompt_only", "bag"],
    "bag_profile": "cooperative",
    "seed": 0,
    "belief_clusters": "answer_core",
    "belief_temperature": {
        "grid": [0.3, 0.7, 1.0], "dev_items": 10, "variant": "bag",
        "criterion": "a temperature whose beliefs are constant on dev (every item at ln K, or every item at 0) is "
                     "refused; of the others, the highest dev AUROC of the belief's semantic entropy for the item "
                     "being ambiguous (AmbigQA: more than one disambiguation); ties or no AUROC: the share of items "
                     "below ln K nearest one half (the most spread), then the higher temperature",
    },
}  # fmt: skip
# `belief_clusters`: how BAG's samples are grouped before their entropy (`fic.eval.clarify.text.cluster_answers`).
# A folder made when whole strings were compared holds entropies of log K everywhere and is refused, not reused.
RULE_POLICIES = ("reference", "always_answer", "always_ask")
MODEL_POLICIES = ("model", "bag", "bag_plus")
POLICIES = (*RULE_POLICIES, *MODEL_POLICIES)
PROFILES = ("cooperative", "terse", "vague", "contradicts_once", "verbose")
KEEP = (
    "episodes", "regret", "value", "reference_value", "resolution_rate", "resolution", "reference_resolution_rate",
    "turns_mean", "reference_turns_mean", "user_tokens_mean", "ineffective_clarification", "stopping_errors",
    "abstain_rate", "out_of_turns_rate",
)  # fmt: skip


def _episodes(policy: str) -> int:
    if policy in RULE_POLICIES:
        return SETTINGS["rule_episodes"]
    return SETTINGS["model_episodes"] if policy == "model" else SETTINGS["bag_episodes"]


def _regret(out: Path, scenario: str, policy: str, belief_temperature: float) -> Path:
    s = SETTINGS
    folder = out / "regret" / f"{scenario}-{policy}"
    args = [
        "regret", "--scenario", scenario, "--data", repro.SHARED / s["data"][scenario],
        "--policy", "bag" if policy.startswith("bag") else policy, "--profile", s["profiles"],
        "--limit", _episodes(policy), "--seed", s["seed"], "--cost", s["cost"], "--max-turns", s["max_turns"],
        "--max-intents", s["max_intents"], "--user", s["user"], "--tracker", s["tracker"], "--embedder", s["embedder"],
        "--out", folder,
    ]  # fmt: skip
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


def dev_belief(records: list[dict], k: int) -> dict:
    """A belief temperature's dev numbers from its `fic bag` items: n, ambiguous items, mean entropy, share of items
    below ln K, and the AUROC of the entropy for the item being ambiguous (AmbigQA's own label: more than one
    disambiguation; None when the dev items hold one class only)."""
    from fic.metrics import auroc

    entropies = [float(r["semantic_entropy"]) for r in records]
    labels = [bool(r["ambiguous"]) for r in records]
    return {
        "n": len(records),
        "ambiguous": sum(labels),
        **entropy_spread(entropies, k),
        "auroc_ambiguous": auroc(entropies, labels) if records else None,
    }


def entropy_spread(entropies: list[float], k: int) -> dict:
    """Mean entropy and the share of items below ln K (K samples that all differ give ln K); None without items."""
    import math

    n = len(entropies)
    return {
        "entropy_mean": sum(entropies) / n if n else None,
        "below_log_k": sum(e < math.log(k) - 1e-9 for e in entropies) / n if n else None,
    }


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


def _belief_temperature(out: Path) -> dict:
    """Run the dev grid and choose the belief temperature (`clarify.belief_temperature` in summary.json)."""
    s, b = SETTINGS, SETTINGS["belief_temperature"]
    folders = {float(t): _bag(out, b["variant"], float(t), dev=True) for t in b["grid"]}
    dev = {t: dev_belief(_items(folder), s["k"]) for t, folder in folders.items()}
    ids = {t: {str(r["id"]) for r in _items(folder)} for t, folder in folders.items()}
    return {
        "grid": [float(t) for t in b["grid"]], "dev_items": b["dev_items"], "skip": s["bag_items"],
        "variant": b["variant"], "criterion": b["criterion"], "dev": {str(t): d for t, d in dev.items()},
        **choose_temperature(dev), "dev_ids": sorted(set().union(*ids.values())),
    }  # fmt: skip


def _check_disjoint(choice: dict, reported: dict[str, list[dict]]) -> None:
    """The dev items must not be reported items: a choice made on them would be a choice made on the test."""
    shared = set(choice["dev_ids"]) & {str(r["id"]) for recs in reported.values() for r in recs}
    if shared:
        raise repro.StepError(f"belief temperature: dev items {sorted(shared)} are also reported items")


def _keep(group: dict) -> dict:
    kept = {k: group[k] for k in KEEP if k in group}
    if "resolution_rate" not in kept and "resolution" in kept:
        kept["resolution_rate"] = kept["resolution"]["rate"]
    kept["ineffective_clarification_rate"] = group["ineffective_clarification"]["rate"]
    kept["stopping_error_rate"] = group["stopping_errors"]["rate"]
    return kept


def _records(folder: Path) -> list[dict]:
    from fic.jsonl import load_keyed

    return list(load_keyed(folder / "episodes.jsonl").values())


def _items(folder: Path) -> list[dict]:
    from fic.jsonl import load_keyed

    return list(load_keyed(folder / "items.jsonl").values())


def _matched(folder: Path, episode_ids: set[str]) -> dict:
    """A rule policy's metrics on the model policies' episodes (the first ones of the same seeded draw)."""
    from fic.eval.clarify.regret import summarize_group

    records = [r for r in _records(folder) if r["episode_id"] in episode_ids]
    kept = {k: v for k, v in _keep(summarize_group(records)).items() if k != "episodes"}
    return {"episodes": len(records), **kept, "clustered": clustered(records)}


def clustered(records: list[dict]) -> dict:
    """Regret and resolution of episode x profile records with the episode as the cluster: the profiles of one
    episode share its request, so the effective n is `n_episodes`, not `n`."""
    from fic.estimates import cluster_mean, cluster_rate

    ids = [r["episode_id"] for r in records]
    return {
        "n_episodes": len(set(ids)),
        "n": len(records),
        "regret": cluster_mean([r["regret"] for r in records], ids),
        "resolution": cluster_rate([bool(r["resolved"]) for r in records], ids),
    }


ACT_ROUTES = {"answer": "answer", "ask": "clarify", "abstain": "abstain", "out_of_turns": "clarify"}


def first_turns(records: list[dict]) -> list[dict]:
    """BAG's first decision of each episode of a `fic regret --policy bag` run, once per episode (it is the same
    under every profile): {"key", "route", "semantic_entropy"}. The entropy is in the first act's `info`."""
    out: dict[str, dict] = {}
    for r in records:
        if r["episode_id"] in out:
            continue
        info = (r["questions"][0] if r["questions"] else r["final"]).get("info") or {}
        if "semantic_entropy" not in info:
            continue
        act = r["decisions"][0]["act"] if r.get("decisions") else r["final"]["act"]
        out[r["episode_id"]] = {
            "key": r["episode_id"],
            "route": ACT_ROUTES[act],
            "semantic_entropy": info["semantic_entropy"],
        }
    return list(out.values())


def faithfulness(records: list[dict], k: int) -> dict:
    """Strategy faithfulness of BAG decisions ({"route", "semantic_entropy"} each, one per item): per route its
    count, share and mean entropy; the AUROC of entropy for not answering directly with a bootstrap interval over
    items; and the share of items whose entropy is below log K (K samples that all differ give log K, and an AUROC
    over a constant is 0.5 by construction)."""
    from fic.estimates import bootstrap_auroc

    n = len(records)
    entropies = [float(r["semantic_entropy"]) for r in records]
    routes = [r["route"] for r in records]
    by_route = {}
    for route in ("answer", "clarify", "abstain"):
        values = [e for e, r in zip(entropies, routes) if r == route]
        by_route[route] = {
            "n": len(values), "share": len(values) / n if n else 0.0,
            "entropy_mean": sum(values) / len(values) if values else None,
        }  # fmt: skip
    return {
        "n": n,
        "k": k,
        **entropy_spread(entropies, k),
        "by_route": by_route,
        "auroc_not_direct": bootstrap_auroc(entropies, [r != "answer" for r in routes]),
    }


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
    # imported here, not at the top: clarify_report imports this module
    from clarify_report import (
        REGRET_COLUMNS,
        _accuracy_cell,
        _f,
        _faith_rows,
        _interval,
        _pct,
        _routing_table,
        _row,
        _temperature_table,
        _text,
    )

    from fic.metrics import REGRET_PARTS, regret_parts, wilson_interval

    s = SETTINGS
    choice = _belief_temperature(out)
    temp = choice["chosen"]
    folders = {(sc, p): _regret(out, sc, p, temp) for sc in s["scenarios"] for p in POLICIES}
    bags = {v: _bag(out, v, temp) for v in s["bag_variants"]}
    _check_disjoint(choice, {v: _items(folder) for v, folder in bags.items()})

    summary: dict = {}
    tables: list[Table] = []
    for sc in s["scenarios"]:
        summary[sc] = {}
        full = {p: repro.read_json(folders[(sc, p)] / "summary.json") for p in POLICIES}
        records = {p: _records(folders[(sc, p)]) for p in POLICIES}
        by_episode = {p: clustered(records[p]) for p in POLICIES}
        model_ids = {r["episode_id"] for r in records["model"]}
        for p in POLICIES:
            entry = {**_keep(full[p]), "clustered": by_episode[p]}
            entry["per_profile"] = {pr: _keep(g) for pr, g in full[p]["per_profile"].items()}
            if p in RULE_POLICIES:
                entry["matched"] = _matched(folders[(sc, p)], model_ids)
            summary[sc][p] = entry
        tables.append(Table(
            f"{sc}: regret and its parts by policy, all five user profiles pooled (rule policies on "
            f"{s['rule_episodes']} episodes x 5 profiles, SmolLM2 `model` on {s['model_episodes']}, BAG/BAG+ on "
            f"{s['bag_episodes']}; regret = V(reference) - V(policy) on the same episode and profile, "
            f"V = 1[resolved] - {s['cost']} x turns; intervals with the episode as the cluster, so the effective n "
            "is the number of episodes: cluster bootstrap for regret (too narrow under about 10 episodes), Wilson "
            "at the clustered effective n for resolution)",
            REGRET_COLUMNS, [_row(p, full[p], by_episode[p]) for p in POLICIES],
        ))  # fmt: skip
        matched_rows = []
        for p in POLICIES:
            g = summary[sc][p].get("matched") or summary[sc][p]
            c = g["clustered"]
            row = [p, f"{c['n_episodes']} x {c['n'] // max(c['n_episodes'], 1)}", _interval(c["regret"]),
                   _pct(g["resolution_rate"]), _f(g["turns_mean"], 2)]  # fmt: skip
            matched_rows.append(row)
        tables.append(Table(
            f"{sc}: the rule policies on the model policy's {s['model_episodes']} episodes (the first of the same "
            f"seeded draw) beside the model policies (BAG/BAG+ on the first {s['bag_episodes']} of them; regret "
            "interval by cluster bootstrap over episodes)",
            ["policy", "episodes x profiles", "regret [95% CI]", "resolution %", "turns"], matched_rows,
        ))  # fmt: skip
        parts = {p: regret_parts(records[p]) for p in POLICIES}
        for p in POLICIES:
            summary[sc][p]["regret_parts"] = parts[p]
        tables.append(Table(
            f"{sc}: each policy's regret in parts (`fic.metrics.regret_parts`; mean over its episodes x profiles, "
            "summing to its regret): the reference resolved and the policy did not because its answer named no "
            "candidate, named a wrong one after fewer questions than the reference (under-clarifying) or after as "
            "many (wrong after asking), or it abstained / ran out of turns; the turn cost of asking more than the "
            "reference (over-clarifying) or less (saved, negative); resolved where the reference did not (negative)",
            ["policy", "regret", *[name.replace("_", " ") for name in REGRET_PARTS]],
            [[p, _f(sum(parts[p].values())), *[_f(parts[p][k]) for k in REGRET_PARTS]] for p in POLICIES],
        ))  # fmt: skip
        profile_rows = []
        for p in POLICIES:
            for pr in PROFILES:
                g = full[p]["per_profile"].get(pr)
                if g is None:
                    continue
                ineff, stop = g["ineffective_clarification"], g["stopping_errors"]
                profile_rows.append([
                    p, pr, g["episodes"], _f(g["regret"]), _pct(g["resolution"]["rate"]), _f(g["turns_mean"], 2),
                    f"{_pct(ineff['rate'])} ({ineff['questions']} q)", _pct(stop["answer_early_rate"]),
                    _pct(stop["ask_late_rate"]),
                ])  # fmt: skip
        tables.append(Table(
            f"{sc}: per user profile (regret, intent resolution, interaction cost in turns, ineffective "
            "clarification, stopping errors)",
            ["policy", "profile", "episodes", "regret", "resolution %", "turns", "ineffective %", "answered early %",
             "asked late %"], profile_rows,
        ))  # fmt: skip

    faith: dict = {}
    bag_summary, bag_rows = {}, []
    for v in s["bag_variants"]:
        b = repro.read_json(bags[v] / "summary.json")
        recs = _items(bags[v])
        faith[f"bag_items/{v}"] = faithfulness(recs, s["k"])
        n = len(recs)
        correct_all = sum(1 for r in recs if r["correct"])
        correct_any = sum(1 for r in recs if r["correct_any"])
        low, high = wilson_interval(b["correct"], b["answered"])
        routing = b["routing"]
        bag_summary[v] = {
            "accuracy": b["accuracy"], "low": low, "high": high, "answered": b["answered"], "correct": b["correct"],
            "abstained": b["abstained"], "n": b["n"], "accuracy_all_items": correct_all / n if n else 0.0,
            "accuracy_any_intent": correct_any / b["answered"] if b["answered"] else 0.0,
            "routing": routing, "auroc_entropy_not_direct": b["faithfulness"]["auroc_entropy_not_direct"],
            "semantic_entropy_mean": b["faithfulness"]["semantic_entropy_mean"],
        }  # fmt: skip
        bag_rows.append([
            v, b["n"], _accuracy_cell(b), _pct(correct_all / n if n else None), _pct(bag_summary[v]["accuracy_any_intent"]),
            b["abstained"], *[_pct(routing.get(r, {}).get("share", 0.0)) for r in ("answer", "clarify", "abstain")],
            _f(b["faithfulness"]["semantic_entropy_mean"], 2), _f(b["faithfulness"]["auroc_entropy_not_direct"], 2),
        ])  # fmt: skip
    summary["bag_vs_prompt_only"] = bag_summary
    summary["routing_test"] = routing_test(bag_summary)
    tables.append(_routing_table(summary["routing_test"], s["bag_items"]))
    summary["belief_temperature"] = choice
    for sc in s["scenarios"]:
        faith[f"regret_first_turn/{sc}"] = faithfulness(first_turns(_records(folders[(sc, "bag")])), s["k"])
    summary["faithfulness"] = faith
    tables.append(_temperature_table(choice, s["k"]))
    tables.append(Table(
        f"BAG against the prompt-only baseline on AmbigQA ({s['bag_items']} seeded items of dev_light, ambiguous and "
        f"not; hidden intent drawn per item; K={s['k']} samples at T={temp}, chosen on dev items; a clarification "
        f"is answered by the `{s['bag_profile']}` rule user; accuracy against the hidden intent's answers, "
        "abstentions excluded)",
        ["variant", "items", "accuracy % [95% CI] (correct/answered)", "accuracy % of all items",
         "accuracy % against any intent", "abstained", "routed: answer %", "clarify %", "abstain %",
         "semantic entropy (mean)", "AUROC entropy -> not direct"], bag_rows,
    ))  # fmt: skip

    tables.append(Table(
        f"Strategy faithfulness: BAG's route beside the semantic entropy of its K={s['k']} samples (grouped by "
        "normalised answer before the entropy: first sentence, SQuAD-normalised, lead-ins, the user's words and stop "
        "words removed, equal or contained as whole words; in `fic regret` a sample naming a candidate clusters by "
        "that candidate). `bag_items/*`: `fic bag` on AmbigQA, one row per item (prompt_only decides without "
        "seeing the samples); `regret_first_turn/*`: BAG's first decision, once per episode. AUROC of entropy for "
        "not answering directly, 95% bootstrap interval over items; 0.5 means the route ignores the belief",
        ["run", "route", "n", "share %", "entropy mean (nats)", "AUROC entropy -> not direct [95% CI]"],
        [row for name, f in faith.items() for row in _faith_rows(name, f)],
    ))  # fmt: skip

    text = _text(summary)
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
        tables=tables,
        text=text,
        targets=[],
    )
