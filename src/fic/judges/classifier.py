"""The learned stage of the heuristic judge: a small softmax regression over features of (question, answer, turn).

The surface rules of `fic.judges.heuristic` decide the sure cases (template debris, copies, loops, narration). What
they leave open is what small models mostly write: the question rephrased or with a number changed, a new question
about the same story that ignores the answer, fluent nonsense that ends in "?", and the rare real follow-up. Rules
over word overlap cannot tell these apart reliably; a linear model over a few dozen such features, fitted on
careful labels of real model turns (`labels/followup/`, train split), can. `FEATURES` names the inputs and
`feature_vector` computes them, in that order. It is deterministic, has no runtime
dependency beyond numpy, and ships as small JSON files beside this module written by
`scripts/train_judge_classifier.py`, which also records the split sizes and the dev figures each was chosen on:
`classifier.json` (the `learned` judge, SmolLM2's turns) and `classifier_strict.json` (the `strict` judge of
training signals: trained models' turns too, the context-dependence features `CONTEXT_FEATURES`, a stricter
threshold). Each file names the features it reads.

Training is plain full-batch gradient descent on the L2-regularised softmax cross-entropy with class weights
(balanced), on standardised features, from zeros: the same labels give the same file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .base import Verdict
from .features import (
    GENERIC_WORDS,
    NUMBER,
    REQUEST,
    STATEMENT,
    ExchangeContext,
    TurnFeatures,
    content_words,
    vocabulary_share,
    word_list,
)
from .labels import GENUINE_FOLLOWUP, NEW_TASK_PROMPT, PREVIOUS_TURN_RESTATE

DEFAULT_PATH = Path(__file__).with_name("classifier.json")
# The `strict` judge's classifier: fitted on SmolLM2's and trained models' turns alike, its threshold held to a
# false-positive rate of 0.10 on the trained models' turns (`scripts/train_judge_classifier.py --purpose strict`).
STRICT_PATH = Path(__file__).with_name("classifier_strict.json")

FEATURES: tuple[str, ...] = (
    "cos_q",  # cosine of the turn to the previous user message
    "cos_a",  # ... to the assistant answer
    "cos_qa",  # of the question to the answer (how on-topic the answer was)
    "cos_a_minus_q",
    "contain_q",  # share of the turn's word bigrams found in the question
    "contain_a",
    "unigram_q",  # share of the turn's content words found in the question
    "unigram_a",
    "answer_only",  # count of the answer's own words/numbers (absent from the question) in the turn
    "answer_only_share",
    "new_numbers",  # numbers in the turn found in neither the question nor the answer
    "question_numbers",  # numbers of the question repeated in the turn
    "novel_share",  # content words in neither question nor answer
    "log_words",
    "asks",
    "ends_with_question",
    "n_questions",
    "n_sentences",
    "vocabulary_share",
    "distinct_share",
    "reference",  # explicit reference to the exchange ("you said", "in step 2", "what about")
    "anaphora_short",  # a short turn with it/this/that
    "second_person",  # you / your
    "followup_phrase",
    "request_opening",
    "statement",
    "starts_like_question",  # the question's first words again
    "ends_like_question",  # the question's last sentence again (the asked quantity)
    "english",
    "rule_genuine",  # what the rules alone would say (genuine) and how sure
    "rule_confidence",
    "rule_new_task",
    "rule_paraphrase",
    "shared_share",
    "long_turn",  # more than 40 words
    "non_ascii_share",
    "digit_share",
    "deixis",  # "this paragraph", "those interactions", "you just provided"
    "revision",  # rewrite / shorter / more engaging / make it ...
    "not_from_question_share",
    "only_question_words",
) + (
    # Context dependence (issue 36; the `strict` classifier's, not the shipped `learned` one's): how much more the
    # turn is about its own answer than about unrelated answers, and where what it points at comes from.
    "cos_foils",  # mean cosine of the turn to the fixed unrelated answers of `fic.judges.contrast.FOIL_ANSWERS`
    "cos_a_minus_foils",
    "pointers_from_question",  # the turn's pointers found in the user's message
    "pointers_answer_only",  # ... found only in the answer (what "builds on what only the assistant introduced" means)
    "pointers_nowhere",  # ... in neither (a number or name made up)
    "generic_only",  # no content word outside the generic request words ("give me an example of that")
)
CONTEXT_FEATURES = FEATURES[FEATURES.index("cos_foils") :]


_SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)")
# Pointing at what the assistant produced: "this paragraph", "those interactions", "you just provided", "you have set".
_DEIXIS = re.compile(
    r"\b(?:this|that|these|those|your|the above|the same)\s+(?:\w+\s+)?(?:paragraph|email|letter|story|tale|post|poem|"
    r"essay|text|answer|response|reply|explanation|list|plan|itinerary|summary|critique|version|sentence|line|step|"
    r"calculation|number|result|advice|information|interactions?|options?|points?|suggestions?|steps?|ideas?|"
    r"headlines?|recommendations?|examples?|things?|one|part|section)\b"
    r"|\byou(?:'ve| have| just| had)?\s+(?:just\s+)?(?:said|mentioned|wrote|written|provided|shared|set|gave|given|listed|"
    r"described|explained|suggested|recommended|used|included|added|made|calculated|chose|called)\b",
    re.IGNORECASE,
)
# Asking to change the assistant's piece: the hallmark of a follow-up on writing tasks.
_REVISION = re.compile(
    r"\b(?:rewrite|rephrase|revise|reimagine\w*|edit|improve|shorten|shorter|longer|expand|simplify|summari[sz]e|"
    r"summary|more (?:\w+ )?(?:engaging|concise|detailed|formal|casual|vivid|evocative|immersive|persuasive)|less \w+|"
    r"add (?:a|an|more|another)|change (?:the|it|this)|make (?:it|this|that|the))\b",
    re.IGNORECASE,
)
_SECOND_PERSON = re.compile(r"\b(?:you|your|you're|yours)\b", re.IGNORECASE)
# What a turn points at: numbers, quoted spans, and capitalised words that do not open a sentence.
_QUOTED = re.compile(r"[\"“]([^\"”]{2,60})[\"”]|(?<!\w)['‘]([^'’]{2,60})['’](?!\w)")
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w-]{2,}")


def pointers(text: str) -> set[str]:
    """The specific things a text points at, lower-cased: its numbers, quoted spans and capitalised words (not
    sentence-initial ones, not "I")."""
    found = set(NUMBER.findall(text)) | {(a or b).strip().lower() for a, b in _QUOTED.findall(text)}
    return found | {w.lower() for w in _CAPITALISED.findall(text.strip())}


def _pointer_sources(turn: str, question: str, answer: str) -> tuple[float, float, float]:
    """How many of the turn's pointers occur in the question, only in the answer, and in neither."""
    q, a = question.lower(), answer.lower()
    in_q = in_a_only = nowhere = 0
    for p in pointers(turn):
        whole = re.compile(rf"(?<![\w.]){re.escape(p)}(?!\w)")  # "2" is not in "24"
        if whole.search(q):
            in_q += 1
        elif whole.search(a):
            in_a_only += 1
        else:
            nowhere += 1
    return float(in_q), float(in_a_only), float(nowhere)


