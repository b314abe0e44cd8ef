"""The clarify part of `make reproduce` without models: its tables and summary.json entries from made-up
`fic regret` episodes and `fic bag` items (the commands themselves are tested in test_regret*.py and test_bag.py).
Checks the episode-clustered intervals (effective n = episodes), the strategy-faithfulness table
(`clarify.faithfulness`) and the sentence on which user profiles change the rule policies' numbers."""

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


def _bag_items(variant: str, n: int) -> list[dict]:
    items = []
    for i in range(n):
        clarify = i % 3 == 0
        entropy = math.log(5) if clarify else [0.0, 0.5][i % 2]
        items.append({"key": str(i), "id": str(i), "ambiguous": clarify, "route": "clarify" if clarify else "answer",
                      "semantic_entropy": entropy if variant == "bag" else math.log(5), "correct": i % 2 == 0,
                      "correct_any": i % 2 == 0})  # fmt: skip
    return items


@pytest.fixture
def clarify_part(tmp_path, monkeypatch):
    sys.modules.pop("clarify", None)
    import clarify as part

    from fic.eval.clarify.bag import summarize_bag
    from fic.eval.clarify.regret import summarize

    def fake_fic(args, log):
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if args[0] == "regret":
            policy = out.name.split("-", 1)[1]
            records = _regret_records(policy, int(args[args.index("--limit") + 1]))
            (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            (out / "summary.json").write_text(json.dumps(summarize(records, {"policy": policy})))
        else:
            items = _bag_items(out.name, part.SETTINGS["bag_items"])
            (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
            (out / "summary.json").write_text(json.dumps(summarize_bag(items, {"variant": out.name})))

    monkeypatch.setattr(repro, "fic", fake_fic)
    return part, part.run(tmp_path)


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
    assert bag["auroc_not_direct"]["auroc"] == 1.0 and bag["by_route"]["clarify"]["entropy_mean"] == math.log(5)
    assert bag["below_log_k"] == pytest.approx(6 / 10) and bag["by_route"]["abstain"]["n"] == 0
    flat = faith["bag_items/prompt_only"]  # log K everywhere: 0.5 by construction, said so
    assert flat["auroc_not_direct"]["auroc"] == 0.5 and flat["below_log_k"] == 0.0
    first = faith["regret_first_turn/products"]  # once per episode, not per profile
    assert first["n"] == part.SETTINGS["bag_episodes"] and first["by_route"]["clarify"]["n"] == 1
    table = next(t for t in section.tables if t.caption.startswith("Strategy faithfulness"))
    assert ["bag_items/bag", "clarify", 4, "40.0", "1.61", ""] in table.rows
    assert any(r[:2] == ["bag_items/bag", "all"] and r[-1].startswith("1.00 [") for r in table.rows)
    text = " ".join(section.text)
    assert "Faithfulness `bag_items/prompt_only`: on 0.0% of 10" in text and "includes 0.5" in text
    assert "on 3 decisions too few for the bootstrap interval" in text  # no claim from 3 episodes


def test_profile_sentence_names_the_profiles_that_change_nothing(clarify_part):
    _, section = clarify_part
    text = " ".join(section.text)
    assert "4 of 5 profiles (cooperative, terse, contradicts_once, verbose)" in text
    assert "terse 4.0" in text and "verbose 39.0" in text and "only `vague` withholds" in text
