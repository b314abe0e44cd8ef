"""Cascade judge: a cheap judge decides what it is sure of, an expensive one decides the rest.

The first judge (the offline `learned` judge, in `make_judge("cascade")`) labels every case; verdicts with confidence
>= `threshold` stand, the rest (and any `judge_error` of the first judge) go to the second judge (an LLM judge) in one
batch. Every verdict keeps the name of the judge that decided it in `Verdict.judge`; an escalated verdict also records
the first judge's opinion in `extra["first"]`, so the routing can be audited and the threshold tuned afterwards.
"""

from __future__ import annotations

import asyncio
import logging

from .base import Case, Judge, Verdict
from .provenance import judge_provenance

logger = logging.getLogger(__name__)


class CascadeJudge:
    """
    Args:
        first: the cheap judge (usually `LearnedJudge`: `make_judge("learned")`).
        second: the judge for the cases `first` is unsure of (usually `LLMJudge`).
        threshold: the confidence from which a verdict of `first` stands, in [0, 1].
    """

    name = "cascade"

    def __init__(self, first: Judge, second: Judge, threshold: float = 0.85):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold={threshold!r} must be in [0, 1] (the first judge's confidence to trust).")
        self.first, self.second, self.threshold = first, second, threshold

    @property
    def version(self) -> str:
        """What routed and what decided: the first judge's version, the second judge's name, the threshold."""
        first = getattr(self.first, "version", None) or getattr(self.first, "name", type(self.first).__name__)
        second = getattr(self.second, "name", type(self.second).__name__)
        return f"cascade({first} -> {second} below {self.threshold:g})"

    @property
    def provenance(self) -> dict:
        """The first judge's fit (the second, an LLM behind an endpoint, has no known provenance)."""
        first = judge_provenance(self.first)
        return {**first, "source": f"{first['source']}; second stage: provenance unknown"}

    def judge(self, cases: list[Case]) -> list[Verdict]:
        verdicts, unsure = self._first(cases)
        if unsure:
            self._merge(verdicts, unsure, self.second.judge([cases[i] for i in unsure]))
        return verdicts

    async def ajudge(self, cases: list[Case]) -> list[Verdict]:
        """`judge()` for async callers: the second judge's requests are awaited (its `ajudge`) when it has one."""
        verdicts, unsure = self._first(cases)
        if unsure:
            escalated = [cases[i] for i in unsure]
            if hasattr(self.second, "ajudge"):
                second = await self.second.ajudge(escalated)
            else:
                second = await asyncio.to_thread(self.second.judge, escalated)
            self._merge(verdicts, unsure, second)
        return verdicts

    def _first(self, cases: list[Case]) -> tuple[list[Verdict], list[int]]:
        verdicts = list(self.first.judge(cases))
        unsure = [i for i, v in enumerate(verdicts) if v.is_error or v.confidence < self.threshold]
        logger.info("Cascade: %d of %d case(s) go to %s", len(unsure), len(cases), getattr(self.second, "name", "?"))
        return verdicts, unsure

    @staticmethod
    def _merge(verdicts: list[Verdict], unsure: list[int], second: list[Verdict]) -> None:
        for i, verdict in zip(unsure, second):
            first = verdicts[i]
            verdict.extra = {
                **verdict.extra,
                "first": {"judge": first.judge, "label": first.label, "confidence": first.confidence},
            }
            verdicts[i] = verdict
