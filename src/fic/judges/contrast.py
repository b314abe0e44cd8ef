"""Contrastive judging: a turn is genuine only if it is genuine after its own answer and not after another item's.

A generic turn ("Why is it 1?", "Can you give me an example of that?") reads as a follow-up after almost any answer,
and a judge that sees one (context, turn) pair cannot tell it from a turn that needs this answer. Training that is
rewarded by such a judge learns the generic turns (measured: a collab-SFT model's judge-genuine turns were judged
genuine after another item's answer a third of the time). `ContrastiveJudge` asks the wrapped judge twice: once with
the true context, and once, for the turns it called genuine, with the context's last answer replaced by a *foil*:
the answer of the next distinct context in the same batch (cyclically, the pairing of the probe's generic-floor
control), or, when the batch holds a single context, a fixed answer from `FOIL_ANSWERS` chosen by a hash of the
true answer (so a verdict never depends on the order of the batch there). A turn genuine after both answers becomes
`degenerate_short` ("too generic to carry a follow-up"), with the foil's verdict in `extra["contrast"]`.

The second call only covers the turns called genuine the first time (a failure stays a failure), so the contrast
costs one extra judgement per genuine turn, not per turn; `foil_every_turn=True` (the dense follow-up RL reward)
judges every turn after its foil too, for the scores only (labels are decided as above). Every foiled verdict keeps
both sides' `genuine_probability` in `extra["contrast"]` (`own_score`, `foil_score`).
"""

from __future__ import annotations

import hashlib

from .base import Case, Verdict
from .labels import DEGENERATE_SHORT
from .provenance import judge_provenance

# Foils for a batch with one context: answers from unrelated domains, so no real follow-up of a real answer fits
# them, while a generic question ("Can you explain that?") still does.
FOIL_ANSWERS: tuple[str, ...] = (
    "To repot a snake plant, choose a pot one size larger with drainage holes, use a gritty cactus mix, and water "
    "lightly only after a week so the disturbed roots can heal.",
    "The Treaty of Westphalia (1648) ended the Thirty Years' War and is often cited as the origin of the modern "
    "system of sovereign states.",
    "A binary search halves the search interval at each step, so it finds an element in a sorted list of n items "
    "in O(log n) comparisons.",
    "For a 10 km run, most beginners do well with three runs a week, building the long run by about 10% each week "
    "and keeping one rest day between hard sessions.",
    "Sourdough rises because wild yeast and lactic acid bacteria in the starter ferment the flour's sugars, "
    "producing carbon dioxide and the bread's sour taste.",
)


def genuine_probability(verdict: Verdict) -> float | None:
    """The judge's probability that the turn is genuine, in [0, 1]; None for a judge error.

    The classifier's P(genuine) (`extra["p_genuine"]`, `learned` and `strict` where the surface rules left the case
    open); otherwise the confidence of a genuine verdict, or one minus that of a failure; without a confidence (LLM
    replies often omit it) the verdict itself, 1.0 or 0.0.
    """
    if verdict.is_error:
        return None
    p = (verdict.extra or {}).get("p_genuine")
    if p is not None:
        return float(p)
    if verdict.confidence is None:
        return 1.0 if verdict.genuine else 0.0
    return verdict.confidence if verdict.genuine else 1.0 - verdict.confidence


def _answer(case: Case) -> str:
    return case.assistant_text


def foil_contexts(cases: list[Case]) -> list[list[dict]]:
    """For each case, its context with the last answer replaced by the foil answer (see the module docstring)."""
    answers = list(dict.fromkeys(_answer(c) for c in cases))
    following = {a: answers[(k + 1) % len(answers)] for k, a in enumerate(answers)}
    out = []
    for case in cases:
        own = _answer(case)
        foil = following[own] if len(answers) > 1 else _fixed_foil(own)
        out.append([*case.messages[:-1], {**case.messages[-1], "content": foil}])
    return out


def _fixed_foil(answer: str) -> str:
    index = int(hashlib.sha256(answer.encode("utf-8")).hexdigest(), 16) % len(FOIL_ANSWERS)
    return FOIL_ANSWERS[index]


