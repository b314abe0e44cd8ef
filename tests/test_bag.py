"""Belief-Augmented Generation: strategy parsing, belief clustering, BAG / prompt-only / BAG+, metrics, `fic bag`."""

import json
import math

import pytest
from conftest import ScriptedChatModel

import fic.eval.clarify.bag as bag
from fic.metrics import accuracy_with_abstentions, auroc, routing_profile, semantic_entropy


@pytest.mark.parametrize(
    "text,strategy,content",
    [
        ("STRATEGY: DIRECT_ANSWER\nParis", "DIRECT_ANSWER", "Paris"),
        ("strategy - clarification_question\nWhich season?", "CLARIFICATION_QUESTION", "Which season?"),
        ("**Strategy:** Clarify. Do you mean the film?", "CLARIFICATION_QUESTION", "Do you mean the film?"),
        ("STRATEGY: ABSTAIN", "ABSTAIN", ""),
        ("I think STRATEGY: direct answer - 1996", "DIRECT_ANSWER", "I think 1996"),
        ("ABSTAIN", "ABSTAIN", ""),
        ("Do you mean the 2010 cup?", "CLARIFICATION_QUESTION", "Do you mean the 2010 cup?"),
        ("Spain won it.", "DIRECT_ANSWER", "Spain won it."),
        ("", "DIRECT_ANSWER", ""),
    ],
)
def test_parse_strategy_is_lenient(text, strategy, content):
    assert bag.parse_strategy(text) == (strategy, content)


def test_cluster_samples_and_top_cluster():
    ids = bag.cluster_samples(["Paris", "paris.", "Lyon", "The city of Paris", "Nice"])
    assert ids == [0, 0, 1, 0, 2]
    assert bag.top_cluster(ids) == (0, 0.6)
    # with a key, samples naming the same thing share a cluster whatever their wording
    keyed = bag.cluster_samples(["A", "alpha", "B", "zz"], key=lambda s: {"A": 1, "alpha": 1, "B": 2}.get(s))
    assert keyed == [0, 0, 1, 2]
    assert bag.top_cluster([]) == (-1, 0.0)


@pytest.mark.parametrize(
    "text,context,core",
    [
        ("The answer is Paris.", "", "paris"),
        ("I think it's Paris, France.", "What is the capital of France?", "paris"),
        ("Spain won the cup in 2010. Germany won in 2014.", "Who won the cup?", "spain 2010"),
        ("The U.S. won it.", "Who won the cup?", "us"),
        ("The Who", "Which band wrote Tommy?", "who"),  # only stop words left: kept rather than lost
        ("Who won the cup?", "Who won the cup?", ""),  # an echo of the question names no answer
        ("", "Who won the cup?", ""),
    ],
)
def test_answer_core(text, context, core):
    from fic.eval.clarify.text import answer_core

    assert answer_core(text, context) == core


def test_cluster_answers_groups_equivalent_answers():
    from fic.eval.clarify.text import cluster_answers

    samples = ["Paris", "The answer is Paris.", "paris, France", "Lyon", "It is Paris. Lyon is second."]
    assert cluster_answers(samples, "What is the capital of France?") == [0, 0, 0, 1, 0]
    assert cluster_answers(samples) == [0, 0, 0, 1, 0]  # "paris france" contains "paris" as whole words
    # the question's words carry no answer: two different winners stay apart (token F1 of the whole strings is
    # 0.67, which merged them before), and the same winner in other words joins
    cup = ["Spain won the cup.", "Germany won the cup.", "The cup was won by Spain in 2010.", "Who won the cup?", ""]
    assert cluster_answers(cup, "Who won the cup?") == [0, 1, 0, 2, 2]
    # containment is against a cluster's first member, so "paris" - "paris france" - "france" does not chain
    assert cluster_answers(["Paris", "Paris, France", "France"]) == [0, 0, 1]
    # whole words only: "rome" is not "romeo"
    assert cluster_answers(["Rome", "Romeo"]) == [0, 1]


def test_belief_entropy_is_below_log_k_when_answers_agree():
    question = [{"role": "user", "content": "What is the capital of France?"}]
    agree = ["Paris", "The answer is Paris.", "paris, France", "I think it's Paris.", "Lyon"]
    samples, ids = bag.sample_belief(ScriptedChatModel([(1.0, agree)]), question, k=5, seed=0)
    assert ids == [0, 0, 0, 0, 1]
    assert semantic_entropy(ids) == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)))
    assert semantic_entropy(ids) < math.log(5)
    differ = ["Paris", "Lyon", "Nice", "Marseille", "Toulouse"]
    _, ids = bag.sample_belief(ScriptedChatModel([(1.0, differ)]), question, k=5, seed=0)
    assert semantic_entropy(ids) == pytest.approx(math.log(5))
    # after a clarification the user's reply is context too: "in 2010" carries no answer
    turns = [{"role": "user", "content": "Who won the cup?"}, {"role": "assistant", "content": "Which year?"},
             {"role": "user", "content": "I mean 2010."}]  # fmt: skip
    _, ids = bag.sample_belief(ScriptedChatModel([(1.0, ["Spain in 2010", "Spain", "Germany"])]), turns, k=3, seed=0)
    assert ids == [0, 0, 1]