def _last_sentence_words(text: str) -> list[str]:
    parts = [p for p in re.split(r"(?<=[.!?])\s+", text.strip()) if p.strip()]
    return word_list(parts[-1]) if parts else []


def feature_vector(
    f: TurnFeatures, ctx: ExchangeContext, cos_q: float, cos_a: float, cos_qa: float, cos_foils: float, rule: Verdict
) -> list[float]:
    """The classifier's inputs for one case, in the order of `fic.judges.classifier.FEATURES`."""
    text = f.text
    words = word_list(text)
    content = content_words(words)
    n_content = max(1, len(content))
    numbers = set(NUMBER.findall(text))
    q_numbers = set(NUMBER.findall(ctx.question))
    a_numbers = set(NUMBER.findall(ctx.answer))
    answer_only = (content | numbers) & ctx.answer_only
    novel = content - ctx.q_content - ctx.a_content
    vocab_share, _ = vocabulary_share(text)
    letters = [c for c in text if not c.isspace()]
    q_words = word_list(ctx.question)
    q_last = _last_sentence_words(ctx.question)
    u_last = set(_last_sentence_words(text))
    return [
        cos_q,
        cos_a,
        cos_qa,
        cos_a - cos_q,
        f.scores.get("contain_q", 0.0),
        f.scores.get("contain_a", 0.0),
        len(content & ctx.q_content) / n_content,
        len(content & ctx.a_content) / n_content,
        float(len(answer_only)),
        len(answer_only) / n_content,
        float(len(numbers - q_numbers - a_numbers)),
        float(len(numbers & q_numbers)),
        len(novel) / n_content,
        float(np.log1p(len(words))),
        float(any(mark in text for mark in "?？¿")),
        float(text.rstrip().endswith("?")),
        float(text.count("?")),
        float(len(_SENTENCE_END.findall(text + " "))),
        vocab_share,
        len(set(words)) / max(1, len(words)),
        float(f.explicit_reference),
        float(f.reference and not f.explicit_reference),
        float(bool(_SECOND_PERSON.search(text))),
        float(f.followup_phrase),
        float(bool(REQUEST.search(text))),
        float(bool(STATEMENT.search(text))),
        float(bool(q_words) and words[:3] == q_words[:3]),
        len(u_last & set(q_last)) / max(1, len(set(q_last))),
        float(f.english),
        float(rule.label == GENUINE_FOLLOWUP),
        rule.confidence or 0.0,
        float(rule.label == NEW_TASK_PROMPT),
        float(rule.label == PREVIOUS_TURN_RESTATE),
        f.scores.get("shared_share", 0.0),
        float(len(words) > 40),
        sum(not c.isascii() for c in letters) / max(1, len(letters)),
        sum(c.isdigit() for c in letters) / max(1, len(letters)),
        float(bool(_DEIXIS.search(text))),
        float(bool(_REVISION.search(text))),
        len(content - ctx.q_content) / n_content,  # content not from the user's message
        float(bool(content) and content <= ctx.q_content | GENERIC_WORDS),  # only the user's own words
        cos_foils,
        cos_a - cos_foils,
        *_pointer_sources(text, ctx.question, ctx.answer),
        float(content <= GENERIC_WORDS),
    ]


