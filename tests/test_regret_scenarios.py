"""Hidden-intent scenarios, the simulated user and the rule tracker on hand-built episodes."""

import random

import pytest

from fic.eval.clarify.ambigqa import AmbigQAScenario, intent_span
from fic.eval.clarify.products import ProductScenario
from fic.eval.clarify.scenarios import Evidence, after_correction, resolve_data_path
from fic.eval.clarify.tracker import RuleTracker, State, combine, parse_intent_numbers
from fic.eval.clarify.user import DONT_KNOW, NOT_SURE, PROFILES, SimulatedUser, reply_distribution


def product(
    pid,
    title,
    brand,
    price,
    rating,
    tag,
    shipping="Ships overnight",
    warranty="1 year warranty",
    ret="30 days return policy",
):
    return {
        "id": pid,
        "title": title,
        "category": "phones",
        "brand": brand,
        "price": price,
        "rating": rating,
        "tags": ["phones", tag],
        "shippingInformation": shipping,
        "warrantyInformation": warranty,
        "returnPolicy": ret,
    }


def phones(target=3):
    """Four phones: price bands budget, budget, mid-range, premium; brands X X Y Y; ratings high low low low."""
    items = [
        product(1, "Alpha One", "Xeno", 100, 4.8, "alpha"),
        product(2, "Alpha Two", "Xeno", 200, 3.0, "alpha"),
        product(3, "Gamma Three", "Ypsi", 300, 3.0, "gamma"),
        product(4, "Gamma Four", "Ypsi", 400, 3.0, "gamma", shipping="Ships in 1 week"),
    ]
    return ProductScenario().make_episode("phones-1", "phones", "I need a phone.", items, target)


def cup(target=0):
    item = {
        "id": "c1",
        "question": "Who won the cup?",
        "ambiguous": True,
        "intents": [
            {"question": "Who won the cup in 2010?", "answers": ["Spain"]},
            {"question": "Who won the cup in 2014?", "answers": ["Germany", "Die Mannschaft"]},
            {"question": "Who won the women's cup in 2015?", "answers": ["USA", "United States"]},
        ],
    }
    episode = AmbigQAScenario().make_episode(item, random.Random(0))
    episode.target = target
    return episode


# --- products -------------------------------------------------------------------------------------------------


def test_product_attributes():
    ep = phones()
    attrs = [i.attributes for i in ep.intents]
    assert [a["price_band"] for a in attrs] == ["budget", "budget", "mid-range", "premium"]
    assert [a["rating_band"] for a in attrs] == ["4.5 stars or higher"] + ["below 3.5 stars"] * 3
    # 'phones' is on every product, so it tells nothing: the type is the other tag
    assert [a["type"] for a in attrs] == ["alpha", "alpha", "gamma", "gamma"]
    assert attrs[3]["shipping"] == "Ships in 1 week"


def test_product_reference_questions_map_to_their_attribute():
    sc, ep = ProductScenario(), phones()
    for q in sc.questions(ep, [0, 1, 2, 3]):
        assert sc.question_slot(ep, q.text) == q.key.split(":", 1)[1], q.text


@pytest.mark.parametrize(
    "question,slot",
    [
        ("Which company should make it?", "brand"),
        ("How much are you willing to spend?", "price_band"),
        ("Is under $50 ok?", "price_band"),
        ("Do you care about reviews?", "rating_band"),
        ("What kind of warranty do you want?", "warranty"),  # 'kind' is weaker than 'warranty'
        ("What return policy do you need?", "return_policy"),
        ("Can you tell me more?", "type"),
        ("Do you want the Gamma Four?", "title"),  # asks for the answer itself
        ("Lorem ipsum dolor?", None),
    ],
)
def test_product_free_form_question_slot(question, slot):
    assert ProductScenario().question_slot(phones(), question) == slot


def test_product_reply_round_trip_narrows_to_matching_candidates():
    sc, ep = ProductScenario(), phones(target=3)
    user = SimulatedUser(sc, ep, "cooperative", random.Random(0))
    reply = user.respond("What price range are you thinking of?")
    assert reply == "Something premium, price-wise."
    assert sc.extract(ep, "What price range?", reply).slots == {"price_band": frozenset({3})}
    reply = user.respond("Do you have a preferred brand?")
    assert sc.extract(ep, "", reply).slots == {"brand": frozenset({2, 3})}
    # a hedge naming two values keeps both
    ev = sc.extract(ep, "", "Maybe budget or mid-range, I'm not sure.")
    assert ev.slots == {"price_band": frozenset({0, 1, 2})}