def test_strategy_prompt_shows_the_belief_only_for_bag():
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Who won the cup?"}]
    with_samples = bag.strategy_messages(msgs, ["Spain", "Germany"])
    without = bag.strategy_messages(msgs, None)
    assert with_samples[0] == {"role": "system", "content": "sys"}
    assert "1. Spain\n2. Germany" in with_samples[-1]["content"]
    assert "drafted" not in without[-1]["content"] and "STRATEGY:" in without[-1]["content"]
    assert "User: Who won the cup?" in without[-1]["content"]


def test_bag_step_answers_with_the_majority_when_the_text_is_empty():
    model = ScriptedChatModel([(1.0, ["Spain", "spain", "Germany", "Spain!"]), (0.0, ["STRATEGY: DIRECT_ANSWER"])])
    step = bag.bag_step(model, [{"role": "user", "content": "q"}], k=4)
    assert (step.strategy, step.text) == ("DIRECT_ANSWER", "Spain")
    assert step.entropy == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))


@pytest.mark.parametrize("agreeing,answers", [(7, True), (6, False)])
def test_bag_plus_threshold(agreeing, answers):
    samples = ["Spain"] * agreeing + [f"other {i}" for i in range(10 - agreeing)]
    plus = bag.bag_plus_answer(
        ScriptedChatModel([(1.0, samples)]), [{"role": "user", "content": "q"}], k=10, agree=0.7
    )
    assert plus.share == pytest.approx(agreeing / 10)
    assert (plus.answer == "Spain") is answers and (plus.answer is None) is (not answers)


AMBIGUOUS = {
    "id": "c1",
    "question": "Who won the cup?",
    "ambiguous": True,
    "intents": [
        {"question": "Who won the cup in 2010?", "answers": ["Spain"]},
        {"question": "Who won the cup in 2014?", "answers": ["Germany"]},
    ],
}
PLAIN = {
    "id": "p1",
    "question": "Who wrote Hamlet?",
    "ambiguous": False,
    "intents": [{"question": "Who wrote Hamlet?", "answers": ["Shakespeare", "William Shakespeare"]}],
}


def test_run_item_clarify_then_bag_plus():
    target = bag.item_episode(AMBIGUOUS, __import__("random").Random("bag|0|c1")).target
    right = ["Spain", "Germany"][target]
    model = ScriptedChatModel(
        [
            (1.0, ["Spain", "Germany", "Spain"]),
            (0.0, ["STRATEGY: CLARIFICATION_QUESTION\nWhich year do you mean?"]),
            (1.0, [right, right, "Italy"]),
        ]
    )
    rec = bag.run_item(model, AMBIGUOUS, "bag_plus", k=3, seed=0)
    assert rec["route"] == "clarify" and rec["clarification"]["question"] == "Which year do you mean?"
    assert rec["clarification"]["reply"] == f"I mean {['2010', '2014'][target]}."
    assert model.calls[2][-1]["content"] == rec["clarification"]["reply"]  # resampled after the reply
    # 2 of 3 agree (0.67) < 0.7 -> abstain
    assert rec["final_answer"] is None and rec["abstained"] and rec["correct"] is None


def test_run_item_prompt_only_answers_directly():
    model = ScriptedChatModel(
        [(1.0, ["Shakespeare", "Marlowe"]), (0.0, ["STRATEGY: DIRECT_ANSWER\nWilliam Shakespeare"])]
    )
    rec = bag.run_item(model, PLAIN, "prompt_only", k=2, seed=0)
    assert "drafted" not in model.calls[1][-1]["content"]  # no samples shown in the prompt-only baseline
    assert (
        rec["route"] == "answer" and rec["correct"] is True and rec["semantic_entropy"] == pytest.approx(math.log(2))
    )


