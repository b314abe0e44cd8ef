"""The reference planner, the baseline / model / BAG policies and whole episodes, against hand-computed values.

The hand-built catalogue (four phones, target 'Gamma Four'):

    type   brand  price band  rating band  shipping
    alpha  Xeno   budget      high         overnight
    alpha  Xeno   budget      low          overnight
    gamma  Ypsi   mid-range   low          overnight
    gamma  Ypsi   premium     low          1 week

Expected information gain (cooperative user, uniform prior on 4): price 2 - (1/2)log2 2 = 1.5 bits; type and brand
1 bit; rating and shipping 2 - (3/4)log2 3 = 0.811; warranty and returns 0.
"""

import math
import random

import pytest
from conftest import ScriptedChatModel

from fic.eval.clarify.ambigqa import AmbigQAScenario
from fic.eval.clarify.episode import run_episode
from fic.eval.clarify.planner import GreedyPlanner
from fic.eval.clarify.policies import (
    AlwaysAnswerPolicy,
    AlwaysAskPolicy,
    BAGPolicy,
    ModelPolicy,
    ReferencePolicy,
    get_policy,
)
from fic.eval.clarify.products import ProductScenario
from fic.eval.clarify.scenarios import Question
from fic.eval.clarify.tracker import RuleTracker, State
from fic.eval.clarify.user import SimulatedUser


def product(pid, title, brand, price, rating, tag, shipping="Ships overnight"):
    return {
        "id": pid,
        "title": title,
        "category": "phones",
        "brand": brand,
        "price": price,
        "rating": rating,
        "tags": ["phones", tag],
        "shippingInformation": shipping,
        "warrantyInformation": "1 year warranty",
        "returnPolicy": "30 days return policy",
    }


def phones(target=3):
    items = [
        product(1, "Alpha One", "Xeno", 100, 4.8, "alpha"),
        product(2, "Alpha Two", "Xeno", 200, 3.0, "alpha"),
        product(3, "Gamma Three", "Ypsi", 300, 3.0, "gamma"),
        product(4, "Gamma Four", "Ypsi", 400, 3.0, "gamma", shipping="Ships in 1 week"),
    ]
    return ProductScenario().make_episode("phones-1", "phones", "I need a phone.", items, target)


def play(policy, episode, scenario=None, profile="cooperative", cost=0.1, max_turns=6):
    scenario = scenario or ProductScenario()
    user = SimulatedUser(scenario, episode, profile, random.Random(0))
    return run_episode(scenario, episode, policy, user, RuleTracker(scenario), cost, max_turns, profile=profile)


def q(key):
    sc = ProductScenario()
    return next(x for x in sc.questions(phones(), [0, 1, 2, 3]) if x.key == key)


def test_information_gain_hand_computed():
    planner = GreedyPlanner(ProductScenario(), cost=0.1, max_turns=6)
    ep, s = phones(), State.initial(4)
    gains = {
        k: planner.information_gain(ep, s, q(f"attr:{k}"))
        for k in ("price_band", "type", "brand", "rating_band", "shipping", "warranty", "return_policy")
    }
    assert gains["price_band"] == pytest.approx(1.5)
    assert gains["type"] == pytest.approx(1.0) and gains["brand"] == pytest.approx(1.0)
    assert gains["rating_band"] == pytest.approx(2 - 0.75 * math.log2(3))
    assert gains["shipping"] == pytest.approx(2 - 0.75 * math.log2(3))
    assert gains["warranty"] == 0.0 and gains["return_policy"] == 0.0
    best, gain = planner.greedy_question(ep, s, frozenset())
    assert best.key == "attr:price_band" and gain == pytest.approx(1.5)


def test_information_gain_with_a_vague_user():
    # half the time "not sure" (state stays at 4); otherwise "<own band> or <other band>", each other band equally
    # likely: targets in budget keep 3 either way, mid-range/premium keep 3 or 2.
    planner = GreedyPlanner(ProductScenario(), cost=0.1, max_turns=6, profile="vague")
    l3, l2 = math.log2(3), 1.0
    expected_after = 0.5 * 2 + 0.5 * (2 * l3 + 2 * (l3 + l2) / 2) / 4
    assert planner.information_gain(phones(), State.initial(4), q("attr:price_band")) == pytest.approx(
        2 - expected_after
    )


