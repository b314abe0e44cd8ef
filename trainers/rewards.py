"""Rewards for follow-up RL, open-r1 style: plain callables in one registry.

A reward is `name_reward(prompts, completions, **kw) -> list[float | None]`, one value per completion; TRL's
`GRPOTrainer` passes every dataset column as a keyword (here `context`, the conversation the user turn replies to)
plus `completion_ids`, `log_metric` and `trainer_state`. `None` means "not scored": TRL drops it from the group
baseline and gives that completion no advantage. Settings (the judge, penalties, the tokenizer) are bound with
`get_reward(name, **settings)`, which picks the async form of a reward when the judge is async (`ajudge`), so TRL
awaits judge requests concurrently on its event loop instead of blocking a training step per request.

The follow-up RL trainer binds a contrastive judge by default (`fic.judges.contrast`: a turn that would also be
genuine after another item's answer is relabelled `degenerate_short`, a failure). `followup_reward` has three forms
(`form`, one of `REWARD_FORMS`):

- `absolute`: 1.0 for a genuine follow-up, `penalties[label]` for a failure mode (0.0 unless set). Every failure
  earns the same by default; `check_penalties` refuses a table that pays a failure (> 0) or ranks a failure mode
  above a generic follow-up (the contrast's `degenerate_short`), which a policy could climb by failing differently,
  unless `allow_ranked_failures` says that ranking is meant.
- `dense`: the judge's probability of genuine (`fic.judges.contrast.genuine_probability`), minus the same after the
  foil answer when the judge is contrastive (`dense_score`): a signal for a judge that finds few genuine turns.
- `group_relative`: each turn's rank in its GRPO group (`group_ranks`) by (genuine, confidence) (`rank_key`), so a
  genuine turn never ranks below a failure.

Every call logs the share of each label (`followup/label_share/<label>`, over the judged turns), the judge-genuine
share (`followup/genuine_rate`), the judge-error rate and, for a contrastive judge, `reward/generic_floor`: the share
of the step's turns the wrapped judge called genuine after both answers (what a non-contrastive reward would have
paid for). TRL logs the reward's mean and std itself (`rewards/followup_reward/mean`, `.../std`, `reward`).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Literal, get_args

from fic import metric_names
from fic.followup_eval import turn_cases
from fic.judges import FAILURE_LABELS, GENUINE_FOLLOWUP, LABELS, Case, ContrastiveJudge
from fic.judges.contrast import genuine_probability
from fic.judges.labels import DEGENERATE_SHORT
from fic.metrics import genuine_rate

GENUINE_REWARD = 1.0
RewardForm = Literal["absolute", "dense", "group_relative"]
REWARD_FORMS: tuple[str, ...] = get_args(RewardForm)


def check_reward_form(form: str) -> str:
    """`form` if it is one of `REWARD_FORMS`; `ValueError` listing them otherwise."""
    if form not in REWARD_FORMS:
        raise ValueError(f"reward_form: unknown form {form!r}; valid: {', '.join(REWARD_FORMS)}")
    return form


def check_penalties(penalties: dict | None, allow_ranked_failures: bool = False) -> dict[str, float]:
    """`penalties` as `{failure label: reward}`; raises `ValueError` (one line) naming what is wrong.

    Refused: an unknown label, a non-number, a failure reward above 0 (it pays a failure: a penalty is a negative
    number), and, unless `allow_ranked_failures`, a table under which some failure mode earns more than a generic
    follow-up (`degenerate_short`, the label the contrast gives a turn that fits any answer): unlisted modes earn 0.0.
    """
    penalties = dict(penalties or {})
    for label, value in penalties.items():
        if label not in FAILURE_LABELS:
            raise ValueError(
                f"penalties: unknown failure mode {label!r}; valid: {', '.join(FAILURE_LABELS)} "
                f"(genuine_followup always earns {GENUINE_REWARD})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"penalties.{label}: expected a number, got {value!r}")
        if value >= GENUINE_REWARD:
            raise ValueError(
                f"penalties.{label}={value}: a failure would earn as much as a genuine follow-up ({GENUINE_REWARD}) "
                "or more; penalties are rewards, write a penalty as a negative number"
            )
        if value > 0:
            raise ValueError(
                f"penalties.{label}={value} pays a failure (> 0): penalties are rewards, write a penalty as a negative "
                f"number ({label}: {-value})"
            )
    table = {label: float(value) for label, value in penalties.items()}
    generic = table.get(DEGENERATE_SHORT, 0.0)
    above = [f"{label} ({table.get(label, 0.0)})" for label in FAILURE_LABELS if table.get(label, 0.0) > generic]
    if above and not allow_ranked_failures:
        raise ValueError(
            f"penalties: {', '.join(above)} would earn more than a generic follow-up ({DEGENERATE_SHORT}, the "
            f"contrast's label: {generic}), so the policy could gain by failing differently; give every failure mode "
            "the same reward (unlisted ones earn 0.0) or set reward_allow_ranked_failures=true"
        )
    return table


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


def rank_key(verdict) -> tuple[int, float] | None:
    """A verdict's place in a group-relative ranking: `(genuine, sureness)`, so every genuine turn ranks above every
    failure; within each, the judge's confidence orders them (a genuine turn the surer, a failure the less sure, the
    higher), 0.5 where the judge gave none (LLM replies often omit it). None for a judge error."""
    if verdict.is_error:
        return None
    confidence = 0.5 if verdict.confidence is None else verdict.confidence
    return (1, confidence) if verdict.genuine else (0, 1.0 - confidence)


def dense_score(verdict, contrast: bool) -> float | None:
    """The dense reward of one verdict, in [-1, 1]: the judge's probability that the turn is genuine
    (`genuine_probability`), minus that after the foil answer when `contrast` (the verdict's `extra["contrast"]`, from
    `ContrastiveJudge(..., foil_every_turn=True)`). None for a judge error or a failed foil judgement."""
    if verdict.is_error:
        return None
    if not contrast:
        return genuine_probability(verdict)
    info = (verdict.extra or {}).get("contrast")
    if info is None:
        raise ValueError("dense reward: a contrastive verdict without foil scores; use ContrastiveJudge(judge, "
                         "foil_every_turn=True)")  # fmt: skip
    if info.get("own_score") is None or info.get("foil_score") is None:
        return None
    return info["own_score"] - info["foil_score"]


def group_ranks(scores: list, groups: list) -> list[float | None]:
    """Each score's rank within its group as a share in [0, 1]: the fraction of the group's other scored members it
    beats (ties count half); None stays None, and a member alone in its group gets 0.5. Scores are anything ordered
    (numbers, `rank_key` tuples). A pure function."""
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


def absolute_reward(verdict, penalties: dict[str, float]) -> float | None:
    """1.0 for a genuine verdict, `penalties[label]` (0.0 unless set) for a failure, None for a judge error."""
    return None if verdict.is_error else GENUINE_REWARD if verdict.genuine else penalties.get(verdict.label, 0.0)


def _scores(verdicts, judge, prompts, penalties: dict[str, float], log_metric=None,
            form: str = "absolute") -> list[float | None]:  # fmt: skip
    """The rewards of one batch of verdicts (and its logged metrics); `reward/generic_floor` only for a contrastive
    judge, whose verdicts say what the foil answer gave."""
    if form == "group_relative":
        rewards = group_ranks([rank_key(v) for v in verdicts], _groups(prompts) or [0] * len(verdicts))
    elif form == "dense":
        rewards = [dense_score(v, isinstance(judge, ContrastiveJudge)) for v in verdicts]
    else:
        rewards = [absolute_reward(v, penalties) for v in verdicts]
    if log_metric is not None and verdicts:
        cell = genuine_rate(None if v.is_error else v.genuine for v in verdicts)
        log_metric(metric_names.FOLLOWUP_JUDGE_ERROR_RATE, cell["judge_errors"] / len(verdicts))
        if cell["n"]:
            log_metric(metric_names.FOLLOWUP_GENUINE_RATE, cell["rate"])
            scored = [v for v in verdicts if not v.is_error]
            for label in LABELS:
                share = sum(v.label == label for v in scored) / len(scored)
                log_metric(metric_names.followup_label_share(label), share)
        if cell["n"] and isinstance(judge, ContrastiveJudge):
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


def _check_bound(judge, form: str, where: str) -> None:
    if judge is None:
        raise ValueError(f"{where}: no judge bound; build it with get_reward('followup', judge=...)")
    check_reward_form(form)
    if form == "dense" and isinstance(judge, ContrastiveJudge) and not judge.foil_every_turn:
        raise ValueError(f"{where}: form='dense' subtracts every turn's foil score; bind "
                         "ContrastiveJudge(judge, foil_every_turn=True)")  # fmt: skip


def followup_reward(prompts, completions, context=None, judge=None, penalties=None, completion_ids=None,
                    tokenizer=None, end_ids=(), log_metric=None, form="absolute", allow_ranked_failures=False,
                    **kwargs) -> list[float | None]:  # fmt: skip
    """The follow-up reward of each completion in the reward form `form` (see the module docstring), None on a judge
    error: `absolute` 1.0 / `penalties[label]`, `dense` the judge's genuine probability (own minus foil context),
    `group_relative` the rank in the turn's GRPO group."""
    _check_bound(judge, form, "followup_reward")
    penalties = check_penalties(penalties, allow_ranked_failures)
    verdicts = judge.judge(_cases(completions, context, completion_ids, tokenizer, end_ids))
    return _scores(verdicts, judge, prompts, penalties, log_metric, form)


async def afollowup_reward(prompts, completions, context=None, judge=None, penalties=None, completion_ids=None,
                           tokenizer=None, end_ids=(), log_metric=None, form="absolute", allow_ranked_failures=False,
                           **kwargs) -> list[float | None]:  # fmt: skip
    """`followup_reward` for an async judge (`await judge.ajudge(cases)`)."""
    _check_bound(judge, form, "afollowup_reward")
    penalties = check_penalties(penalties, allow_ranked_failures)
    verdicts = await judge.ajudge(_cases(completions, context, completion_ids, tokenizer, end_ids))
    return _scores(verdicts, judge, prompts, penalties, log_metric, form)


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