def test_bag_metrics_hand_computed():
    assert accuracy_with_abstentions([True, False, None, True, None]) == {
        "accuracy": 2 / 3,
        "answered": 3,
        "correct": 2,
        "abstained": 2,
        "abstain_rate": 0.4,
        "n": 5,
    }
    assert accuracy_with_abstentions([None])["accuracy"] == 0.0
    prof = routing_profile(
        ["answer", "clarify", "answer", "abstain"], [True, False, False, None], [False, True, True, True]
    )
    assert prof == {
        "answer": {"share": 0.5, "n": 2, "accuracy": 0.5, "ambiguous_share": 0.5},
        "clarify": {"share": 0.25, "n": 1, "accuracy": 0.0, "ambiguous_share": 1.0},
        "abstain": {"share": 0.25, "n": 1, "accuracy": None, "ambiguous_share": 1.0},
    }
    assert auroc([0.1, 0.9, 0.5, 0.5], [False, True, True, False]) == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert auroc([1.0, 2.0], [True, True]) is None
    with pytest.raises(ValueError):
        routing_profile(["answer"], [], [])


def test_summarize_bag():
    recs = [
        {"id": "a", "correct": True, "correct_any": True, "route": "answer", "semantic_entropy": 0.0, "ambiguous": False},
        {"id": "b", "correct": None, "correct_any": None, "route": "abstain", "semantic_entropy": 1.0, "ambiguous": True},
        {"id": "c", "correct": False, "correct_any": True, "route": "clarify", "semantic_entropy": 0.6, "ambiguous": True},
        {"id": "d", "correct": False, "correct_any": False, "route": "answer", "semantic_entropy": 0.4, "ambiguous": True},
    ]  # fmt: skip
    s = bag.summarize_bag(recs, {"variant": "bag"}, k=5)
    assert s["accuracy"] == pytest.approx(1 / 3) and s["abstained"] == 1
    assert s["accuracy_all_items"] == 0.25 and s["accuracy_any_intent"] == pytest.approx(2 / 3)
    assert s["routing"]["answer"]["share"] == 0.5
    faith = s["faithfulness"]
    assert {r: g["entropy_mean"] for r, g in faith["by_route"].items()} == {"answer": 0.2, "clarify": 0.6,
                                                                             "abstain": 1.0}  # fmt: skip
    assert faith["entropy_mean"] == 0.5 and faith["below_log_k"] == 1.0 and (faith["n"], faith["k"]) == (4, 5)
    assert faith["auroc_entropy_not_direct"] == 1.0  # every non-answer is more uncertain
    assert faith["auroc_not_direct"]["auroc"] is None  # 4 items: no interval under 10 (fic.estimates.MIN_CLUSTERS)
    assert s["belief"] == {"ambiguous": 3, "auroc_ambiguous": 1.0}
    # the accuracy interval: one answer per item, so the item-clustered interval is the Wilson interval of 1 in 3,
    # checked against scipy's
    from scipy.stats import binomtest

    ci = binomtest(1, 3).proportion_ci(method="wilson")
    acc = s["accuracy_interval"]
    assert (acc["rate"], acc["n"], acc["n_items"]) == (pytest.approx(1 / 3), 3, 3)
    assert (acc["low"], acc["high"]) == (pytest.approx(ci.low, abs=1e-4), pytest.approx(ci.high, abs=1e-4))


def test_fic_bag_tiny_model_end_to_end_and_resume(shared_data, tmp_path):
    from fic.tiny import tiny_model

    out = tmp_path / "bag"
    argv = [
        "--model",
        tiny_model("chatml"),
        "--limit",
        "3",
        "--k",
        "3",
        "--max-new-tokens",
        "12",
        "--seed",
        "0",
        "--out",
        str(out),
        "--variant",
        "bag_plus",
    ]
    assert bag.main(argv) == 0
    lines = (out / "items.jsonl").read_text().splitlines()
    assert len(lines) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 3 and summary["answered"] + summary["abstained"] == 3
    assert sum(r["n"] for r in summary["routing"].values()) == 3
    assert all(len(json.loads(x)["samples"]) == 3 for x in lines)
    assert bag.main(argv) == 0 and (out / "items.jsonl").read_text().splitlines() == lines  # nothing redone
    assert bag.main([*argv[:-1], "prompt_only"]) == 2  # other settings into the same folder: refused


@pytest.mark.parametrize("kwargs,temperature", [({}, 1.0), ({"belief_temperature": 0.3}, 0.3)])
def test_belief_temperature_reaches_the_model(kwargs, temperature):
    """The belief samples (first decision and BAG+'s resampling) are drawn at `belief_temperature`, 1.0 by default;
    the strategy prompt and nothing else stays greedy. ScriptedChatModel fails on any other temperature."""
    question = [{"role": "user", "content": "q"}]
    model = ScriptedChatModel([(temperature, ["Spain", "Spain"]), (0.0, ["STRATEGY: DIRECT_ANSWER\nSpain"])])
    assert bag.bag_step(model, question, k=2, **kwargs).text == "Spain" and not model.script
    plus = bag.bag_plus_answer(ScriptedChatModel([(temperature, ["Spain", "Spain"])]), question, k=2, **kwargs)
    assert plus.answer == "Spain"
    target = bag.item_episode(AMBIGUOUS, __import__("random").Random("bag|0|c1")).target
    right = ["Spain", "Germany"][target]
    model = ScriptedChatModel([
        (temperature, ["Spain", "Germany"]), (0.0, ["STRATEGY: CLARIFICATION_QUESTION\nWhich year?"]),
        (temperature, [right, right]),
    ])  # fmt: skip
    assert bag.run_item(model, AMBIGUOUS, "bag_plus", k=2, seed=0, **kwargs)["correct"] is True
    assert not model.script


