"""Follow-up judges: label a generated user turn as a genuine follow-up or one failure mode.

`HeuristicJudge` is offline: rules + sentence embeddings (`heuristic`), plus a classifier fitted on labelled real
turns (`learned`, `DEFAULT_JUDGE`, the default of every rate; `strict`, refitted with trained models' turns at a
stricter threshold, for training signals); `LLMJudge` asks any OpenAI-compatible chat endpoint
for strict JSON; `CascadeJudge` lets the learned judge decide what it is sure of and escalates the rest;
`ContrastiveJudge` wraps any of them so a turn that would be genuine after another item's answer is not genuine.
The heavy pieces (the sentence encoder, the HTTP client) load on first use, so importing this package is cheap.
"""

import importlib
from typing import Literal, get_args

from .base import Case, Judge, Verdict
from .labels import FAILURE_LABELS, GENUINE_FOLLOWUP, JUDGE_ERROR, LABELS, is_genuine

__all__ = [
    "Case",
    "Judge",
    "Verdict",
    "LABELS",
    "FAILURE_LABELS",
    "GENUINE_FOLLOWUP",
    "JUDGE_ERROR",
    "is_genuine",
    "JUDGE_KINDS",
    "DEFAULT_JUDGE",
    "JudgeKind",
    "HeuristicJudge",
    "HeuristicJudgeConfig",
    "LLMJudge",
    "CascadeJudge",
    "ContrastiveJudge",
    "JudgementCache",
    "judgement_agreement",
    "make_judge",
]

_LAZY = {
    "HeuristicJudge": ".heuristic",
    "HeuristicJudgeConfig": ".heuristic",
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


# The judge kinds every entry point accepts: the type of the config fields, the CLI choices and `make_judge`'s names.
JudgeKind = Literal["heuristic", "learned", "strict", "llm", "cascade"]
JUDGE_KINDS: tuple[str, ...] = get_args(JudgeKind)
# The judge of every rate unless one is named: of the offline judges, the one whose calibrated estimate is tightest on
# labelled turns outside its fit (README, "Which judge"); the rules alone call 64% of failures genuine there.
DEFAULT_JUDGE = "learned"


def make_judge(
    kind: str = DEFAULT_JUDGE,
    base_url: str | None = None,
    model: str | None = None,
    threshold: float = 0.85,
    contrast: bool = False,
    **llm_kw,
) -> Judge:
    """Build a judge by name (one of `JUDGE_KINDS`); `llm` and `cascade` need `base_url` and `model`; `contrast`
    wraps it in `ContrastiveJudge` (genuine only if not also genuine after another item's answer).

    `heuristic` is the offline rules judge; `learned` adds the classifier fitted on labelled real model turns
    (`fic.judges.classifier`): far fewer failures called genuine on a small model's turns, but it under-calls real
    people's follow-ups (see labels/followup/README.md for both judges' measured figures). `cascade` is the `learned`
    judge first and the LLM judge for the verdicts it is less sure of than `threshold`: on the labelled train + dev
    turns (the labels standing in for a perfect LLM) it sends 73% of them on at 0.85 and could reach kappa 0.98,
    35% at 0.7 for 0.80, where the rules first sent 63% on at 0.85 and could reach only 0.60 (the rules are
    confidently wrong on many small-model turns). `strict` is the `learned` judge refitted on SmolLM2's and trained
    models' turns alike, with context-dependence features and a threshold held to a false-positive rate of 0.10 on
    trained models' turns in cross-validation: the judge of training signals (collab filter, follow-up RL reward),
    where a trained model's generic turns must not pass; it finds fewer of SmolLM2's genuine turns than `learned`.
    """
    if kind not in JUDGE_KINDS:
        raise ValueError(f"judge kind={kind!r} is unknown; valid kinds are {list(JUDGE_KINDS)}.")
    if contrast:
        from .contrast import ContrastiveJudge

        return ContrastiveJudge(make_judge(kind, base_url, model, threshold, **llm_kw))
    if kind in ("heuristic", "learned", "strict"):
        from .heuristic import HeuristicJudge, HeuristicJudgeConfig  # numpy: keeps `import fic.judges` cheap

        classifier = {"heuristic": None, "learned": "default", "strict": "strict"}[kind]
        return HeuristicJudge(HeuristicJudgeConfig(classifier=classifier))
    if not base_url or not model:
        raise ValueError(f"judge kind={kind!r} needs base_url= and model= (an OpenAI-compatible chat endpoint).")
    from .llm import LLMJudge  # fic.judges.llm imports torch (fic.generation): the offline judges need none of it

    llm = LLMJudge(base_url, model, **llm_kw)
    if kind == "llm":
        return llm
    from .cascade import CascadeJudge  # asyncio (~15 ms): keeps `import fic.judges` (every command's flags) cheap

    return CascadeJudge(make_judge("learned"), llm, threshold=threshold)
