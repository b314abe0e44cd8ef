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


def run_part(tmp_path, monkeypatch, dev_entropy=DEV_ENTROPY, honour_skip=True, in_run=True):
    """The part on made-up runs; returns (part, section, the fic commands in the order they ran). `in_run`: the belief
    temperature is chosen inside the run (SCALE=gpu), else read from reproduce/dev_choices.json (SCALE=cpu)."""
    sys.modules.pop("clarify", None)
    sys.modules.pop("clarify_report", None)  # its `from clarify import` binds the new module
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
            (out / "summary.json").write_text(json.dumps(summarize(records, {"policy": policy})))
        else:
            variant, skip = _flag(args, "--variant"), int(_flag(args, "--skip", 0)) if honour_skip else 0
            dev = "--skip" in args
            temperature = float(_flag(args, "--belief-temperature", 1.0))
            items = _bag_items(variant, int(_flag(args, "--limit")), skip, dev_entropy[temperature] if dev else None)
            (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
            (out / "summary.json").write_text(json.dumps(summarize_bag(items, {"variant": variant})))

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
    reported_ids = {r["id"] for v in s["bag_variants"] for r in part._items(Path(
        _flag(next(c for c in reported if _flag(c, "--variant") == v), "--out")))}  # fmt: skip
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