@pytest.mark.parametrize("value", [0.0, -0.5, float("nan")])
def test_belief_temperature_must_be_positive(value):
    with pytest.raises(ValueError, match="--belief-temperature=.*need a temperature > 0"):
        bag.sample_belief(ScriptedChatModel([]), [{"role": "user", "content": "q"}], k=2, seed=0,
                          belief_temperature=value)  # fmt: skip


class RecordingChatModel:
    """A chat model for the command tests: records (n, temperature, seed) of every call; K belief samples all say
    'Paris' and the strategy prompt answers."""

    def __init__(self):
        self.calls = []

    def chat(self, conversations, n=1, temperature=0.0, seed=0, max_new_tokens=None):
        self.calls.append((n, temperature, seed))
        return [["Paris"] * n if n > 1 else ["STRATEGY: DIRECT_ANSWER\nParis"]]


@pytest.fixture
def fake_model(monkeypatch):
    model = RecordingChatModel()
    monkeypatch.setattr(bag, "load_chat_model", lambda *args, **kwargs: model)
    return model


def test_fic_bag_belief_temperature_is_used_and_recorded(shared_data, tmp_path, fake_model, capsys):
    out = tmp_path / "bag"
    argv = ["--model", "fake", "--limit", "2", "--k", "3", "--seed", "0", "--out", str(out)]
    assert bag.main([*argv, "--belief-temperature", "0.4"]) == 0
    assert {t for n, t, _ in fake_model.calls if n == 3} == {0.4}  # every belief call, and only those, at 0.4
    assert {t for n, t, _ in fake_model.calls if n == 1} == {0.0}
    assert json.loads((out / "settings.json").read_text())["belief_temperature"] == 0.4
    assert json.loads((out / "summary.json").read_text())["belief_temperature"] == 0.4
    capsys.readouterr()
    assert bag.main(argv) == 2  # the default 1.0 into a folder made at 0.4: refused, naming the setting
    assert "belief_temperature: 0.4 -> 1.0" in capsys.readouterr().err
    assert bag.main([*argv[:-1], str(tmp_path / "default")]) == 0
    assert json.loads((tmp_path / "default" / "settings.json").read_text())["belief_temperature"] == 1.0


def test_fic_bag_skip_reads_the_next_items_of_the_same_draw(shared_data, tmp_path, fake_model):
    def run(out, *select):
        fake_model.calls.clear()
        assert bag.main(["--model", "fake", "--k", "2", "--seed", "3", "--out", str(tmp_path / out), *select]) == 0
        ids = [json.loads(line)["id"] for line in (tmp_path / out / "items.jsonl").read_text().splitlines()]
        return ids, [seed for n, _, seed in fake_model.calls if n == 2]

    first, _ = run("first", "--limit", "3")
    dev, dev_seeds = run("dev", "--skip", "3", "--limit", "4")
    whole, whole_seeds = run("whole", "--limit", "7")
    assert not set(first) & set(dev) and whole == first + dev
    assert dev_seeds == whole_seeds[3:]  # an item's seed is its place in the draw, whatever --skip selected
    assert json.loads((tmp_path / "dev" / "summary.json").read_text())["skip"] == 3


def test_fic_regret_bag_belief_temperature(shared_data, tmp_path, monkeypatch):
    import fic.eval.clarify.regret as regret_mod

    model = RecordingChatModel()
    monkeypatch.setattr(regret_mod, "load_chat_model", lambda *args, **kwargs: model)
    out = tmp_path / "regret"
    argv = ["--scenario", "products", "--policy", "bag", "--model", "fake", "--limit", "1", "--profile",
            "cooperative", "--seed", "0", "--embedder", "none", "--k", "3", "--out", str(out)]  # fmt: skip
    assert regret_mod.main([*argv, "--belief-temperature", "0.6"]) == 0
    assert {t for n, t, _ in model.calls if n == 3} == {0.6}
    assert json.loads((out / "settings.json").read_text())["belief_temperature"] == 0.6
    assert json.loads((out / "summary.json").read_text())["belief_temperature"] == 0.6
