"""Product recommendation episodes from the DummyJSON catalog.

The user wants one product (the hidden intent) and opens vaguely, with a category or a need. The candidates are
products of that category; attributes tell them apart: brand, price band (terciles of the candidates' prices),
rating band, type (a tag that not every product of the category carries), shipping, warranty and return policy.
The user answers attribute questions with the target's value; the rule tracker reads values back out of replies by
longest-first phrase matching, so a reply that names a value keeps the candidates that have it.
"""

from __future__ import annotations

import random
from pathlib import Path

from fic.eval.clarify.scenarios import (
    Episode,
    Evidence,
    Fact,
    Intent,
    Question,
    after_correction,
    load_records,
)
from fic.eval.clarify.text import normalize_answer, token_f1, words

ATTRIBUTES = ("type", "brand", "price_band", "rating_band", "shipping", "warranty", "return_policy")
PRICE_BANDS = ("budget", "mid-range", "premium")
RATING_BANDS = ("below 3.5 stars", "3.5 to 4.5 stars", "4.5 stars or higher")

QUESTIONS = {
    "type": "What kind of {noun} are you after?",
    "brand": "Do you have a preferred brand?",
    "price_band": "What price range are you thinking of: budget, mid-range or premium?",
    "rating_band": "How well rated should it be?",
    "shipping": "How soon do you need it shipped?",
    "warranty": "What warranty would you like it to come with?",
    "return_policy": "What return policy do you need?",
}
SENTENCES = {
    "type": "I'm after {value}.",
    "brand": "I'd like something from {value}.",
    "price_band": "Something {value}, price-wise.",
    "rating_band": "It should be rated {value}.",
    "shipping": "I need something that {value}.",
    "warranty": "It should come with a {value}.",
    "return_policy": "I'd like a {value}.",
}
# Words that point a free-form question at an attribute. Attribute cues weigh 3 (as does naming a value), 'type'
# cues 1.5, and generic words that usually mean "tell me what you want" 0.5 towards 'type'.
CUES = {
    "brand": ("brand", "brands", "make", "maker", "manufacturer", "company", "label"),
    "price_band": (
        "price",
        "prices",
        "priced",
        "budget",
        "cost",
        "costs",
        "spend",
        "expensive",
        "cheap",
        "afford",
        "pricey",
        "affordable",
        "money",
        "dollars",
    ),
    "rating_band": ("rating", "rated", "ratings", "review", "reviews", "reviewed", "stars", "star", "quality"),
    "shipping": ("ship", "shipped", "shipping", "delivery", "deliver", "delivered", "arrive", "soon", "quickly"),
    "warranty": ("warranty", "guarantee", "guaranteed"),
    "return_policy": ("return", "returns", "refund", "returnable"),
    "type": ("kind", "type", "sort", "style"),
}
GENERIC_CUES = (
    "what",
    "which",
    "more",
    "exactly",
    "specifically",
    "need",
    "looking",
    "prefer",
    "preferences",
    "use",
    "details",
    "describe",
    "tell",
)
CUE_WEIGHT = {"type": 1.5}
CATEGORY_NOUNS = {
    "beauty": "beauty product",
    "fragrances": "fragrance",
    "groceries": "grocery item",
    "skin-care": "skin care product",
    "vehicle": "vehicle",
    "motorcycle": "motorcycle",
}
NEEDS = {
    "beauty": "I want to pick up some makeup.",
    "fragrances": "I'm looking for a nice scent.",
    "furniture": "I need some furniture.",
    "groceries": "I need to get some groceries.",
    "home-decoration": "I want something to decorate my home.",
    "kitchen-accessories": "I need something for my kitchen.",
    "laptops": "I need a new computer for work.",
    "mens-shirts": "I need a new shirt.",
    "mens-shoes": "I need new shoes.",
    "mens-watches": "I want a watch.",
    "mobile-accessories": "I need an accessory for my phone.",
    "motorcycle": "I'm thinking about getting a motorbike.",
    "skin-care": "I need something for my skin.",
    "smartphones": "My phone broke and I need a new one.",
    "sports-accessories": "I need some sports gear.",
    "sunglasses": "I want some sunglasses for the summer.",
    "tablets": "I'd like a tablet.",
    "tops": "I'm looking for something to wear.",
    "vehicle": "I need a car.",
    "womens-bags": "I'd like a new bag.",
    "womens-dresses": "I need a dress for an event.",
    "womens-jewellery": "I'd like some jewellery.",
    "womens-shoes": "I need a pair of shoes.",
    "womens-watches": "I'd like a nice watch.",
}