def test_reference_value_of_information_and_stopping_rule():
    # After the price question: 1/2 resolved (C or D), 1/2 left with {A, B}, where the rating question resolves.
    # c = 0.1: V({A,B}) = max(1/2, 1 - c) = 0.9; E V after price = 1/2 + 1/2 * 0.9 = 0.95; VOI = 0.95 - 1/4 = 0.7.
    ep, s = phones(), State.initial(4)
    plan = GreedyPlanner(ProductScenario(), cost=0.1, max_turns=6).plan(ep, s, frozenset(), 0)
    assert (plan.act, plan.question.key) == ("ask", "attr:price_band")
    assert plan.voi == pytest.approx(0.7) and plan.answer_value == pytest.approx(0.25)
    assert GreedyPlanner(ProductScenario(), 0.1, 6).value(ep, s, frozenset(), 6) == pytest.approx(0.85)
    # c = 0.6: V({A,B}) = 1/2, E V after price = 0.75, VOI = 0.5 < 0.6 -> answer now with the first candidate
    plan = GreedyPlanner(ProductScenario(), cost=0.6, max_turns=6).plan(ep, s, frozenset(), 0)
    assert plan.act == "answer" and plan.intent == 0 and plan.voi == pytest.approx(0.5)
    # no turns left, or one candidate left: answer
    assert GreedyPlanner(ProductScenario(), 0.1, 6).plan(ep, s, frozenset(), 6).act == "answer"
    assert GreedyPlanner(ProductScenario(), 0.1, 6).plan(ep, State(4, (), (3,)), frozenset(), 0).act == "answer"


def test_reference_episode():
    rec = play(ReferencePolicy(ProductScenario(), 0.1, 6), phones(target=3))
    assert [x["key"] for x in rec["questions"]] == ["attr:price_band"]
    assert rec["questions"][0]["reply"] == "Something premium, price-wise."
    assert (rec["questions"][0]["before"], rec["questions"][0]["after"]) == (4, 1)
    assert rec["resolved"] and rec["turns"] == 1 and rec["value"] == pytest.approx(0.9)
    assert rec["user_tokens"] == 7  # Something premium , price - wise .
    assert rec["stopping"] == {"answer_early": False, "ask_late": 0}
    # target A: price leaves {A, B}, then the rating question
    rec = play(ReferencePolicy(ProductScenario(), 0.1, 6), phones(target=0))
    assert [x["key"] for x in rec["questions"]] == ["attr:price_band", "attr:rating_band"]
    assert rec["resolved"] and rec["value"] == pytest.approx(0.8)


def test_always_answer_episode():
    rec = play(AlwaysAnswerPolicy(ProductScenario(), 6), phones(target=3))
    assert rec["turns"] == 0 and rec["final"]["intent"] == 0 and not rec["resolved"] and rec["value"] == 0.0
    assert rec["stopping"] == {"answer_early": True, "ask_late": 0}


def test_always_ask_episode():
    rec = play(AlwaysAskPolicy(ProductScenario(), 3), phones(target=3), max_turns=3)
    # price first (highest gain), then the pool in order although nothing is left to learn
    assert [x["key"] for x in rec["questions"]] == ["attr:price_band", "attr:type", "attr:brand"]
    assert [x["ineffective"] for x in rec["questions"]] == [False, True, True]
    assert rec["resolved"] and rec["turns"] == 3 and rec["value"] == pytest.approx(0.7)
    assert rec["stopping"] == {"answer_early": False, "ask_late": 2}


def test_repeated_question_is_ineffective():
    class AskBrandTwice:
        name = "twice"

        def __init__(self):
            self.n = 0

        def act(self, ctx):
            from fic.eval.clarify.policies import Action

            self.n += 1
            if self.n <= 2:
                return Action("ask", ["Do you have a preferred brand?", "Which brand was it again?"][self.n - 1])
            return Action("answer", "I recommend the Gamma Four.")

    rec = play(AskBrandTwice(), phones(target=3))
    assert [x["repeat"] for x in rec["questions"]] == [False, True]
    assert [x["ineffective"] for x in rec["questions"]] == [False, True]
    assert rec["resolved"] and rec["final"]["intent"] == 3 and rec["value"] == pytest.approx(0.8)


def test_out_of_turns_is_unresolved():
    # a model that keeps asking: after max_turns questions the episode ends unresolved
    model = ScriptedChatModel([(0.0, ["Which brand?"]), (0.0, ["What price range?"]), (0.0, ["Gamma Four, right?"])])
    rec = play(ModelPolicy(model), phones(target=3), max_turns=2)
    assert rec["final"]["act"] == "out_of_turns" and not rec["resolved"] and rec["value"] == pytest.approx(-0.2)
    assert rec["turns"] == 2 and rec["stopping"] == {"answer_early": False, "ask_late": 1}


