"""The clarify part's report: its tables and text, built from the part's summary (`clarify.run`) and settings alone.
The policies it reports, in row order, are named here; `clarify` runs each of them."""

from __future__ import annotations

from repro import Table, few_clusters

from fic.eval.clarify.user import PROFILES
from fic.metrics import REGRET_PARTS

RULE_POLICIES = ("reference", "always_answer", "always_ask")
MODEL_POLICIES = ("model", "bag", "bag_plus")
POLICIES = (*RULE_POLICIES, *MODEL_POLICIES)


def _temperature_table(choice: dict, k: int) -> Table:
    rows = []
    for t, d in choice["dev"].items():
        auc = "n/a (one class)" if d["auroc_ambiguous"] is None else f"{d['auroc_ambiguous']:.2f}"
        chosen = (
            "yes" if float(t) == choice["chosen"] else "refused: constant" if float(t) in choice["refused"] else ""
        )
        rows.append([t, d["n"], d["ambiguous"], _f(d["entropy_mean"], 2), _pct(d["below_log_k"]), auc, chosen])
    return Table(
        f"BAG's belief temperature, chosen on {choice['dev_items']} dev AmbigQA items (positions "
        f"{choice['skip'] + 1}-{choice['skip'] + choice['dev_items']} of the seeded draw, `fic bag --variant "
        f"{choice['variant']} --skip {choice['skip']}`), never on the {choice['skip']} reported items: "
        f"{choice['criterion']}; the dev AUROC is of the semantic entropy of K={k} samples for the item being ambiguous "
        "(more than one disambiguation); on so few dev items it is a coarse guide, not a result",
        ["belief temperature", "dev items", "ambiguous", "entropy mean (nats)", f"below ln {k} %",
         "AUROC entropy -> ambiguous", "chosen"], rows,
    )  # fmt: skip


def _routing_table(test: dict, items: int) -> Table:
    rows = [[v, test[v]["n"], test[v]["clarify"], _pct(test[v]["clarify"] / test[v]["n"] if test[v]["n"] else None)]
            for v in ("bag", "prompt_only")]  # fmt: skip
    return Table(
        f"Routing: how often BAG and the prompt-only baseline clarify on the same {items} AmbigQA items; two-sided "
        f"Fisher exact test of variant x clarified: p = {test['fisher_p']:.3f}",
        ["variant", "items", "clarified", "clarified %"], rows,
    )  # fmt: skip


def _auroc_cell(auc: dict) -> str:
    """An AUROC with its interval, or why there is none (one class, every score tied, too few items)."""
    if auc["auroc"] is None:
        return f"n/a ({auc.get('note') or 'one class'})"
    return f"{auc['auroc']:.2f} [{auc['low']:.2f}, {auc['high']:.2f}]"


def _faith_rows(name: str, f: dict) -> list[list]:
    auc_cell = _auroc_cell(f["auroc_not_direct"])
    rows = [
        [name, route, g["n"], _pct(g["share"]), _f(g["entropy_mean"], 2), ""] for route, g in f["by_route"].items()
    ]
    below = f"{_pct(f['below_log_k'])}% below ln {f['k']}"
    return [*rows, [name, "all", f["n"], below, _f(f["entropy_mean"], 2), auc_cell]]


def _interval(cell: dict, digits: int = 3) -> str:
    if cell["mean"] is None and cell.get("note"):  # fewer than fic.estimates.MIN_CLUSTERS episodes
        return f"n/e ({cell['note']})"
    return f"{_f(cell['mean'], digits)} [{_f(cell['low'], digits)}, {_f(cell['high'], digits)}]"


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _row(policy: str, g: dict, c: dict) -> list:
    ineff, stop = g["ineffective_clarification"], g["stopping_errors"]
    res = c["resolution"]
    return [
        policy, f"{c['n_episodes']} x {c['n'] // max(c['n_episodes'], 1)}", _interval(c["regret"]), _f(g["value"]),
        few_clusters(res) or f"{_pct(res['rate'])} [{_pct(res['low'])}, {_pct(res['high'])}]", _f(g["turns_mean"], 2),
        _f(g["user_tokens_mean"], 1), f"{_pct(ineff['rate'])} ({ineff['questions']} q)",
        _pct(stop["answer_early_rate"]), _pct(stop["ask_late_rate"]), _pct(g["abstain_rate"]),
        _pct(g["out_of_turns_rate"]),
    ]  # fmt: skip