@dataclass
class SoftmaxModel:
    """Softmax regression over `FEATURES` (standardised with the training mean and scale).

    Args:
        labels: the label of each output row.
        weights: `len(labels) x len(FEATURES)`.
        bias: one per label.
        mean, scale: feature standardisation from the training rows.
    """

    labels: list[str]
    weights: np.ndarray
    bias: np.ndarray
    mean: np.ndarray
    scale: np.ndarray

    def proba(self, x: np.ndarray) -> np.ndarray:
        """Label probabilities for rows of raw features, shape (n, len(labels))."""
        z = ((np.atleast_2d(x) - self.mean) / self.scale) @ self.weights.T + self.bias
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def to_json(self) -> dict:
        keys = ("weights", "bias", "mean", "scale")
        return {"labels": self.labels, **{k: np.round(getattr(self, k), 6).tolist() for k in keys}}

    @classmethod
    def from_json(cls, data: dict) -> SoftmaxModel:
        arrays = {k: np.asarray(data[k], dtype=np.float64) for k in ("weights", "bias", "mean", "scale")}
        return cls(labels=list(data["labels"]), **arrays)


@dataclass
class FollowupClassifier:
    """Two heads over the same features: P(genuine) (a logistic model: labels genuine / failure) decides the binary
    question against `threshold`; the failure head names the likeliest failure label when it is not genuine.

    Args:
        genuine: 2-class `SoftmaxModel` with labels `[GENUINE_FOLLOWUP, "failure"]`.
        failure: `SoftmaxModel` over the failure labels seen in training.
        threshold: P(genuine) from which a turn is genuine (chosen by cross-validation on train + dev).
        keep_sure_genuine: rule confidence from which the rules' genuine verdict stands (chosen the same way;
            above 1 the classifier decides every open case).
        meta: provenance (label set, split sizes, figures, version).
    """

    genuine: SoftmaxModel
    failure: SoftmaxModel
    threshold: float = 0.5
    keep_sure_genuine: float = 2.0
    meta: dict = field(default_factory=dict)
    features: tuple[str, ...] = FEATURES

    def _inputs(self, x: np.ndarray) -> np.ndarray:
        """Its own features' columns of rows of all `FEATURES` (rows of its features alone pass through)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if x.shape[1] == len(FEATURES):
            return x if self.features == FEATURES else x[:, [FEATURES.index(name) for name in self.features]]
        if x.shape[1] != len(self.features):
            raise ValueError(f"rows of {x.shape[1]} features; this classifier reads {len(self.features)} of "
                             f"the {len(FEATURES)} of fic.judges.classifier.FEATURES")  # fmt: skip
        return x

    def p_genuine(self, x: np.ndarray) -> np.ndarray:
        return self.genuine.proba(self._inputs(x))[:, 0]

    def failure_labels(self, x: np.ndarray) -> list[str]:
        return [self.failure.labels[k] for k in self.failure.proba(self._inputs(x)).argmax(axis=1)]

    def save(self, path: str | Path) -> None:
        data = {"features": list(self.features), "threshold": self.threshold,
                "keep_sure_genuine": self.keep_sure_genuine, "genuine": self.genuine.to_json(),
                "failure": self.failure.to_json(), "meta": self.meta}  # fmt: skip
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH) -> FollowupClassifier:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        unknown = [name for name in data.get("features") or ["(none listed)"] if name not in FEATURES]
        if unknown:
            raise ValueError(
                f"{path}: features {unknown} are not in fic.judges.classifier.FEATURES; retrain it with "
                "`python scripts/train_judge_classifier.py`"
            )
        return cls(
            genuine=SoftmaxModel.from_json(data["genuine"]),
            failure=SoftmaxModel.from_json(data["failure"]),
            threshold=float(data["threshold"]),
            keep_sure_genuine=float(data.get("keep_sure_genuine", 2.0)),
            meta=dict(data.get("meta", {})),
            features=tuple(data["features"]),
        )


def fit(x: np.ndarray, y: list[str], labels: list[str], l2: float = 1.0, steps: int = 3000, lr: float = 0.5,
        balanced: bool = True, weight: np.ndarray | None = None) -> SoftmaxModel:  # fmt: skip
    """Fit a softmax regression on rows `x` with labels `y` (each one of `labels`); deterministic. `weight` scales
    each row's share of the loss (on top of the class balance)."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    xs = (x - mean) / scale
    index = {label: i for i, label in enumerate(labels)}
    targets = np.zeros((len(y), len(labels)))
    targets[np.arange(len(y)), [index[label] for label in y]] = 1.0
    counts = targets.sum(axis=0)
    class_weight = np.where(counts > 0, len(y) / (len(labels) * np.maximum(counts, 1)), 0.0) if balanced else None
    row_weight = targets @ class_weight if balanced else np.ones(len(y))
    if weight is not None:
        row_weight = row_weight * np.asarray(weight, dtype=np.float64)
    row_weight = row_weight / row_weight.sum()
    w = np.zeros((len(labels), x.shape[1]))
    b = np.zeros(len(labels))
    for _ in range(steps):
        z = xs @ w.T + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - targets) * row_weight[:, None]
        w -= lr * (g.T @ xs + l2 * w / len(y))
        b -= lr * g.sum(axis=0)
    return SoftmaxModel(labels=list(labels), weights=w, bias=b, mean=mean, scale=scale)