def test_product_resolve_answer_text():
    sc, ep = ProductScenario(), phones()
    assert sc.resolve(ep, "I recommend the Gamma Four.") == 3
    assert sc.resolve(ep, "gamma four") == 3
    assert sc.resolve(ep, "Either the Alpha One or the Gamma Four") is None  # hedging names two
    assert sc.resolve(ep, "a nice phone") is None
    assert sc.resolve(ep, sc.answer_text(ep, 1)) == 1


def test_product_scenario_rejects_bad_data(tmp_path):
    with pytest.raises(ValueError, match="max_intents"):
        ProductScenario(max_intents=1)
    with pytest.raises(ValueError, match="--data"):
        resolve_data_path("products", str(tmp_path / "missing.json"))


# --- ambigqa --------------------------------------------------------------------------------------------------


def test_intent_span_and_distinctive_words():
    assert intent_span("Who won the cup?", "Who won the women's cup in 2015?", []) == "women's cup in 2015"
    # an answer phrase is never part of what the user says
    assert intent_span("Who sang it?", "Who sang it with Spain in 2010?", ["Spain"]) == "in 2010"
    ep = cup()
    assert [i.attributes["span"] for i in ep.intents] == ["2010", "2014", "women's cup in 2015"]
    assert [i.attributes["distinctive"] for i in ep.intents] == [("2010",), ("2014",), ("2015", "women's")]


def test_ambigqa_user_tracker_and_resolution():
    sc, ep = AmbigQAScenario(), cup(target=2)
    user = SimulatedUser(sc, ep, "cooperative", random.Random(0))
    which = sc.questions(ep, [0, 1, 2])[0]
    assert which.key == "which" and which.text == "Which do you mean: 2010, 2014 or women's cup in 2015?"
    reply = user.respond(which.text)
    assert reply == "I mean women's cup in 2015."
    assert sc.extract(ep, which.text, reply).slots == {"intent": frozenset({2})}
    # the user does not know the answer: asked about it, it says so
    assert user.respond("Is it the USA?") == DONT_KNOW
    assert user.respond("What is the weather like?") == DONT_KNOW
    assert sc.resolve(ep, "The United States won.") == 2
    assert sc.resolve(ep, "Spain or Germany") is None  # answers of two different readings
    assert sc.resolve(ep, "No idea") is None


def test_ambigqa_shared_answer_counts_for_both_readings():
    item = {
        "id": "z",
        "question": "Largest zone?",
        "ambiguous": True,
        "intents": [
            {"question": "Largest zone by length?", "answers": ["Northern"]},
            {"question": "Largest zone by stations?", "answers": ["Northern"]},
            {"question": "Largest zone by revenue?", "answers": ["Southern"]},
        ],
    }
    sc = AmbigQAScenario()
    ep = sc.make_episode(item, random.Random(0))
    assert sc.same_intent(ep, 0, 1) and not sc.same_intent(ep, 0, 2)
    assert sc.resolve(ep, "Northern") == 0


# --- simulated user profiles ----------------------------------------------------------------------------------


def test_profiles_shape_the_reply_but_not_the_information():
    sc, ep = ProductScenario(), phones(target=3)
    q = "Do you have a preferred brand?"
    replies = {p: SimulatedUser(sc, ep, p, random.Random(1)).respond(q) for p in PROFILES if p != "vague"}
    assert replies["cooperative"] == "I'd like something from Ypsi."
    assert replies["terse"] == "Ypsi."
    assert len(replies["verbose"]) > 2 * len(replies["cooperative"]) and "Ypsi" in replies["verbose"]
    assert replies["contradicts_once"].startswith("I'd like something from Xeno.")  # the other brand, first
    for p, reply in replies.items():
        assert sc.extract(ep, q, reply).slots == {"brand": frozenset({2, 3})}, p


def test_contradicts_only_once():
    sc, ep = ProductScenario(), phones(target=3)
    user = SimulatedUser(sc, ep, "contradicts_once", random.Random(0))
    first = user.respond("Do you have a preferred brand?")
    second = user.respond("What price range are you thinking of?")
    assert "misspoke" in first and "misspoke" not in second
    assert second == "Something premium, price-wise."
    # a question with no alternative value does not use up the contradiction
    user = SimulatedUser(sc, ep, "contradicts_once", random.Random(0))
    assert user.respond("What warranty would you like?") == "It should come with a 1 year warranty."
    assert "misspoke" in user.respond("Do you have a preferred brand?")