REGRET_COLUMNS = [
    "policy", "episodes x profiles", "regret [95% CI]", "value", "resolution % [95% CI]", "turns (cost)", "user tokens",
    "ineffective clarification % (questions)", "answered early %", "asked late %", "abstained %", "out of turns %",
]  # fmt: skip


def _accuracy_cell(b: dict) -> str:
    """Accuracy with its interval and (correct/answered); not estimable under 10 answered items (`few_clusters`)."""
    figure = few_clusters(b) or f"{_pct(b['accuracy'])} [{_pct(b['low'])}, {_pct(b['high'])}]"
    return f"{figure} ({b['correct']}/{b['answered']})"


def tables(summary: dict, s: dict) -> list[Table]:
    """The part's tables, in order: per scenario regret by policy, the rule policies on the model's episodes, regret
    in parts and per user profile; then BAG's routing test, belief temperature, accuracy and faithfulness."""
    out: list[Table] = []
    for sc in s["scenarios"]:
        row = summary[sc]
        out.append(Table(
            f"{sc}: regret and its parts by policy, all five user profiles pooled (rule policies on "
            f"{s['rule_episodes']} episodes x 5 profiles, SmolLM2 `model` on {s['model_episodes']}, BAG/BAG+ on "
            f"{s['bag_episodes']}; regret = V(reference) - V(policy) on the same episode and profile, "
            f"V = 1[resolved] - {s['cost']} x turns; intervals with the episode as the cluster, so the effective n "
            "is the number of episodes: cluster bootstrap for regret (too narrow under about 10 episodes), Wilson "
            "at the clustered effective n for resolution)",
            REGRET_COLUMNS, [_row(p, row[p], row[p]["clustered"]) for p in POLICIES],
        ))  # fmt: skip
        matched_rows = []
        for p in POLICIES:
            g = row[p].get("matched") or row[p]
            c = g["clustered"]
            matched_rows.append([p, f"{c['n_episodes']} x {c['n'] // max(c['n_episodes'], 1)}",
                                 _interval(c["regret"]), _pct(g["resolution_rate"]), _f(g["turns_mean"], 2)])  # fmt: skip
        out.append(Table(
            f"{sc}: the rule policies on the model policy's {s['model_episodes']} episodes (the first of the same "
            f"seeded draw) beside the model policies (BAG/BAG+ on the first {s['bag_episodes']} of them; regret "
            "interval by cluster bootstrap over episodes)",
            ["policy", "episodes x profiles", "regret [95% CI]", "resolution %", "turns"], matched_rows,
        ))  # fmt: skip
        parts = {p: row[p]["regret_parts"] for p in POLICIES}
        out.append(Table(
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
                g = row[p]["per_profile"].get(pr)
                if g is None:
                    continue
                ineff, stop = g["ineffective_clarification"], g["stopping_errors"]
                profile_rows.append([
                    p, pr, g["episodes"], _f(g["regret"]), _pct(g["resolution"]["rate"]), _f(g["turns_mean"], 2),
                    f"{_pct(ineff['rate'])} ({ineff['questions']} q)", _pct(stop["answer_early_rate"]),
                    _pct(stop["ask_late_rate"]),
                ])  # fmt: skip
        out.append(Table(
            f"{sc}: per user profile (regret, intent resolution, interaction cost in turns, ineffective "
            "clarification, stopping errors)",
            ["policy", "profile", "episodes", "regret", "resolution %", "turns", "ineffective %", "answered early %",
             "asked late %"], profile_rows,
        ))  # fmt: skip

    choice, bags = summary["belief_temperature"], summary["bag_vs_prompt_only"]
    out.append(_routing_table(summary["routing_test"], s["bag_items"]))
    out.append(_temperature_table(choice, s["k"]))
    bag_rows = []
    for v in s["bag_variants"]:
        b = bags[v]
        bag_rows.append([
            v, b["n"], _accuracy_cell(b), _pct(b["accuracy_all_items"] if b["n"] else None),
            _pct(b["accuracy_any_intent"]), b["abstained"],
            *[_pct(b["routing"].get(r, {}).get("share", 0.0)) for r in ("answer", "clarify", "abstain")],
            _f(b["semantic_entropy_mean"], 2), _f(b["auroc_entropy_not_direct"], 2),
        ])  # fmt: skip
    out.append(Table(
        f"BAG against the prompt-only baseline on AmbigQA ({s['bag_items']} seeded items of dev_light, ambiguous and "
        f"not; hidden intent drawn per item; K={s['k']} samples at T={choice['chosen']}, chosen on dev items; a "
        f"clarification is answered by the `{s['bag_profile']}` rule user; accuracy against the hidden intent's "
        "answers, abstentions excluded)",
        ["variant", "items", "accuracy % [95% CI] (correct/answered)", "accuracy % of all items",
         "accuracy % against any intent", "abstained", "routed: answer %", "clarify %", "abstain %",
         "semantic entropy (mean)", "AUROC entropy -> not direct"], bag_rows,
    ))  # fmt: skip
    out.append(Table(
        f"Strategy faithfulness: BAG's route beside the semantic entropy of its K={s['k']} samples (grouped by "
        "normalised answer before the entropy: first sentence, SQuAD-normalised, lead-ins, the user's words and stop "
        "words removed, equal or contained as whole words; in `fic regret` a sample naming a candidate clusters by "
        "that candidate). `bag_items/*`: `fic bag` on AmbigQA, one row per item (prompt_only decides without "
        "seeing the samples); `regret_first_turn/*`: BAG's first decision, once per episode. AUROC of entropy for "
        "not answering directly, 95% bootstrap interval over items; 0.5 means the route ignores the belief",
        ["run", "route", "n", "share %", "entropy mean (nats)", "AUROC entropy -> not direct [95% CI]"],
        [row for name, f in summary["faithfulness"].items() for row in _faith_rows(name, f)],
    ))  # fmt: skip
    return out


def text(summary: dict, s: dict) -> list[str]:
    """The part's paragraphs after its tables."""
    lines = []
    for sc in s["scenarios"]:
        row = summary[sc]
        parts = ", ".join(f"{p} {row[p]['regret']:.3f}" for p in POLICIES)
        lines.append(f"**{sc}**: regret {parts} (resolution: "
                     + ", ".join(f"{p} {_pct(row[p]['resolution_rate'])}%" for p in POLICIES) + ").")  # fmt: skip
    b = summary["bag_vs_prompt_only"]
    if "bag" in b and "prompt_only" in b:
        bag, base = b["bag"], b["prompt_only"]
        overlap = bag["low"] <= base["high"] and base["low"] <= bag["high"]
        lines.append(
            f"BAG against prompt-only on AmbigQA answer accuracy: {_pct(bag['accuracy'])}% "
            f"({bag['correct']}/{bag['answered']} answered) vs {_pct(base['accuracy'])}% "
            f"({base['correct']}/{base['answered']}), {100 * (bag['accuracy'] - base['accuracy']):+.1f} points over "
            f"{bag['n']} items. "
            + ("The 95% intervals overlap, so at this size it neither confirms nor refutes the BAG paper's claim."
               if overlap else "The 95% intervals do not overlap.")
        )  # fmt: skip
    test = summary.get("routing_test")
    if test:
        share = {v: test[v]["clarify"] / test[v]["n"] if test[v]["n"] else None for v in ("bag", "prompt_only")}
        more = "more" if (share["bag"] or 0) > (share["prompt_only"] or 0) else "less"
        lines.append(
            f"Routing: with its K samples shown, BAG clarifies on {test['bag']['clarify']} of {test['bag']['n']} items, "
            f"the prompt-only baseline on {test['prompt_only']['clarify']} of {test['prompt_only']['n']} (Fisher's "
            f"exact p = {test['fisher_p']:.3f}): BAG clarifies {more} often"
            + (", a difference this test detects." if test["fisher_p"] < 0.05 else ", a difference within chance here.")
            + " BAG's mechanism is to ask when the samples disagree, so a BAG that asks less than the baseline while "
            "its samples disagree routes against it."
        )  # fmt: skip
    for sc in s["scenarios"]:
        parts = summary[sc]["model"].get("regret_parts")
        if parts:
            named = sorted(((v, k) for k, v in parts.items() if abs(v) >= 0.005), reverse=True)
            lines.append(f"**{sc}**, SmolLM2's regret {sum(parts.values()):.3f} in parts: "
                         + ", ".join(f"{k.replace('_', ' ')} {v:+.3f}" for v, k in named) + ".")  # fmt: skip
    lines += [
        "How the policies are built: `reference` asks the question of highest expected information gain while its "
        "value of information exceeds the per-turn cost; `always_answer` answers the most likely intent at once; "
        "`always_ask` asks every question in the pool (useless ones too) until the turn budget; `model` is SmolLM2 "
        "replying freely (a `STRATEGY:` line or a reply ending in '?' is a question, otherwise an answer, resolved "
        "to an intent by the scenario's rules, so an answer that names no candidate is unresolved). BAG decides "
        "once, at the first turn; after one clarification it answers from K resampled answers (BAG+ abstains "
        f"below {s['agree']['bag_plus']} agreement; plain BAG here takes the largest cluster, agree = 1/K = "
        f"{s['agree']['bag']}). In `fic bag` (the accuracy table) plain BAG and prompt-only answer greedily after a "
        "clarification instead.",
        _temperature_text(summary["belief_temperature"], s["k"]),
        *_faith_text(summary["faithfulness"], s["k"]),
        *_profile_text(summary, s["scenarios"]),
        "What this does not show: a 135M model on a handful of episodes (the model rows are "
        f"{s['model_episodes']} or {s['bag_episodes']} episodes x 5 profiles, and an episode's first turn is the "
        "same under every profile, so the profiles differ only after a question; the intervals count episodes) says "
        "little about multi-billion-parameter models; the simulated user is rule-based, and the numbers are as "
        "measured, with no target.",
    ]
    return lines


def _temperature_text(choice: dict, k: int) -> str:
    """One sentence on the belief temperature and how it was chosen."""
    chosen = choice["dev"][str(choice["chosen"])]
    grid = ", ".join(str(t) for t in choice["grid"])
    refused = ", ".join(str(t) for t in choice["refused"])
    text = (
        f"BAG's belief temperature is {choice['chosen']}, chosen from {grid} on {chosen['n']} dev AmbigQA items that "
        f"are never reported (dev AUROC of the belief entropy for an ambiguous item {_f(chosen['auroc_ambiguous'], 2)}, "
        f"{_pct(chosen['below_log_k'])}% of dev items below ln {k}); every reported BAG run, prompt-only included, "
        "samples its belief at it."
    )
    if refused:
        text += f" Refused for beliefs that are constant on dev (every item at ln {k} or at 0): {refused}."
    if not choice["informative"]:
        text += (" Every temperature of the grid gave constant beliefs on dev: BAG's belief carries nothing here, "
                 "and its rows measure the prompt, not the belief.")  # fmt: skip
    return text


def _faith_text(faith: dict, k: int) -> list[str]:
    """One sentence on whether the belief carries signal: how often the samples agreed at all, and the AUROC."""
    lines = []
    for name, f in faith.items():
        auc = f["auroc_not_direct"]
        if not f["n"]:
            continue
        agreed = f"on {_pct(f['below_log_k'])}% of {f['n']} the K={k} samples were not all different"
        if auc["auroc"] is None:
            lines.append(f"Faithfulness `{name}`: {agreed}; AUROC {auc.get('note') or 'not measurable'}.")
            continue
        if auc["low"] <= 0.5 <= auc["high"]:
            verdict = "an interval that includes 0.5: no detectable link between belief and route at this size"
        else:
            verdict = "an interval that excludes 0.5"
        lines.append(f"Faithfulness `{name}`: {agreed}; AUROC of entropy for not answering directly "
                     f"{auc['auroc']:.2f} [{auc['low']:.2f}, {auc['high']:.2f}], {verdict}.")  # fmt: skip
    return lines


def _profile_text(summary: dict, scenarios: list[str]) -> list[str]:
    """Which user profiles gave the rule policies identical numbers, and why (the tracker reads the same value)."""
    lines = []
    for sc in scenarios:
        per = {p: summary[sc][p]["per_profile"] for p in RULE_POLICIES}
        same = [pr for pr in PROFILES if all(
            pr in per[p] and {m: per[p][pr][m] for m in ("regret", "resolution_rate", "turns_mean")}
            == {m: per[p]["cooperative"][m] for m in ("regret", "resolution_rate", "turns_mean")} for p in RULE_POLICIES
        )]  # fmt: skip
        tokens = ", ".join(
            f"{pr} {per['reference'][pr]['user_tokens_mean']:.1f}" for pr in PROFILES if pr in per["reference"]
        )
        line = (
            f"User profiles on {sc}: the user's words differ by profile (user tokens per episode under the reference: "
            f"{tokens}), and {len(same)} of {len(PROFILES)} profiles ({', '.join(same) or 'none'}) give every rule "
            "policy the same regret, resolution and turns as `cooperative`."
        )
        if set(same) == set(PROFILES) - {"vague"}:
            line += (
                " Why: the rule tracker reads the same value out of a cooperative, terse, verbose or contradicts-once "
                "reply (the correction comes in the same reply), and only `vague` withholds it. The profiles test a "
                "policy that reads the user's words itself, and only once it asks."
            )
        lines.append(line)
    return lines
