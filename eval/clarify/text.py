"""Small text helpers shared by the clarification evaluations (regret episodes and BAG).

Answer matching follows the SQuAD/AmbigQA convention: lower-case, drop punctuation and articles, squeeze spaces,
then compare exactly or by token F1. Everything here is deterministic and model-free.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DROP_PUNCT = str.maketrans("", "", string.punctuation)
_WORD = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")
_TOKEN = re.compile(r"\w+|[^\w\s]")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves""".split()
)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, strip punctuation and articles, collapse whitespace."""
    text = _ARTICLES.sub(" ", text.lower().translate(_DROP_PUNCT))
    return " ".join(text.split())


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits, keeping inner dots, hyphens and apostrophes: '1-2', '3.5')."""
    return _WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    """`words` without stop words, in order, duplicates kept."""
    return [w for w in words(text) if w not in STOPWORDS]


def count_tokens(text: str) -> int:
    """Model-independent token count used for interaction cost: words and punctuation marks."""
    return len(_TOKEN.findall(text))


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1 between two strings after `normalize_answer`."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains_phrase(text: str, phrase: str) -> bool:
    """True when `phrase` occurs in `text` as whole words after `normalize_answer` on both."""
    phrase_n = normalize_answer(phrase)
    if not phrase_n:
        return False
    return f" {phrase_n} " in f" {normalize_answer(text)} "


def matches_any_answer(text: str, answers: list[str], f1_threshold: float = 0.8) -> bool:
    """True when `text` contains one of `answers` as whole words, or is a near copy of one (token F1)."""
    for answer in answers:
        if contains_phrase(text, answer) or token_f1(text, answer) >= f1_threshold:
            return True
    return False


# Lead-ins a model puts before its answer, matched on `normalize_answer`ed text (lower case, no punctuation or
# articles), so "The answer is Paris." and "I'd say Paris" reduce to "paris".
_LEAD_IN = re.compile(
    r"^(?:(?:i think|i believe|i guess|i would say|id say|probably|perhaps|maybe|well|so|sure|okay|ok)\s+)*"
    r"(?:(?:correct |short |final )?answer(?: to (?:this|that|your) question)?(?: is| would be)?\s+)?"
    r"(?:(?:it|that|this) (?:is|was|would be)\s+|its\s+|thats\s+)?"
)
# A sentence ends at . ! ? after two letters or digits (so "U.S." and "3.5" do not end one), or at a line break.
_SENTENCE_END = re.compile(r"(?<=[A-Za-z0-9]{2}[.!?])\s+|\n+")


def answer_core(text: str, context: str = "") -> str:
    """The part of a sampled answer that carries the answer, for grouping samples by meaning.

    The first sentence (a short answer comes first; what follows is elaboration, cut off at the token budget), SQuAD-
    normalised, without lead-ins ("the answer is", "I think", "it is"), without the words of `context` (the user's
    turns: "Spain won the cup" answers "Who won the cup?" with "spain") and without stop words. When that leaves
    nothing but the text had words beside the context's (an answer such as "The Who"), those words are kept with
    their stop words. "" means the sample names no answer (empty, or only an echo of the question).
    """
    first = next((s for s in _SENTENCE_END.split(text.strip()) if s.strip()), "")
    norm = _LEAD_IN.sub("", normalize_answer(first))
    asked = set(normalize_answer(context).split())
    beyond = [w for w in norm.split() if w not in asked]
    return " ".join(w for w in beyond if w not in STOPWORDS) or " ".join(beyond)


def same_answer(a: str, b: str) -> bool:
    """Offline stand-in for bidirectional entailment between two answer cores (`answer_core`): equal, or one
    contained in the other as whole words ("paris" and "paris france"). Two empty cores (no answer) are the same."""
    if not a or not b:
        return a == b
    return a == b or f" {a} " in f" {b} " or f" {b} " in f" {a} "


def cluster_answers(samples: list[str], context: str = "") -> list[int]:
    """Meaning clusters of K sampled answers, as the BAG paper groups equivalent answers before their entropy.

    Each sample's `answer_core` (given the user's turns `context`) joins the first cluster whose first member it is
    the `same_answer` as, else opens one; comparing with the first member only keeps "paris", "paris france" and
    "france" from chaining into one cluster. Returns one id per sample (0, 1, ... in order of first appearance).

    Example: `cluster_answers(["Paris", "The answer is Paris.", "paris, France", "Lyon"], "Capital of France?")`
    is `[0, 0, 0, 1]` ("france" is the question's word, so "paris, France" reduces to "paris").
    """
    representatives: list[str] = []
    ids: list[int] = []
    for core in (answer_core(s, context) for s in samples):
        cid = next((i for i, rep in enumerate(representatives) if same_answer(core, rep)), None)
        if cid is None:
            representatives.append(core)
            cid = len(representatives) - 1
        ids.append(cid)
    return ids


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the content-word sets of two strings (1.0 when both are empty)."""
    sa, sb = set(content_words(a)), set(content_words(b))
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)
