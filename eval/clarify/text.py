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


def same_meaning(a: str, b: str, f1_threshold: float = 0.6) -> bool:
    """Offline stand-in for bidirectional entailment between two short answers: equal after normalisation,
    one contained in the other as whole words, or token F1 at least `f1_threshold`."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na or not nb:
        return na == nb
    if na == nb or f" {na} " in f" {nb} " or f" {nb} " in f" {na} ":
        return True
    return token_f1(a, b) >= f1_threshold


def cluster_by_meaning(texts: list[str], f1_threshold: float = 0.6) -> list[int]:
    """Greedy clustering: each text joins the first cluster whose first member it `same_meaning`s, else opens one.
    Returns one cluster id per text (0, 1, ... in order of first appearance)."""
    representatives: list[str] = []
    ids: list[int] = []
    for text in texts:
        for cid, rep in enumerate(representatives):
            if same_meaning(text, rep, f1_threshold):
                ids.append(cid)
                break
        else:
            representatives.append(text)
            ids.append(len(representatives) - 1)
    return ids


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the content-word sets of two strings (1.0 when both are empty)."""
    sa, sb = set(content_words(a)), set(content_words(b))
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)
