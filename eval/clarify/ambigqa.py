"""Ambiguous open-domain QA episodes from AmbigQA (AmbigNQ light).

The request is the ambiguous question; the intents are its disambiguated question/answer pairs. Each intent's
*span* is what its disambiguated question adds to the original (the shortest stretch of it covering the new content
words, e.g. 'in baseball', 'by revenue'): that is what a user who means it can say when asked, and it never contains
the answer. The rule tracker scores a reply against each intent's distinctive words (span words not shared by every
intent) and keeps the best-scoring intents.
"""

from __future__ import annotations

import random
import re
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
from fic.eval.clarify.text import (
    STOPWORDS,
    content_words,
    matches_any_answer,
    normalize_answer,
    words,
)

CLARIFY_CUES = frozenset(
    "mean meant which clarify clarification specify specific referring refer talking asking kind type sort context "
    "particular exactly interested version sense aspect".split()
)
# Words a reply uses around the span; they carry no information about which intent is meant.
REPLY_FILLER = frozenset(
    "mean meant one sorry actually misspoke scratch think sure maybe guess something know hmm asking about really "
    "question oh good well".split()
)


def ambigqa_item(record) -> dict:
    """A `fic.data` AmbigQA record -> {'id', 'question', 'intents': [{'question', 'answers'}], 'ambiguous'}."""
    question = next(m["content"] for m in reversed(record.messages) if m["role"] == "user")
    intents = [{"question": i["question"], "answers": list(i["answers"])} for i in record.meta["intents"]]
    return {
        "id": str(record.id),
        "question": question,
        "intents": intents,
        "ambiguous": bool(record.meta["ambiguous"]),
    }


def load_ambigqa(path: str | Path) -> list[dict]:
    """AmbigQA items (via `fic.data.load_source('ambigqa:PATH')`)."""
    return [ambigqa_item(r) for r in load_records("ambigqa", path)]


def intent_span(original: str, question: str, answers: list[str]) -> str:
    """The stretch of `question` from its first to its last content word absent from `original`, with every
    answer phrase in `answers` blanked out (the user never says an answer); '' when nothing is added."""
    base = set(content_words(original))
    toks = re.findall(r"\S+", question)
    new = [i for i, t in enumerate(toks) if (w := words(t)) and any(x not in base and x not in STOPWORDS for x in w)]
    if not new:
        return ""
    span = " ".join(toks[new[0] : new[-1] + 1]).strip(" ?.,;:!\"'")
    for answer in sorted(answers, key=len, reverse=True):
        if answer.strip():
            span = re.sub(rf"(?<!\w){re.escape(answer.strip())}(?!\w)", "", span, flags=re.IGNORECASE)
    return " ".join(span.split()).strip(" ,;:")