def test_vague_user_and_its_reply_distribution():
    sc, ep = ProductScenario(), phones(target=0)
    q = "What price range are you thinking of?"
    dist = reply_distribution(sc, ep, 0, q, "vague")
    assert dist == [
        (0.5, NOT_SURE),
        (0.25, "Maybe budget or mid-range, I'm not sure."),
        (0.25, "Maybe budget or premium, I'm not sure."),
    ]
    seen = {SimulatedUser(sc, ep, "vague", random.Random(seed)).respond(q) for seed in range(40)}
    assert seen == {r for _, r in dist}
    assert reply_distribution(sc, ep, 0, "Lorem ipsum?", "cooperative") == [(1.0, DONT_KNOW)]


def test_user_never_states_the_answer():
    sc, ep = ProductScenario(), phones(target=3)
    for profile in PROFILES:
        user = SimulatedUser(sc, ep, profile, random.Random(0))
        for q in [*(q.text for q in sc.questions(ep, [0, 1, 2, 3])), "Is it the Gamma Four?", "Which one?"]:
            assert "gamma four" not in user.respond(q).lower()


def test_embedding_fallback_places_unknown_wording():
    class FakeEmbedder:
        def nearest(self, text, candidates):
            return next(i for i, c in enumerate(candidates) if "brand" in c), 0.9

    sc, ep = ProductScenario(), phones(target=3)
    assert SimulatedUser(sc, ep, "cooperative", random.Random(0)).respond("Who should produce it?") == DONT_KNOW
    user = SimulatedUser(sc, ep, "cooperative", random.Random(0), embedder=FakeEmbedder())
    assert user.respond("Who should produce it?") == "I'd like something from Ypsi."


@pytest.mark.slow
def test_minilm_embedder_places_paraphrases():
    from fic.eval.clarify.embed import get_embedder

    sc, ep = ProductScenario(), phones(target=3)
    user = SimulatedUser(sc, ep, "cooperative", random.Random(0), embedder=get_embedder("minilm"))
    assert user.respond("How much money can you put in?") == "Something premium, price-wise."
    assert user.respond("Blorp zint quaff?") == DONT_KNOW


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="profile='grumpy'"):
        SimulatedUser(ProductScenario(), phones(), "grumpy", random.Random(0))


# --- tracker --------------------------------------------------------------------------------------------------


def test_combine_replace_intersect_and_conflicts():
    s = State.initial(4)
    s = combine(s, Evidence({"brand": frozenset({2, 3})}))
    assert s.consistent == (2, 3)
    s = combine(s, Evidence({"price": frozenset({3})}))
    assert s.consistent == (3,)
    # a new statement about a slot replaces the old one
    s2 = combine(s, Evidence({"brand": frozenset({0, 1, 3})}))
    assert s2.consistent == (3,)
    # conflicting statements: the newest wins, the older conflicting slot is skipped
    s3 = combine(s, Evidence({"brand": frozenset({0, 1})}))
    assert s3.consistent == (0, 1)
    # free-text slots narrow, unless the user corrects themselves or the sets are disjoint
    t = combine(State.initial(3), Evidence({"intent": frozenset({0, 1})}, mode="intersect"))
    assert combine(t, Evidence({"intent": frozenset({1, 2})}, mode="intersect")).consistent == (1,)
    assert combine(t, Evidence({"intent": frozenset({1, 2})}, mode="intersect", correction=True)).consistent == (1, 2)
    assert combine(t, Evidence({"intent": frozenset({2})}, mode="intersect")).consistent == (2,)
    assert combine(t, Evidence({})).consistent == (0, 1)


def test_rule_tracker_reads_the_correction():
    sc, ep = ProductScenario(), phones(target=3)
    tracker = RuleTracker(sc)
    reply = "I'd like something from Xeno. Actually no, sorry, I misspoke: I'd like something from Ypsi."
    assert after_correction(reply)[1] is True
    state = tracker.update(ep, tracker.initial(ep), "Do you have a preferred brand?", reply)
    assert state.consistent == (2, 3)


def test_parse_intent_numbers():
    assert parse_intent_numbers("2, 3 and maybe 9", 4) == [1, 2]
    assert parse_intent_numbers("none", 4) == []