def _rating_band(rating: float) -> str:
    return RATING_BANDS[0] if rating < 3.5 else RATING_BANDS[1] if rating < 4.5 else RATING_BANDS[2]


def _price_bands(prices: list[float]) -> list[str]:
    """Terciles of the candidates' prices by rank; equal prices share the band of their first rank."""
    ranked = sorted(prices)
    return [PRICE_BANDS[min(2, ranked.index(p) * 3 // len(prices))] for p in prices]


def _phrase(attr: str, value: str) -> str:
    """How a value is said in a sentence (and matched back by the tracker)."""
    if attr in ("shipping", "warranty", "return_policy"):
        return value[0].lower() + value[1:]
    return value


class ProductScenario:
    name = "products"

    def __init__(self, max_intents: int = 10):
        if max_intents < 2:
            raise ValueError(f"max_intents={max_intents} is too small; an episode needs at least 2 candidates.")
        self.max_intents = max_intents

    def load(self, path: str | Path) -> list[dict]:
        """The catalog's product dicts (via `fic.data.load_source('products:PATH')`)."""
        products = [r.meta for r in load_records("products", path)]
        for i, p in enumerate(products):
            missing = [k for k in ("id", "title", "category", "price", "rating") if k not in p]
            if missing:
                raise ValueError(f"{path}: product #{i} lacks {missing}; pass the DummyJSON products.json catalog.")
        return products

    def build_episodes(self, data: list[dict], n: int, seed: int) -> list[Episode]:
        """`n` episodes: a category drawn uniformly (among those with >= 2 products), a target uniform within it,
        and up to `max_intents` candidates from the category including the target."""
        by_cat: dict[str, list[dict]] = {}
        for p in data:
            by_cat.setdefault(p["category"], []).append(p)
        cats = sorted(c for c, ps in by_cat.items() if len(ps) >= 2)
        if not cats:
            raise ValueError("The product catalog has no category with at least 2 products; pass a larger catalog.")
        rng = random.Random(f"products/{seed}")
        episodes = []
        for k in range(n):
            cat = rng.choice(cats)
            pool = by_cat[cat]
            target = rng.choice(pool)
            others = [p for p in pool if p is not target]
            chosen = [target] + rng.sample(others, min(len(others), self.max_intents - 1))
            chosen.sort(key=lambda p: p["id"])
            request = NEEDS.get(cat) if rng.random() < 0.5 and cat in NEEDS else None
            request = request or f"I'm looking for something in {cat.replace('-', ' ')}."
            episodes.append(
                self.make_episode(f"products-{k:04d}-{target['id']}", cat, request, chosen, chosen.index(target))
            )
        return episodes

    def make_episode(self, eid: str, category: str, request: str, products: list[dict], target: int) -> Episode:
        """An episode over `products` (all of one category); attributes are derived here."""
        all_tags = [set(p.get("tags") or []) for p in products]
        common = set.intersection(*all_tags) if all_tags else set()
        bands = _price_bands([float(p["price"]) for p in products])
        intents = []
        for p, tags, band in zip(products, all_tags, bands):
            kinds = [t for t in (p.get("tags") or []) if t not in common]
            attrs = {
                "type": kinds[0] if kinds else None,
                "tags": tuple(sorted(tags - common)),
                "brand": p.get("brand") or None,
                "price_band": band,
                "rating_band": _rating_band(float(p["rating"])),
                "shipping": p.get("shippingInformation") or None,
                "warranty": p.get("warrantyInformation") or None,
                "return_policy": p.get("returnPolicy") or None,
                "price": float(p["price"]),
                "rating": float(p["rating"]),
            }
            intents.append(Intent(id=str(p["id"]), label=p["title"], attributes=attrs))
        return Episode(
            id=eid, scenario=self.name, request=request, intents=intents, target=target, meta={"category": category}
        )

    # --- the reference's question pool -------------------------------------------------------------------------
    def questions(self, episode: Episode, consistent: list[int]) -> list[Question]:
        noun = CATEGORY_NOUNS.get(episode.meta.get("category", ""), "product")
        return [Question(key=f"attr:{a}", text=QUESTIONS[a].format(noun=noun)) for a in ATTRIBUTES]

    # --- what the user can say ---------------------------------------------------------------------------------
    def _vocab(self, episode: Episode) -> dict[str, list[tuple[str, str]]]:
        """Normalised phrase -> [(attribute, value)] for every attribute value among the candidates, longest phrase
        first (computed once per episode)."""
        cached = episode.__dict__.get("_product_vocab")
        if cached is None:
            cached = episode.__dict__["_product_vocab"] = self._build_vocab(episode)
        return cached

    def _build_vocab(self, episode: Episode) -> dict[str, list[tuple[str, str]]]:
        out = set()
        for intent in episode.intents:
            for attr in ATTRIBUTES:
                values = intent.attributes.get("tags", ()) if attr == "type" else (intent.attributes.get(attr),)
                for value in values:
                    if value:
                        out.add((normalize_answer(_phrase(attr, value)), attr, value))
                        if attr == "price_band":
                            out.add((normalize_answer(value.replace("-", " ")), attr, value))
        by_phrase: dict[str, list[tuple[str, str]]] = {}
        for phrase, attr, value in sorted(out, key=lambda t: (-len(t[0]), t)):
            if phrase:
                by_phrase.setdefault(phrase, []).append((attr, value))
        return by_phrase

    def _mentions(self, episode: Episode, text: str) -> list[tuple[str, str]]:
        """(attribute, value) pairs named in `text`. Longer phrases win and are blanked before shorter ones; a
        phrase that names several attributes (brand 'Apple' and tag 'apple') yields all of them."""
        norm = f" {normalize_answer(text)} "
        found = []
        for phrase, pairs in self._vocab(episode).items():  # longest first
            if f" {phrase} " in norm:
                found.extend(pairs)
                norm = norm.replace(f" {phrase} ", " | ")
        return found

    def question_slot(self, episode: Episode, question: str) -> str | None:
        """The attribute a free-form question asks about, by weighted cues (see CUES; ties go to the cue that comes
        first); None when nothing points anywhere. A question naming a product title asks for the answer itself
        -> 'title'."""
        qn = f" {normalize_answer(question)} "
        for intent in episode.intents:
            if len(intent.label) > 3 and f" {normalize_answer(intent.label)} " in qn:
                return "title"
        scores = {a: 0.0 for a in ATTRIBUTES}
        first_pos = {a: 10**6 for a in ATTRIBUTES}
        for attr, _ in self._mentions(episode, question):
            scores[attr] += 3
        for pos, tok in enumerate(words(question)):
            for attr, cues in CUES.items():
                if tok in cues:
                    scores[attr] += CUE_WEIGHT.get(attr, 3)
                    first_pos[attr] = min(first_pos[attr], pos)
            if tok in GENERIC_CUES:
                scores["type"] += 0.5
                first_pos["type"] = min(first_pos["type"], pos)
        if "$" in question:
            scores["price_band"] += 3
        best = max(scores.values())
        if best <= 0:
            return None
        return min((a for a in ATTRIBUTES if scores[a] == best), key=lambda a: first_pos[a])

    def fact(self, episode: Episode, target: int, question: str) -> Fact | None:
        attr = self.question_slot(episode, question)
        if attr is None or attr == "title":
            return None
        value = episode.intents[target].attributes.get(attr)
        if not value:
            return None
        others = sorted({i.attributes.get(attr) for i in episode.intents} - {value, None})
        alternatives = [(v, SENTENCES[attr].format(value=_phrase(attr, v))) for v in others]
        hedges = [f"{_phrase(attr, value)} or {_phrase(attr, v)}" for v in others]
        return Fact(
            slot=attr,
            value=value,
            sentence=SENTENCES[attr].format(value=_phrase(attr, value)),
            phrase=_phrase(attr, value),
            alternatives=alternatives,
            hedges=hedges,
        )

    def sentence(self, slot: str, value: str) -> str:
        return SENTENCES[slot].format(value=_phrase(slot, value))

    # --- what a reply tells the tracker ------------------------------------------------------------------------
    def extract(self, episode: Episode, question: str, reply: str) -> Evidence:
        """Values named in the reply (after its last self-correction cue, if any); several values of one attribute
        mean 'any of these'. When a phrase names two attributes, the one the question asked about wins."""
        reply, correction = after_correction(reply)
        mentions = self._mentions(episode, reply)
        asked = self.question_slot(episode, question) if question else None
        by_phrase: dict[str, list[tuple[str, str]]] = {}
        for attr, value in mentions:
            by_phrase.setdefault(normalize_answer(_phrase(attr, value)), []).append((attr, value))
        values: dict[str, set[str]] = {}
        for pairs in by_phrase.values():
            if len(pairs) > 1 and any(a == asked for a, _ in pairs):
                pairs = [(a, v) for a, v in pairs if a == asked]
            for attr, value in pairs:
                values.setdefault(attr, set()).add(value)
        slots = {}
        for attr, vals in values.items():
            if attr == "type":
                ids = [i for i, it in enumerate(episode.intents) if vals & set(it.attributes.get("tags", ()))]
            else:
                ids = [i for i, it in enumerate(episode.intents) if it.attributes.get(attr) in vals]
            slots[attr] = frozenset(ids)
        return Evidence(slots=slots, mode="replace", correction=correction)

    # --- answers -----------------------------------------------------------------------------------------------
    def resolve(self, episode: Episode, answer: str) -> int | None:
        """The one candidate whose title the answer names (whole words), else the unique best title by token F1
        when it is at least 0.6; None when the answer names several or none."""
        named = [
            i
            for i, it in enumerate(episode.intents)
            if f" {normalize_answer(it.label)} " in f" {normalize_answer(answer)} "
        ]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            return None
        scores = [token_f1(answer, it.label) for it in episode.intents]
        best = max(scores)
        if best >= 0.6 and scores.count(best) == 1:
            return scores.index(best)
        return None

    def same_intent(self, episode: Episode, i: int, j: int) -> bool:
        return i == j

    def answer_text(self, episode: Episode, index: int) -> str:
        return f"I recommend the {episode.intents[index].label}."

    def leaks(self, episode: Episode, target: int, text: str) -> bool:
        return f" {normalize_answer(episode.intents[target].label)} " in f" {normalize_answer(text)} "

    def describe(self, episode: Episode, index: int) -> str:
        a = episode.intents[index].attributes
        parts = [f"{k.replace('_', ' ')}: {a[k]}" for k in ATTRIBUTES if a.get(k)]
        return f"{episode.intents[index].label} ({'; '.join(parts)})"

    def system_prompt(self, episode: Episode) -> str:
        lines = [f"- {self.describe(episode, i)}" for i in range(len(episode.intents))]
        return (
            "You are a shopping assistant. The user wants exactly one of these products:\n"
            + "\n".join(lines)
            + "\nIf you are not sure which one, ask one short clarifying question. When you know, recommend one "
            "product by its exact name."
        )