class AmbigQAScenario:
    name = "ambigqa"

    def load(self, path: str | Path) -> list[dict]:
        return load_ambigqa(path)

    def build_episodes(self, data: list[dict], n: int, seed: int) -> list[Episode]:
        """`n` episodes from ambiguous items with >= 2 distinct disambiguations, in a seeded order."""
        items = [it for it in data if it["ambiguous"]]
        rng = random.Random(f"ambigqa/{seed}")
        order = sorted(items, key=lambda it: it["id"])
        rng.shuffle(order)
        episodes = []
        for item in order:
            if len(episodes) >= n:
                break
            ep = self.make_episode(item, rng)
            if ep is not None:
                episodes.append(ep)
        if not episodes and n > 0:
            raise ValueError("No AmbigQA item has two distinguishable intents; pass AmbigQA dev_light.json.")
        return episodes

    def make_episode(self, item: dict, rng: random.Random) -> Episode | None:
        seen, intents = set(), []
        all_answers = [a for qa in item["intents"] for a in qa.get("answers", [])]
        for qa in item["intents"]:
            key = normalize_answer(qa["question"])
            if key in seen or not qa.get("answers"):
                continue
            seen.add(key)
            span = intent_span(item["question"], qa["question"], all_answers)
            intents.append({"question": qa["question"], "answers": list(qa["answers"]), "span": span})
        if len(intents) < 2:
            return None
        base = set(content_words(item["question"]))
        span_sets = [set(content_words(i["span"])) - base for i in intents]
        common = set.intersection(*span_sets)
        for intent, ws in zip(intents, span_sets):
            intent["distinctive"] = tuple(sorted(ws - common - REPLY_FILLER))
        if len({i["distinctive"] for i in intents}) < 2:
            return None
        built = [Intent(id=f"{item['id']}#{k}", label=i["answers"][0], attributes=i) for k, i in enumerate(intents)]
        return Episode(
            id=f"ambigqa-{item['id']}",
            scenario=self.name,
            request=item["question"],
            intents=built,
            target=rng.randrange(len(built)),
            meta={"item_id": item["id"]},
        )

    # --- the reference's question pool -------------------------------------------------------------------------
    def questions(self, episode: Episode, consistent: list[int]) -> list[Question]:
        spans = []
        for i in consistent:
            span = episode.intents[i].attributes["span"]
            if span and span not in spans:
                spans.append(span)
        out = []
        if len(spans) >= 2:
            out.append(Question(key="which", text=f"Which do you mean: {', '.join(spans[:-1])} or {spans[-1]}?"))
        for i, intent in enumerate(episode.intents):
            if intent.attributes["span"]:
                out.append(Question(key=f"confirm:{i}", text=f"Do you mean {intent.attributes['span']}?"))
        return out

    def question_slot(self, episode: Episode, question: str) -> str | None:
        """'intent' when the question is a clarification the user can answer, 'answer' when it names the target's
        gold answer (the user asked because they do not know it), None otherwise."""
        if self.leaks(episode, episode.target, question):
            return "answer"
        qwords = set(words(question))
        if qwords & CLARIFY_CUES:
            return "intent"
        if any(qwords & set(i.attributes["distinctive"]) for i in episode.intents):
            return "intent"
        return None

    def fact(self, episode: Episode, target: int, question: str) -> Fact | None:
        if self.question_slot(episode, question) != "intent":
            return None
        span = episode.intents[target].attributes["span"]
        if not span:
            return None
        others = []
        for i, intent in enumerate(episode.intents):
            s = intent.attributes["span"]
            if i != target and s and s != span and s not in [o for o, _ in others]:
                others.append((s, self.sentence("intent", s)))
        distinctive = [w for w in content_words(span) if w in episode.intents[target].attributes["distinctive"]]
        hedges = distinctive[:1] if len(distinctive) >= 2 else []
        return Fact(
            slot="intent",
            value=span,
            sentence=self.sentence("intent", span),
            phrase=span,
            alternatives=others,
            hedges=hedges,
        )

    def sentence(self, slot: str, value: str) -> str:
        return f"I mean {value}."

    # --- what a reply tells the tracker ------------------------------------------------------------------------
    def extract(self, episode: Episode, question: str, reply: str) -> Evidence:
        """Intents whose distinctive words the reply (after its last self-correction cue) names most; when some of
        them are named completely, only those (so 'Long Beach' picks the Long Beach reading over one that also
        mentions Redditch and Kansas City)."""
        reply, correction = after_correction(reply)
        said = set(content_words(reply)) - REPLY_FILLER
        distinct = [set(i.attributes["distinctive"]) for i in episode.intents]
        scores = [len(said & d) for d in distinct]
        best = max(scores)
        if best == 0:
            return Evidence(slots={}, mode="intersect", correction=correction)
        ids = [i for i, s in enumerate(scores) if s == best]
        full = [i for i in ids if distinct[i] <= said]
        return Evidence(slots={"intent": frozenset(full or ids)}, mode="intersect", correction=correction)

    # --- answers -----------------------------------------------------------------------------------------------
    def same_intent(self, episode: Episode, i: int, j: int) -> bool:
        """Two intents count as one when they share a gold answer (an answer right for one is right for both)."""
        if i == j:
            return True
        a = {normalize_answer(x) for x in episode.intents[i].attributes["answers"]}
        b = {normalize_answer(x) for x in episode.intents[j].attributes["answers"]}
        return bool(a & b)

    def resolve(self, episode: Episode, answer: str) -> int | None:
        """The intent whose gold answer the text gives; None when it gives none, or answers of intents that differ
        (hedging across readings is not resolving one)."""
        matched = [i for i, it in enumerate(episode.intents) if matches_any_answer(answer, it.attributes["answers"])]
        if not matched:
            return None
        if all(self.same_intent(episode, matched[0], j) for j in matched[1:]):
            return matched[0]
        return None

    def answer_text(self, episode: Episode, index: int) -> str:
        return episode.intents[index].attributes["answers"][0]

    def leaks(self, episode: Episode, target: int, text: str) -> bool:
        return matches_any_answer(text, episode.intents[target].attributes["answers"], f1_threshold=1.1)

    def describe(self, episode: Episode, index: int) -> str:
        return episode.intents[index].attributes["question"]

    def system_prompt(self, episode: Episode) -> str:
        return (
            "Answer the user's question in a few words. If the question is ambiguous, ask one short clarifying "
            "question instead of answering."
        )
