"""Rewards for follow-up RL, open-r1 style: plain callables in one registry.

A reward is `name_reward(prompts, completions, **kw) -> list[float | None]`, one value per completion; TRL's
`GRPOTrainer` passes every dataset column as a keyword (here `context`, the conversation the user turn replies to)
plus `completion_ids`, `log_metric` and `trainer_state`. `None` means "not scored": TRL drops it from the group
baseline and gives that completion no advantage. Settings (the judge, penalties, the tokenizer) are bound with
`get_reward(name, **settings)`, which picks the async form of a reward when the judge is async (`ajudge`), so TRL
awaits judge requests concurrently on its event loop instead of blocking a training step per request.

The follow-up RL trainer binds a contrastive judge by default (`fic.judges.contrast`: a turn that would also be
genuine after another item's answer earns no reward), and `followup_reward` logs `reward/generic_floor`, the share of
the step's turns the wrapped judge called genuine after both answers (what a non-contrastive reward would have paid
for). `group_relative=True` replaces the absolute reward by each turn's rank in its GRPO group (`group_ranks`).
"""

from __future__ import annotations

import functools
import inspect

from fic import metric_names
from fic.followup_eval import turn_cases
from fic.judges import FAILURE_LABELS, GENUINE_FOLLOWUP, Case, ContrastiveJudge
from fic.metrics import genuine_rate


def check_penalties(penalties: dict | None) -> dict[str, float]:
    """`penalties` as `{failure label: reward}`; raises `ValueError` naming an unknown label or a non-number."""
    penalties = dict(penalties or {})
    for label, value in penalties.items():
        if label not in FAILURE_LABELS:
            raise ValueError(
                f"penalties: unknown failure mode {label!r}; valid: {', '.join(FAILURE_LABELS)} "
                "(genuine_followup always earns 1.0)"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"penalties.{label}: expected a number, got {value!r}")
    return {label: float(value) for label, value in penalties.items()}


