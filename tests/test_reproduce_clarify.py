"""The clarify part of `make reproduce` without models: its tables and summary.json entries from made-up
`fic regret` episodes and `fic bag` items (the commands themselves are tested in test_regret*.py and test_bag.py).
Checks the episode-clustered intervals (effective n = episodes), the strategy-faithfulness table
(`clarify.faithfulness`), the sentence on which user profiles change the rule policies' numbers, and the belief
temperature chosen on dev items (`clarify.belief_temperature`): dev items only, the rule, the reported runs' flag."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402

TOKENS = {"cooperative": 9, "terse": 4, "vague": 15, "contradicts_once": 23, "verbose": 39}


def _episode(episode: int, profile: str, policy: str, resolved: bool, turns: int, entropy: float | None) -> dict:
    """One `fic regret` record: `turns` questions, then an answer; the reference answers after one question."""
    value = float(resolved) - 0.1 * turns
    info = {} if entropy is None else {"strategy": "x", "semantic_entropy": entropy}
    act = "answer"
    questions = [{"before": 3, "after": 1, "repeat": False, "info": info if t == 0 else {}} for t in range(turns)]
    return {
        "key": f"ep{episode}|{profile}", "episode_id": f"ep{episode}", "profile": profile, "policy": policy,
        "questions": questions, "decisions": [{"act": "ask", "consistent": 3}] * turns + [{"act": act, "consistent": 1}],
        "final": {"act": act, "info": info if not turns else {}}, "resolved": resolved, "turns": turns,
        "user_tokens": TOKENS[profile] * turns, "value": value, "stopping": {"answer_early": False, "ask_late": 0},
        "reference": {"value": 0.9, "resolved": True, "turns": 1, "user_tokens": TOKENS[profile]},
        "regret": 0.9 - value,
    }  # fmt: skip


def _regret_records(policy: str, episodes: int) -> list[dict]:
    out = []
    for e in range(episodes):
        for profile in TOKENS:
            if policy == "reference":
                out.append(_episode(e, profile, policy, True, 1, None))
            elif policy == "always_answer":  # right on even episodes; the profile never matters
                out.append(_episode(e, profile, policy, e % 2 == 0, 0, None))
            elif policy == "always_ask":  # resolves unless the user is vague
                out.append(_episode(e, profile, policy, profile != "vague", 3, None))
            else:  # model policies: BAG asks (entropy high) on odd episodes, answers at once (entropy low) on even
                ask = e % 2 == 1
                out.append(_episode(e, profile, policy, ask, int(ask), [0.2, 1.5][ask] if policy != "model" else None))
    for r in out:  # the reference's own records carry regret 0
        if policy == "reference":
            r["value"], r["regret"] = 0.9, 0.0
    return out


# dev items' belief entropy by temperature, ambiguous and not: at 0.7 the entropy tells them apart (AUROC 1), at 0.3
# every item agrees (AUROC 0.5, all below ln 5), at 1.0 every sample differs (ln 5 everywhere, AUROC 0.5)
DEV_ENTROPY = {0.3: (0.0, 0.0), 0.7: (1.0, 0.2), 1.0: (math.log(5), math.log(5))}


def _bag_items(variant: str, n: int, skip: int = 0, entropy_at: tuple | None = None) -> list[dict]:
    """`fic bag` records of the draw positions skip .. skip + n - 1 (id = position); every third is ambiguous."""
    items = []
    for i in range(skip, skip + n):
        clarify = i % 3 == 0
        entropy = math.log(5) if clarify else [0.0, 0.5][i % 2]
        if variant != "bag":
            entropy = math.log(5)
        if entropy_at is not None:
            entropy = entropy_at[0] if clarify else entropy_at[1]
        items.append({"key": str(i), "id": str(i), "ambiguous": clarify, "route": "clarify" if clarify else "answer",
                      "semantic_entropy": entropy, "correct": i % 2 == 0, "correct_any": i % 2 == 0})  # fmt: skip
    return items


def _flag(args: list, name: str, default=None):
    return args[args.index(name) + 1] if name in args else default


def run_part(tmp_path, monkeypatch, dev_entropy=DEV_ENTROPY, honour_skip=True, in_run=True, edit=None):
    """The part on made-up runs; returns (part, section, the fic commands in the order they ran). `in_run`: the belief
    temperature is chosen inside the run (SCALE=gpu), else read from reproduce/dev_choices.json (SCALE=cpu). The
    fake commands write the summaries `fic regret` / `fic bag` write, passed through `edit(summary, command, name)`
    when given (to tamper with them)."""
    edit = edit or (lambda summary, command, name: summary)
    sys.modules.pop("clarify", None)
    import clarify as part

    monkeypatch.setattr(repro, "chooses_in_run", lambda: in_run)

    from fic.eval.clarify.bag import summarize_bag
    from fic.eval.clarify.regret import summarize

    calls = []

    def fake_fic(args, log):
        calls.append(list(args))
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if args[0] == "regret":
            policy = out.name.split("-", 1)[1]
            records = _regret_records(policy, int(args[args.index("--limit") + 1]))
            (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            first, k = _flag(args, "--first"), _flag(args, "--k") if _flag(args, "--policy") == "bag" else None
            summary = summarize(records, {"policy": policy}, first=first and int(first), k=k and int(k))
            (out / "summary.json").write_text(json.dumps(edit(summary, "regret", policy)))
        else:
            variant, skip = _flag(args, "--variant"), int(_flag(args, "--skip", 0)) if honour_skip else 0
            dev = "--skip" in args
            temperature = float(_flag(args, "--belief-temperature", 1.0))
            items = _bag_items(variant, int(_flag(args, "--limit")), skip, dev_entropy[temperature] if dev else None)
            (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
            summary = summarize_bag(items, {"variant": variant}, int(_flag(args, "--k")))
            (out / "summary.json").write_text(json.dumps(edit(summary, "bag", variant)))

    monkeypatch.setattr(repro, "fic", fake_fic)
    return part, part.run(tmp_path), calls


@pytest.fixture
def clarify_run(tmp_path, monkeypatch):
    return run_part(tmp_path, monkeypatch)


@pytest.fixture
def clarify_part(clarify_run):
    return clarify_run[:2]


def test_regret_intervals_count_episodes_not_profiles(clarify_part):
    part, section = clarify_part
    s = part.SETTINGS
    entry = section.summary["products"]["always_answer"]
    c = entry["clustered"]
    assert (c["n_episodes"], c["n"]) == (s["rule_episodes"], 5 * s["rule_episodes"])
    assert c["resolution"]["n_items"] == s["rule_episodes"] and c["resolution"]["rate"] == 0.5
    # every profile of an episode agrees, so the design effect is the number of profiles
    assert c["resolution"]["design_effect"] == pytest.approx(5)
    assert c["regret"]["mean"] == pytest.approx(0.4) and c["regret"]["low"] < 0.4 < c["regret"]["high"]
    assert entry["matched"]["clustered"]["n_episodes"] == s["model_episodes"]
    assert section.summary["products"]["bag"]["clustered"]["n_episodes"] == s["bag_episodes"]
    main = section.tables[0]
    assert main.columns[1] == "episodes x profiles" and main.rows[1][1] == f"{s['rule_episodes']} x 5"
    assert main.rows[1][2].startswith("0.400 [")


def test_faithfulness_table_and_summary(clarify_part):
    part, section = clarify_part
    faith = section.summary["faithfulness"]
    assert set(faith) == {"bag_items/prompt_only", "bag_items/bag", "regret_first_turn/products",
                          "regret_first_turn/ambigqa"}  # fmt: skip
    bag = faith["bag_items/bag"]
    # clarify items have entropy log 5, answers 0 or 0.5: entropy separates the routes perfectly
    assert bag["auroc_not_direct"]["auroc"] == 1.0
    assert bag["by_route"]["clarify"]["entropy_mean"] == pytest.approx(math.log(5))
    assert bag["below_log_k"] == pytest.approx(20 / 30) and bag["by_route"]["abstain"]["n"] == 0
    flat = faith["bag_items/prompt_only"]  # log K everywhere: an AUROC of ties, not measurable, said so
    assert flat["auroc_not_direct"]["auroc"] is None and flat["below_log_k"] == 0.0
    assert flat["auroc_not_direct"]["note"] == "not measurable: every score is tied"
    first = faith["regret_first_turn/products"]  # once per episode, not per profile
    assert (
        first["n"] == part.SETTINGS["bag_episodes"]
        and first["by_route"]["clarify"]["n"] == part.SETTINGS["bag_episodes"] // 2
    )
    table = next(t for t in section.tables if t.caption.startswith("Strategy faithfulness"))
    assert ["bag_items/bag", "clarify", 10, "33.3", "1.61", ""] in table.rows
    assert any(r[:2] == ["bag_items/bag", "all"] and r[-1].startswith("1.00 [") for r in table.rows)
    text = " ".join(section.text)
    assert "Faithfulness `bag_items/prompt_only`: on 0.0% of 30" in text
    assert "AUROC not measurable: every score is tied" in text
    assert "Faithfulness `regret_first_turn/products`" in text and "AUROC of entropy for not answering" in text


def test_profile_sentence_names_the_profiles_that_change_nothing(clarify_part):
    _, section = clarify_part
    text = " ".join(section.text)
    assert "4 of 5 profiles (cooperative, terse, contradicts_once, verbose)" in text
    assert "terse 4.0" in text and "verbose 39.0" in text and "only `vague` withholds" in text


def test_belief_temperature_chosen_on_dev_items_only(clarify_run):
    part, section, calls = clarify_run
    s, grid = part.SETTINGS, part.SETTINGS["belief_temperature"]["grid"]
    bags = [c for c in calls if c[0] == "bag"]
    dev = [c for c in bags if "--skip" in c]
    reported = [c for c in bags if "--skip" not in c]
    # one dev run per grid temperature, on the dev_items items right after the reported ones, all before any
    # reported run (the choice is made first)
    assert sorted(float(_flag(c, "--belief-temperature")) for c in dev) == sorted(grid)
    assert {(int(_flag(c, "--skip")), int(_flag(c, "--limit")), _flag(c, "--variant")) for c in dev} == {
        (s["bag_items"], s["belief_temperature"]["dev_items"], "bag")
    }
    assert max(calls.index(c) for c in dev) < min(i for i, c in enumerate(calls) if c not in dev)
    assert {int(_flag(c, "--limit")) for c in reported} == {s["bag_items"]}
    choice = section.summary["belief_temperature"]
    reported_ids = set().union(*(part.item_ids(Path(_flag(c, "--out"))) for c in reported))
    assert reported_ids == {str(i) for i in range(s["bag_items"])}
    n = s["bag_items"]
    assert set(choice["dev_ids"]) == {str(i) for i in range(n, n + 10)} and not set(choice["dev_ids"]) & reported_ids
    # beliefs constant on dev are refused (0.3: every item at 0; 1.0: every item at ln 5); the highest AUROC wins
    assert choice["chosen"] == 0.7 and choice["grid"] == [0.3, 0.7, 1.0]
    assert choice["refused"] == [0.3, 1.0] and choice["informative"]
    assert choice["dev"]["0.7"] == {"n": 10, "ambiguous": 4, "entropy_mean": pytest.approx(0.52),
                                    "below_log_k": 1.0, "auroc_ambiguous": 1.0}  # fmt: skip
    assert choice["dev"]["1.0"]["auroc_ambiguous"] == 0.5 and choice["dev"]["1.0"]["below_log_k"] == 0.0


def test_chosen_belief_temperature_reaches_every_reported_bag_run(clarify_run):
    part, section, calls = clarify_run
    reported = [c for c in calls if c[0] == "bag" and "--skip" not in c]
    assert sorted(_flag(c, "--variant") for c in reported) == sorted(part.SETTINGS["bag_variants"])
    assert {_flag(c, "--belief-temperature") for c in reported} == {0.7}  # prompt_only at the same temperature
    regret = {Path(_flag(c, "--out")).name: c for c in calls if c[0] == "regret"}
    for name, c in regret.items():
        expected = 0.7 if name.split("-", 1)[1].startswith("bag") else None
        assert _flag(c, "--belief-temperature") == expected, name
    assert sum(_flag(c, "--belief-temperature") == 0.7 for c in regret.values()) == 4  # bag, bag_plus x 2 scenarios
    table = next(t for t in section.tables if t.caption.startswith("BAG's belief temperature"))
    n = part.SETTINGS["bag_items"]
    assert "chosen on 10 dev AmbigQA items" in table.caption and f"never on the {n} reported items" in table.caption
    assert [r[0] for r in table.rows] == ["0.3", "0.7", "1.0"]
    assert [r[-1] for r in table.rows] == ["refused: constant", "yes", "refused: constant"]
    assert table.rows[1][5] == "1.00"
    accuracy = next(t for t in section.tables if t.caption.startswith("BAG against the prompt-only"))
    assert "samples at T=0.7, chosen on dev items" in accuracy.caption
    assert section.tables.index(table) == section.tables.index(accuracy) - 1
    assert "BAG's belief temperature is 0.7, chosen from 0.3, 0.7, 1.0 on 10 dev AmbigQA items" in " ".join(
        section.text
    )


def test_beliefs_constant_at_every_temperature_are_said_to_carry_nothing(tmp_path, monkeypatch):
    # 0.3 and 0.7: every dev item at 0; 1.0: every item at ln 5: all refused, the highest temperature runs, said so
    flat = {0.3: (0.0, 0.0), 0.7: (0.0, 0.0), 1.0: (math.log(5), math.log(5))}
    _, section, calls = run_part(tmp_path, monkeypatch, dev_entropy=flat)
    choice = section.summary["belief_temperature"]
    assert (choice["chosen"], choice["informative"], choice["refused"]) == (1.0, False, [0.3, 0.7, 1.0])
    assert {_flag(c, "--belief-temperature") for c in calls if c[0] == "bag" and "--skip" not in c} == {1.0}
    assert "BAG's belief carries nothing here" in " ".join(section.text)


def test_choose_temperature_rule():
    sys.modules.pop("clarify", None)
    import clarify as part

    def d(auc, below, mean=0.5):
        return {"auroc_ambiguous": auc, "below_log_k": below, "entropy_mean": mean}

    pick = lambda dev: part.choose_temperature(dev)["chosen"]  # noqa: E731
    assert pick({0.3: d(0.9, 0.1), 0.7: d(0.6, 1.0), 1.0: d(0.5, 0.3)}) == 0.3  # AUROC first
    assert pick({0.3: d(0.6, 0.8), 0.7: d(0.6, 0.4), 1.0: d(0.6, 0.9)}) == 0.7  # then the most spread
    assert pick({0.3: d(0.6, 0.5), 0.7: d(0.6, 0.5), 1.0: d(0.2, 0.9)}) == 0.7  # then the higher temperature
    assert pick({0.3: d(None, 0.4), 0.7: d(None, 0.4), 1.0: d(None, 0.5)}) == 1.0  # no AUROC: spread
    assert pick({0.3: d(0.6, 0.9), 0.7: d(0.6 + 1e-12, 0.9)}) == 0.7  # an AUROC equal up to float noise is a tie
    # a high AUROC over constant beliefs does not count: every item at ln K, or every item at 0 entropy
    choice = part.choose_temperature({0.3: d(0.9, 1.0, mean=0.0), 0.7: d(0.4, 0.5), 1.0: d(0.6, 0.0)})
    assert choice == {"chosen": 0.7, "informative": True, "refused": [0.3, 1.0]}


def test_dev_items_that_are_reported_items_stop_the_part(tmp_path, monkeypatch):
    with pytest.raises(repro.StepError, match="dev items .* are also reported items"):
        run_part(tmp_path, monkeypatch, honour_skip=False)


def test_routing_of_bag_and_prompt_only_is_tested(clarify_part):
    part, section = clarify_part
    test = section.summary["routing_test"]
    n = part.SETTINGS["bag_items"]
    # the made-up items route alike in both variants (every third clarifies): no difference, p = 1
    assert test["bag"] == test["prompt_only"] == {"clarify": n // 3, "other": n - n // 3, "n": n}
    assert test["fisher_p"] == pytest.approx(1.0)
    table = next(t for t in section.tables if t.caption.startswith("Routing:"))
    assert "Fisher exact test" in table.caption and table.rows[0][:3] == ["bag", n, n // 3]
    assert "a difference within chance here" in " ".join(section.text)
    parts = section.summary["products"]["model"]["regret_parts"]
    assert sum(parts.values()) == pytest.approx(section.summary["products"]["model"]["regret"])


def test_the_report_shows_the_commands_numbers(clarify_part):
    # the same numbers as the statistics of the made-up episodes and items, computed here from them directly
    from fic.estimates import cluster_mean, cluster_rate

    part, section = clarify_part
    s = part.SETTINGS
    records = _regret_records("always_answer", s["rule_episodes"])
    ids = [r["episode_id"] for r in records]
    regret = cluster_mean([r["regret"] for r in records], ids)
    resolution = cluster_rate([r["resolved"] for r in records], ids)
    row = section.tables[0].rows[POLICY_ROW["always_answer"]]
    assert row[2] == f"{regret['mean']:.3f} [{regret['low']:.3f}, {regret['high']:.3f}]"
    assert row[4] == f"{100 * resolution['rate']:.1f} [{100 * resolution['low']:.1f}, {100 * resolution['high']:.1f}]"
    items = [r for r in _bag_items("bag", s["bag_items"]) if r["correct"] is not None]
    accuracy = cluster_rate([r["correct"] for r in items], [r["id"] for r in items])
    bag_row = next(t for t in section.tables if t.caption.startswith("BAG against")).rows[1]
    assert bag_row[0] == "bag" and bag_row[2] == (
        f"{100 * accuracy['rate']:.1f} [{100 * accuracy['low']:.1f}, {100 * accuracy['high']:.1f}] (15/30)"
    )


POLICY_ROW = {"reference": 0, "always_answer": 1, "always_ask": 2, "model": 3, "bag": 4, "bag_plus": 5}


def _tamper(summary: dict, command: str, name: str) -> dict:
    """Marked numbers in the summaries the commands write: the part must show these, not recompute its own."""
    if command == "regret" and name == "always_answer":
        summary["regret_interval"] = {**summary["regret_interval"], "mean": 0.111, "low": 0.011, "high": 0.211}
        summary["resolution"] = {**summary["resolution"], "rate": 0.123, "low": 0.045, "high": 0.678}
        summary["first"]["regret_interval"] = {**summary["first"]["regret_interval"], "mean": 0.222, "low": 0.1,
                                               "high": 0.3}  # fmt: skip
        summary["regret_parts"] = {**summary["regret_parts"], "turns_saved": -0.777}
    if command == "regret" and name == "bag":
        summary["faithfulness"]["auroc_not_direct"] = {"auroc": 0.666, "low": 0.5, "high": 0.9, "note": ""}
    if command == "bag" and name == "bag":
        summary["accuracy_interval"] = {**summary["accuracy_interval"], "low": 0.3333, "high": 0.4444}
    return summary


def test_the_part_reads_the_summaries_and_recomputes_nothing(tmp_path, monkeypatch):
    part, section, _ = run_part(tmp_path, monkeypatch, edit=_tamper)
    row = section.tables[0].rows[POLICY_ROW["always_answer"]]
    assert row[2] == "0.111 [0.011, 0.211]" and row[4] == "12.3 [4.5, 67.8]"
    matched = section.tables[1].rows[POLICY_ROW["always_answer"]]
    assert matched[2] == "0.222 [0.100, 0.300]"
    parts = section.tables[2]
    assert parts.rows[POLICY_ROW["always_answer"]][parts.columns.index("turns saved")] == "-0.777"
    bag_row = next(t for t in section.tables if t.caption.startswith("BAG against")).rows[1]
    assert bag_row[2].startswith("50.0 [33.3, 44.4]")
    faith = next(t for t in section.tables if t.caption.startswith("Strategy faithfulness"))
    assert ["regret_first_turn/products", "all"] == faith.rows[-5][:2] and faith.rows[-5][-1] == "0.67 [0.50, 0.90]"
    assert section.summary["faithfulness"]["regret_first_turn/ambigqa"]["auroc_not_direct"]["auroc"] == 0.666


def test_a_summary_without_the_statistics_says_which_file_and_what_to_rerun(tmp_path, monkeypatch):
    def old(summary, command, name):
        if command == "regret" and name == "always_ask":
            del summary["regret_interval"]
        return summary

    with pytest.raises(repro.StepError) as err:
        run_part(tmp_path, monkeypatch, edit=old)
    message = str(err.value)
    assert "\n" not in message and "regret/products-always_ask/summary.json has no regret_interval" in message
    assert "rerun `fic regret`" in message and "--redo clarify" in message


def test_reproduce_holds_no_statistics_and_no_import_circle():
    import ast

    def imports(name: str) -> set[str]:
        """The modules and names `reproduce/NAME.py` imports."""
        out = set()
        for node in ast.walk(ast.parse((ROOT / "reproduce" / f"{name}.py").read_text())):
            if isinstance(node, ast.Import):
                out |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                out |= {node.module, *(alias.name for alias in node.names)}
        return out

    statistics = {"fic.estimates", "fic.bootstrap", "wilson_interval", "wilson_bounds", "rate_with_interval",
                  "cluster_mean", "cluster_rate", "bootstrap_auroc", "regret_parts", "auroc", "fic.eval.clarify.stats"}  # fmt: skip
    for name in ("clarify", "clarify_report"):
        assert not imports(name) & statistics, name  # the commands' summaries carry every statistic
    assert "clarify" not in imports("clarify_report")  # one direction: clarify imports clarify_report
    assert "clarify_report" in imports("clarify")


def test_settings_are_data():
    sys.modules.pop("clarify", None)
    import clarify as part

    stored = json.loads((ROOT / "reproduce" / "settings" / "clarify.json").read_text())
    assert part.SETTINGS == {"model": repro.MODEL, **stored}
