"""Follow-up judges: label a generated user turn as a genuine follow-up or one failure mode.

Every judge is a row of `JUDGES` (`fic.judges.registry`): `heuristic` (offline rules + sentence embeddings,
`HeuristicJudge`), `learned` and `strict` (the rules + a fitted classifier, `LearnedJudge`; `learned` is the judge of
rates, `strict` the judge of training signals), `llm` (any OpenAI-compatible chat endpoint, strict JSON, `LLMJudge`)
and `cascade` (`learned` first, the LLM for what it is unsure of, `CascadeJudge`). `ContrastiveJudge` wraps any of
them so a turn that would be genuine after another item's answer is not genuine. `JudgeSettings` names one of them
with its endpoint and contrast; `make_judge` builds one by name. The heavy pieces (the sentence encoder, the HTTP
client) load on first use, so importing this package is cheap.
"""

import importlib

from .base import Case, Judge, Verdict
from .labels import FAILURE_LABELS, GENUINE_FOLLOWUP, JUDGE_ERROR, LABELS, is_genuine
from .registry import (
    DEFAULT_JUDGE,
    JUDGE_KINDS,
    JUDGES,
    TRAINING_JUDGE,
    JudgeKind,
    JudgeSettings,
    JudgeSpec,
    make_judge,
)

__all__ = [
    "Case",
    "Judge",
    "Verdict",
    "LABELS",
    "FAILURE_LABELS",
    "GENUINE_FOLLOWUP",
    "JUDGE_ERROR",
    "is_genuine",
    "JUDGES",
    "JUDGE_KINDS",
    "DEFAULT_JUDGE",
    "TRAINING_JUDGE",
    "JudgeKind",
    "JudgeSettings",
    "JudgeSpec",
    "make_judge",
    "HeuristicJudge",
    "LearnedJudge",
    "LLMJudge",
    "CascadeJudge",
    "ContrastiveJudge",
    "JudgementCache",
    "judgement_agreement",
]

_LAZY = {
    "HeuristicJudge": ".heuristic",
    "LearnedJudge": ".learned",
    "LLMJudge": ".llm",
    "CascadeJudge": ".cascade",
    "ContrastiveJudge": ".contrast",
    "JudgementCache": ".cache",
    "judgement_agreement": ".agreement",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