def user_turns(completions: list[str], completion_ids=None, tokenizer=None, end_ids=()) -> list[str]:
    """The generated user turns as the judge should see them.

    TRL decodes completions without special tokens, which would hide template debris (a leaked `<|im_start|>`) from
    the judge. With the tokenizer, the ids are decoded again with special tokens kept, minus the end-of-turn token
    that closed the turn.
    """
    if tokenizer is None or completion_ids is None:
        return list(completions)
    texts = []
    for ids in completion_ids:
        ids = list(ids)
        if ids and ids[-1] in end_ids:
            ids = ids[:-1]
        texts.append(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    return texts


def genuine_score(verdict) -> float | None:
    """How genuine the judge finds a turn, in [0, 1]: its confidence when genuine, one minus it when not (0.5 when
    the judge gave none); None for a judge error."""
    if verdict.is_error:
        return None
    confidence = 0.5 if verdict.confidence is None else verdict.confidence
    return confidence if verdict.genuine else 1.0 - confidence


def group_ranks(scores: list[float | None], groups: list) -> list[float | None]:
    """Each score's rank within its group as a share in [0, 1]: the fraction of the group's other scored members it
    beats (ties count half); None stays None, and a member alone in its group gets 0.5. A pure function."""
    members: dict = {}
    for i, (score, group) in enumerate(zip(scores, groups)):
        if score is not None:
            members.setdefault(group, []).append(i)
    ranks: list[float | None] = [None] * len(scores)
    for idx in members.values():
        for i in idx:
            others = [scores[j] for j in idx if j != i]
            beaten = sum(1.0 if scores[i] > s else 0.5 if scores[i] == s else 0.0 for s in others)
            ranks[i] = beaten / len(others) if others else 0.5
    return ranks


def _generic(verdict) -> bool:
    """Whether a contrastive verdict found the turn genuine after the foil answer too (False without a contrast)."""
    return (verdict.extra or {}).get("contrast", {}).get("foil_label") == GENUINE_FOLLOWUP


def _scores(verdicts, judge, prompts, penalties: dict[str, float], log_metric=None,
            group_relative: bool = False) -> list[float | None]:  # fmt: skip
    """The rewards of one batch of verdicts (and its logged metrics); `reward/generic_floor` only for a contrastive
    judge, whose verdicts say what the foil answer gave."""
    rewards = [None if v.is_error else 1.0 if v.genuine else penalties.get(v.label, 0.0) for v in verdicts]
    if group_relative:
        rewards = group_ranks([genuine_score(v) for v in verdicts], _groups(prompts) or [0] * len(verdicts))
    if log_metric is not None and verdicts:
        cell = genuine_rate(None if v.is_error else v.genuine for v in verdicts)
        log_metric(metric_names.FOLLOWUP_JUDGE_ERROR_RATE, cell["judge_errors"] / len(verdicts))
        if cell["n"]:
            log_metric(metric_names.FOLLOWUP_GENUINE_RATE, cell["rate"])
        if cell["n"] and isinstance(judge, ContrastiveJudge):
            scored = [v for v in verdicts if not v.is_error]
            log_metric(metric_names.REWARD_GENERIC_FLOOR, sum(map(_generic, scored)) / len(scored))
    return rewards


def _groups(prompts) -> list:
    """The GRPO group of each completion: completions of one prompt share it."""
    return [p if isinstance(p, str) else repr(p) for p in prompts] if prompts is not None else None


def _cases(completions, context, completion_ids, tokenizer, end_ids) -> list[Case]:
    if context is None:
        raise ValueError(
            "followup_reward: the dataset needs a 'context' column (the conversation ending with the answer)"
        )
    return turn_cases(context, user_turns(completions, completion_ids, tokenizer, end_ids))


def followup_reward(prompts, completions, context=None, judge=None, penalties=None, completion_ids=None,
                    tokenizer=None, end_ids=(), log_metric=None, group_relative=False,
                    **kwargs) -> list[float | None]:  # fmt: skip
    """1.0 for a genuine follow-up, `penalties[label]` (default 0.0) for a failure mode, None on a judge error; with
    `group_relative`, the turn's rank in its group by the judge's genuine score (`group_ranks`)."""
    if judge is None:
        raise ValueError("followup_reward: no judge bound; build it with get_reward('followup', judge=...)")
    verdicts = judge.judge(_cases(completions, context, completion_ids, tokenizer, end_ids))
    return _scores(verdicts, judge, prompts, check_penalties(penalties), log_metric, group_relative)


async def afollowup_reward(prompts, completions, context=None, judge=None, penalties=None, completion_ids=None,
                           tokenizer=None, end_ids=(), log_metric=None, group_relative=False,
                           **kwargs) -> list[float | None]:  # fmt: skip
    """`followup_reward` for an async judge (`await judge.ajudge(cases)`)."""
    if judge is None:
        raise ValueError("afollowup_reward: no judge bound; build it with get_reward('followup', judge=...)")
    verdicts = await judge.ajudge(_cases(completions, context, completion_ids, tokenizer, end_ids))
    return _scores(verdicts, judge, prompts, check_penalties(penalties), log_metric, group_relative)


def ends_turn_reward(prompts, completions, completion_ids=None, end_ids=(), **kwargs) -> list[float]:
    """1.0 when the user turn was closed by an end-of-turn token, 0.0 when it ran out of tokens."""
    if completion_ids is None:
        raise ValueError("ends_turn_reward: needs completion_ids (TRL passes them)")
    return [1.0 if ids and ids[-1] in end_ids else 0.0 for ids in completion_ids]


# TRL names a reward's metrics after the function (`rewards/followup_reward/mean`); both forms log under one name.
afollowup_reward.__name__ = "followup_reward"

REWARDS = {
    "followup": followup_reward,
    "ends_turn": ends_turn_reward,
}
ASYNC_FORMS = {"followup": afollowup_reward}


def get_reward(name: str, **settings):
    """The reward `name` with the `settings` it accepts bound (others ignored); async when the judge is async."""
    if name not in REWARDS:
        raise ValueError(f"rewards: unknown reward {name!r}; valid rewards are {', '.join(REWARDS)}")
    func = REWARDS[name]
    if name in ASYNC_FORMS and hasattr(settings.get("judge"), "ajudge"):
        func = ASYNC_FORMS[name]
    accepted = inspect.signature(func).parameters
    return functools.partial(func, **{k: v for k, v in settings.items() if k in accepted})