class ContrastiveJudge:
    """Any judge, made to refuse turns that would be genuine after another item's answer.

    Args:
        judge: the wrapped judge (any `Judge`: `heuristic`, `learned`, `llm`, `cascade`).
        foil_every_turn: judge every turn after its foil, not only those genuine after their own answer, so every
            verdict carries `own_score` and `foil_score` (what the dense reward subtracts); labels are unchanged.
    """

    def __init__(self, judge, foil_every_turn: bool = False):
        self.inner = judge
        self.foil_every_turn = foil_every_turn
        self.name = f"{getattr(judge, 'name', type(judge).__name__)}+contrast"
        if hasattr(judge, "ajudge"):  # async only where the wrapped judge is (callers pick the async path by it)
            self.ajudge = self._ajudge

    @property
    def version(self) -> str:
        inner = getattr(self.inner, "version", None) or getattr(self.inner, "name", type(self.inner).__name__)
        return f"{inner}+contrast"

    @property
    def provenance(self) -> dict:
        """The wrapped judge's fit: the contrast adds no fitted part."""
        return judge_provenance(self.inner)

    def judge(self, cases: list[Case]) -> list[Verdict]:
        verdicts = list(self.inner.judge(cases))
        foils, foiled = self._foil_cases(cases, verdicts)
        return self._combine(verdicts, foiled, self.inner.judge(foils) if foils else [])

    async def _ajudge(self, cases: list[Case]) -> list[Verdict]:
        """`judge()` for async callers (`ajudge`, present when the wrapped judge has one): awaits its `ajudge`."""
        verdicts = list(await self.inner.ajudge(cases))
        foils, foiled = self._foil_cases(cases, verdicts)
        return self._combine(verdicts, foiled, await self.inner.ajudge(foils) if foils else [])

    def _foil_cases(self, cases: list[Case], verdicts: list[Verdict]) -> tuple[list[Case], list[int]]:
        """The foil cases to judge and the indices they stand for: the genuine turns, or every judged one."""
        foiled = [i for i, v in enumerate(verdicts) if v.genuine or (self.foil_every_turn and not v.is_error)]
        contexts = foil_contexts(cases)
        return [Case(messages=contexts[i], user_turn=cases[i].user_turn) for i in foiled], foiled

    def _combine(self, verdicts: list[Verdict], foiled: list[int], foil_verdicts: list[Verdict]) -> list[Verdict]:
        for i, foil in zip(foiled, foil_verdicts):
            own = verdicts[i]
            contrast = {"foil_label": foil.label, "foil_confidence": foil.confidence,
                        "own_score": genuine_probability(own), "foil_score": genuine_probability(foil)}  # fmt: skip
            if not own.genuine:  # judged for the dense reward's scores only: a failure stays a failure
                verdicts[i] = Verdict(label=own.label, confidence=own.confidence, rationale=own.rationale,
                                      judge=self.name, extra={**own.extra, "contrast": contrast})  # fmt: skip
            elif foil.is_error:
                verdicts[i] = Verdict.error(f"contrast: the foil judgement failed ({foil.rationale})", judge=self.name)
            elif foil.genuine:
                verdicts[i] = Verdict(
                    label=DEGENERATE_SHORT, confidence=foil.confidence, judge=self.name,
                    rationale="generic: also a follow-up after another item's answer",
                    extra={**own.extra, "contrast": contrast, "own": {"label": own.label, "confidence": own.confidence}},
                )  # fmt: skip
            else:
                # Sure of a specific turn as far as both verdicts are; a side without a confidence leaves the other's
                # (an LLM reply without one is not a confidence of 0, which would rank the turn below any failure).
                sides = [c for c in (own.confidence, foil.confidence) if c is not None]
                confidence = min(sides) if sides else None
                verdicts[i] = Verdict(label=own.label, confidence=confidence, rationale=own.rationale,
                                      judge=self.name, extra={**own.extra, "contrast": contrast})  # fmt: skip
        return verdicts