def test_reference_on_ambigqa():
    item = {
        "id": "c1",
        "question": "Who won the cup?",
        "ambiguous": True,
        "intents": [
            {"question": "Who won the cup in 2010?", "answers": ["Spain"]},
            {"question": "Who won the cup in 2014?", "answers": ["Germany"]},
            {"question": "Who won the women's cup in 2015?", "answers": ["USA"]},
        ],
    }
    sc = AmbigQAScenario()
    ep = sc.make_episode(item, random.Random(0))
    ep.target = 2
    rec = play(ReferencePolicy(sc, 0.1, 6), ep, scenario=sc)
    assert [x["key"] for x in rec["questions"]] == ["which"]
    assert rec["questions"][0]["reply"] == "I mean women's cup in 2015."
    assert rec["final"]["text"] == "USA" and rec["resolved"] and rec["value"] == pytest.approx(0.9)
    # with a per-turn cost above what the question can gain (1 - 1/3), it answers at once
    rec = play(ReferencePolicy(sc, 0.7, 6), ep, scenario=sc)
    assert rec["turns"] == 0 and not rec["resolved"]


def test_model_policy_asks_then_answers():
    model = ScriptedChatModel([(0.0, ["Which brand do you like?"]), (0.0, ["I recommend the Gamma Four."])])
    rec = play(ModelPolicy(model), phones(target=3))
    assert rec["questions"][0]["reply"] == "I'd like something from Ypsi."
    assert rec["resolved"] and rec["turns"] == 1 and rec["value"] == pytest.approx(0.9)
    # the model saw the catalogue in its system prompt and the user's reply in the dialogue
    assert model.calls[1][0]["role"] == "system" and "Gamma Four" in model.calls[1][0]["content"]
    assert model.calls[1][-1] == {"role": "user", "content": "I'd like something from Ypsi."}


def test_bag_policy_clarifies_then_bag_plus_answers():
    first = ["Gamma Four", "Alpha One", "Gamma Three", "Alpha Two", "the Gamma Four"]
    model = ScriptedChatModel(
        [
            (1.0, first),
            (0.0, ["STRATEGY: CLARIFICATION_QUESTION\nWhat price range are you thinking of?"]),
            (1.0, ["Gamma Four", "Gamma Four!", "I'd say Gamma Four", "Alpha One", "gamma four"]),
        ]
    )
    rec = play(BAGPolicy(model, k=5, agree=0.7), phones(target=3))
    assert rec["questions"][0]["question"] == "What price range are you thinking of?"
    info0 = rec["questions"][0]["info"]
    # samples cluster by the product they name: {3: 2, 0: 1, 2: 1, 1: 1}
    assert info0["semantic_entropy"] == pytest.approx(-(0.4 * math.log(0.4) + 3 * 0.2 * math.log(0.2)))
    assert "1. Gamma Four" in model.calls[1][-1]["content"]  # the belief is shown in the strategy prompt
    assert rec["final"]["info"]["agreement"] == pytest.approx(0.8)
    assert rec["resolved"] and rec["value"] == pytest.approx(0.9)


def test_bag_plus_abstains_without_agreement():
    model = ScriptedChatModel(
        [
            (1.0, ["a", "b", "c"]),
            (0.0, ["STRATEGY: clarify\nWhich brand?"]),
            (1.0, ["Gamma Four", "Alpha One", "Gamma Three"]),
        ]
    )
    rec = play(BAGPolicy(model, k=3), phones(target=3))
    assert rec["final"]["act"] == "abstain" and not rec["resolved"] and rec["value"] == pytest.approx(-0.1)


def test_bag_policy_samples_its_belief_at_the_belief_temperature():
    """Both the first-turn belief and BAG+'s resampling reach the model at `belief_temperature` (the scripted model
    checks every call's temperature); the strategy prompt stays greedy."""
    model = ScriptedChatModel(
        [
            (0.3, ["Gamma Four", "Alpha One", "Gamma Three"]),
            (0.0, ["STRATEGY: CLARIFICATION_QUESTION\nWhat price range are you thinking of?"]),
            (0.3, ["Gamma Four", "gamma four", "Gamma Four!"]),
        ]
    )
    policy = get_policy("bag", ProductScenario(), 0.1, 6, model=model, k=3, agree=0.7, belief_temperature=0.3)
    rec = play(policy, phones(target=3))
    assert not model.script and rec["resolved"]  # all three calls made, at the temperatures scripted
    with pytest.raises(ValueError, match="--belief-temperature=0"):
        BAGPolicy(model, belief_temperature=0.0)


def test_get_policy_errors():
    with pytest.raises(ValueError, match="--model"):
        get_policy("bag", ProductScenario(), 0.1, 6)
    with pytest.raises(ValueError, match="policy='oracle'"):
        get_policy("oracle", ProductScenario(), 0.1, 6)
    assert isinstance(get_policy("always_ask", ProductScenario(), 0.1, 6), AlwaysAskPolicy)
    assert Question("k", "t").key == "k"
