"""Regret metrics (fic.metrics) on hand-built values."""

import math

import pytest

from fic.metrics import (
    episode_value,
    ineffective_clarification_rate,
    is_ineffective_clarification,
    regret,
    stopping_error_rates,
    stopping_errors,
)


def test_episode_value():
    assert episode_value(True, 0, 0.1) == 1.0
    assert episode_value(True, 3, 0.1) == pytest.approx(0.7)
    assert episode_value(False, 2, 0.25) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="clarification_turns"):
        episode_value(True, -1, 0.1)


def test_regret_is_mean_paired_difference():
    assert regret([0.9, 0.8, 1.0], [0.9, 0.0, 0.7]) == pytest.approx((0 + 0.8 + 0.3) / 3)
    assert regret([0.5], [0.9]) == pytest.approx(-0.4)  # a policy can beat the reference
    assert regret([], []) == 0.0
    with pytest.raises(ValueError, match="pair them"):
        regret([1.0], [1.0, 0.0])


def test_ineffective_clarification():
    assert is_ineffective_clarification(4, 2, False) is False
    assert is_ineffective_clarification(4, 4, False) is True  # state did not shrink
    assert is_ineffective_clarification(3, 5, False) is True  # a correction may even grow it
    assert is_ineffective_clarification(4, 1, True) is True  # asked for what was already said
    qs = [
        {"before": 10, "after": 3, "repeat": False},
        {"before": 3, "after": 3, "repeat": False},
        {"before": 3, "after": 1, "repeat": True},
        {"before": 1, "after": 1},
    ]
    assert ineffective_clarification_rate(qs) == {"rate": 0.75, "ineffective": 3, "questions": 4}
    assert ineffective_clarification_rate([]) == {"rate": 0.0, "ineffective": 0, "questions": 0}


def test_stopping_errors_per_episode():
    # asked with 5 and 2 left, then with 1 left (late), then answered with 1 left: one late question
    d = [
        {"act": "ask", "consistent": 5},
        {"act": "ask", "consistent": 2},
        {"act": "ask", "consistent": 1},
        {"act": "answer", "consistent": 1},
    ]
    assert stopping_errors(d) == {"answer_early": False, "ask_late": 1}
    assert stopping_errors([{"act": "answer", "consistent": 3}]) == {"answer_early": True, "ask_late": 0}
    # abstaining with several left is not "answering early"
    assert stopping_errors([{"act": "abstain", "consistent": 3}]) == {"answer_early": False, "ask_late": 0}


def test_stopping_error_rates():
    per = [
        {"answer_early": True, "ask_late": 0},
        {"answer_early": False, "ask_late": 2},
        {"answer_early": False, "ask_late": 0},
        {"answer_early": True, "ask_late": 1},
    ]
    out = stopping_error_rates(per)
    assert out == {"rate": 0.75, "answer_early_rate": 0.5, "ask_late_rate": 0.5, "ask_late_questions": 3, "n": 4}
    assert stopping_error_rates([])["rate"] == 0.0


def test_semantic_entropy_limits():
    from fic.metrics import semantic_entropy

    assert semantic_entropy([0, 0, 0, 0]) == 0.0
    assert semantic_entropy([0, 1, 2, 3]) == pytest.approx(math.log(4))
    assert semantic_entropy([0, 0, 0, 1]) == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert semantic_entropy([]) == 0.0


def _episode(resolved, turns, act="answer", intent=0, ref_resolved=True, ref_turns=1, cost=0.1):
    return {"resolved": resolved, "turns": turns, "value": float(resolved) - cost * turns,
            "final": {"act": act, "intent": intent},
            "reference": {"resolved": ref_resolved, "turns": ref_turns, "value": float(ref_resolved) - cost * ref_turns}}  # fmt: skip


def test_regret_parts_name_each_loss_and_sum_to_the_regret():
    from fic.metrics import REGRET_PARTS, regret, regret_parts

    episodes = [
        _episode(False, 0, intent=None),  # answered at once naming no candidate: not a failure to ask
        _episode(False, 0, intent=2),  # a wrong intent with fewer questions than the reference: under-clarifying
        _episode(False, 2, intent=2),  # a wrong intent after more questions: wrong answer, and 1 extra turn
        _episode(False, 3, act="out_of_turns", intent=None),  # ran out of turns: 2 extra turns
        _episode(True, 1),  # the reference's episode exactly: nothing
        _episode(True, 0, ref_resolved=False, ref_turns=1),  # resolved where the reference did not, a turn saved
    ]
    parts = regret_parts(episodes)
    assert set(parts) == set(REGRET_PARTS)
    assert parts["answer_names_no_candidate"] == pytest.approx(1 / 6)
    assert parts["under_clarifying"] == pytest.approx(1 / 6)
    assert parts["answer_wrong_after_asking"] == pytest.approx(1 / 6)
    assert parts["abstain_or_out_of_turns"] == pytest.approx(1 / 6)
    assert parts["resolved_beyond_reference"] == pytest.approx(-1 / 6)
    assert parts["over_clarifying_turns"] == pytest.approx(0.1 * (1 + 2) / 6)
    assert parts["turns_saved"] == pytest.approx(-0.1 * (1 + 1 + 1) / 6)  # episodes 1, 2 and 6 asked one fewer
    total = regret([e["reference"]["value"] for e in episodes], [e["value"] for e in episodes])
    assert sum(parts.values()) == pytest.approx(total)
    assert regret_parts([]) == dict.fromkeys(REGRET_PARTS, 0.0)


def _record(episode: int, profile: str, resolved: bool, turns: int = 1, entropy: float | None = None) -> dict:
    """A `fic regret` record; the reference resolves in one turn (value 0.9)."""
    info = {} if entropy is None else {"semantic_entropy": entropy}
    value = float(resolved) - 0.1 * turns
    return {
        "episode_id": f"ep{episode}", "profile": profile, "resolved": resolved, "turns": turns, "value": value,
        "regret": 0.9 - value, "user_tokens": 3, "stopping": {"answer_early": False, "ask_late": 0},
        "questions": [{"before": 2, "after": 1, "repeat": False, "info": info}] * turns,
        "decisions": [{"act": "ask"}] * turns + [{"act": "answer"}], "final": {"act": "answer", "intent": 0, "info": info},
        "reference": {"value": 0.9, "resolved": True, "turns": 1, "user_tokens": 3},
    }  # fmt: skip


def test_regret_summary_intervals_count_episodes_not_profiles():
    from scipy.stats import binomtest

    from fic.eval.clarify.regret import summarize

    profiles = ("cooperative", "terse", "vague")
    # 12 episodes, every profile of an episode alike: resolved on episodes 0..4
    records = [_record(e, p, e < 5) for e in range(12) for p in profiles]
    s = summarize(records, {"policy": "x"}, first=4)
    res = s["resolution"]
    assert (s["n_episodes"], s["episodes"], res["n_items"]) == (12, 36, 12)
    assert res["design_effect"] == pytest.approx(3)  # the profiles of an episode add nothing
    ci = binomtest(5, 12).proportion_ci(method="wilson")  # the Wilson interval of the 12 episodes (z = 1.96 here)
    assert (res["low"], res["high"]) == (pytest.approx(ci.low, abs=1e-4), pytest.approx(ci.high, abs=1e-4))
    interval = s["regret_interval"]
    assert interval["mean"] == pytest.approx(s["regret"]) and interval["low"] < s["regret"] < interval["high"]
    assert interval["n_items"] == 12 and interval["n"] == 36
    assert sum(s["regret_parts"].values()) == pytest.approx(s["regret"])
    # the first 4 episodes: all resolved; fewer than 10 episodes, so the regret interval is not estimable
    first = s["first"]
    assert (first["n_episodes"], first["episodes"], first["resolution"]["rate"]) == (4, 12, 1.0)
    assert first["regret_interval"]["mean"] is None
    assert first["regret_interval"]["note"] == "not estimable: 4 clusters (< 10)"
    assert s["per_profile"]["terse"]["n_episodes"] == 12 and "faithfulness" not in s


def test_regret_summary_of_bag_has_its_first_turn_faithfulness():
    from fic.eval.clarify.regret import summarize
    from fic.eval.clarify.stats import first_turns

    # BAG asks on odd episodes (entropy 1.5) and answers at once on even ones (entropy 0.2); once per episode
    records = [_record(e, p, True, e % 2, [0.2, 1.5][e % 2]) for e in range(10) for p in ("cooperative", "vague")]
    assert [t["route"] for t in first_turns(records)] == ["answer", "clarify"] * 5
    faith = summarize(records, {"policy": "bag"}, k=5)["faithfulness"]
    assert (faith["n"], faith["k"], faith["by_route"]["clarify"]["n"]) == (10, 5, 5)
    assert faith["auroc_not_direct"]["auroc"] == 1.0 and faith["below_log_k"] == 1.0
