"""The contrastive judge (fic.judges.contrast) and the contrastive follow-up reward: no model, a scripted inner judge."""

import asyncio

import pytest

from fic import metric_names
from fic.judges import Case, Verdict, make_judge
from fic.judges.contrast import FOIL_ANSWERS, ContrastiveJudge, foil_contexts


class WordJudge:
    """Genuine when the turn is a generic stock question, or names a word of the answer; counts the cases it sees."""

    name = "word"
    version = "word-v1"

    def __init__(self, error_on=None):
        self.calls, self.error_on = [], error_on

    def judge(self, cases):
        self.calls.append(len(cases))
        out = []
        for case in cases:
            turn, answer = case.user_turn.lower(), case.assistant_text.lower()
            if self.error_on and self.error_on in answer:
                out.append(Verdict.error("scripted failure", judge=self.name))
            elif turn.startswith("can you explain that") or any(w in answer.split() for w in turn.split()[-1:]):
                out.append(Verdict("genuine_followup", confidence=0.9, judge=self.name))
            else:
                out.append(Verdict("new_task_prompt", confidence=0.8, judge=self.name))
        return out


def case(question, answer, turn):
    return Case([{"role": "user", "content": question}, {"role": "assistant", "content": answer}], turn)


BATCH = [
    case("What is 6 x 7?", "6 x 7 = 42", "why 42"),  # specific: names the answer's number
    case("Name a colour.", "blue", "can you explain that in more detail?"),  # generic: fits any answer
    case("Name a fruit.", "apple", "what is the capital of france"),  # a failure under any answer
]


def test_specific_turn_stays_genuine_generic_turn_is_refused_failure_stays():
    inner = WordJudge()
    verdicts = ContrastiveJudge(inner).judge(BATCH)
    assert [v.label for v in verdicts] == ["genuine_followup", "degenerate_short", "new_task_prompt"]
    assert verdicts[1].extra["contrast"]["foil_label"] == "genuine_followup"
    assert verdicts[1].extra["own"]["label"] == "genuine_followup"
    assert verdicts[0].extra["contrast"]["foil_label"] == "new_task_prompt"
    # Only the two turns genuine in their own context are judged again.
    assert inner.calls == [3, 2]


def test_foils_are_the_next_distinct_answer_and_a_fixed_one_when_alone():
    contexts = foil_contexts([*BATCH, BATCH[0]])
    assert [c[-1]["content"] for c in contexts] == ["blue", "apple", "6 x 7 = 42", "blue"]
    assert contexts[0][0] == BATCH[0].messages[0]  # the question stays, only the answer changes
    alone = foil_contexts([BATCH[0], BATCH[0]])
    assert alone[0][-1]["content"] in FOIL_ANSWERS and alone[0] == alone[1]


def test_single_context_batch_still_refuses_a_generic_turn():
    verdicts = ContrastiveJudge(WordJudge()).judge([BATCH[1]])
    assert verdicts[0].label == "degenerate_short"


def test_a_failed_foil_judgement_is_an_error_not_a_verdict():
    # the first case is genuine after its own answer; its foil is the next answer, "blue", whose judgement fails
    verdicts = ContrastiveJudge(WordJudge(error_on="blue")).judge([BATCH[0], case("Name a colour.", "blue", "x")])
    assert verdicts[0].is_error and verdicts[0].genuine is None and "foil" in verdicts[0].rationale


class AsyncWordJudge(WordJudge):
    async def ajudge(self, cases):
        return self.judge(cases)


def test_async_only_where_the_inner_judge_is_and_the_same_verdicts():
    assert not hasattr(ContrastiveJudge(WordJudge()), "ajudge")
    sync = [v.label for v in ContrastiveJudge(WordJudge()).judge(BATCH)]
    assert [v.label for v in asyncio.run(ContrastiveJudge(AsyncWordJudge()).ajudge(BATCH))] == sync


def test_make_judge_wraps_any_kind_and_names_it():
    judge = make_judge("heuristic", contrast=True)
    assert isinstance(judge, ContrastiveJudge)
    assert judge.version.endswith("+contrast") and judge.name.endswith("+contrast")
    assert judge.provenance == __import__("fic.judges.provenance", fromlist=["x"]).judge_provenance(judge.inner)
    with pytest.raises(ValueError, match="needs base_url"):
        make_judge("llm", contrast=True)


def test_reward_pays_nothing_for_a_generic_turn_and_logs_the_floor():
    from fic.trainers import rewards

    logged = {}
    penalties = dict.fromkeys(rewards.FAILURE_LABELS, -0.5)  # every failure alike, the generic turn included
    reward = rewards.get_reward("followup", judge=ContrastiveJudge(WordJudge()), penalties=penalties)
    values = reward(
        prompts=["p0", "p1", "p2"], completions=[c.user_turn for c in BATCH], context=[c.messages for c in BATCH],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )  # fmt: skip
    assert values == [1.0, -0.5, -0.5]
    assert logged[metric_names.followup_label_share("degenerate_short")] == pytest.approx(1 / 3)
    assert logged[metric_names.REWARD_GENERIC_FLOOR] == pytest.approx(1 / 3)
    assert logged[metric_names.FOLLOWUP_GENUINE_RATE] == pytest.approx(1 / 3)


def test_group_ranks_rank_within_each_group_only():
    from fic.trainers.rewards import group_ranks

    assert group_ranks([0.9, 0.1, 0.5, 0.2, 0.2, None], ["a", "a", "a", "b", "b", "b"]) == [
        1.0,
        0.0,
        0.5,
        0.5,
        0.5,
        None,
    ]
    assert group_ranks([0.3], ["a"]) == [0.5]


def test_group_relative_reward_uses_the_judge_confidence_sign():
    from fic.trainers import rewards

    reward = rewards.get_reward("followup", judge=WordJudge(), form="group_relative")
    values = reward(prompts=["p", "p", "p"], completions=[c.user_turn for c in BATCH],
                    context=[c.messages for c in BATCH])  # fmt: skip
    # genuine scores 0.9, 0.9, 0.2 (a failure at confidence 0.8): the failure ranks last, the two genuine tie
    assert values == [0.75, 0.75, 0.0]


class NoConfidenceJudge(WordJudge):
    """WordJudge whose verdicts carry no confidence, as LLM replies that omit it."""

    def judge(self, cases):
        return [Verdict(v.label, confidence=None, judge=v.judge) for v in super().judge(cases)]


def test_a_foil_without_confidence_leaves_the_own_confidence():
    class FoilSilent(WordJudge):  # sure of its own-context verdicts, silent after the foil answer
        def judge(self, cases):
            out = super().judge(cases)
            return out if len(self.calls) == 1 else [Verdict(v.label, confidence=None) for v in out]

    verdicts = ContrastiveJudge(FoilSilent()).judge(BATCH)
    assert verdicts[0].genuine and verdicts[0].confidence == 0.9  # was min(0.9, None or 0.0) = 0.0


def test_group_relative_never_ranks_a_genuine_turn_below_a_failure():
    from fic.trainers import rewards

    turns, contexts = [c.user_turn for c in BATCH], [c.messages for c in BATCH]
    for judge in (ContrastiveJudge(NoConfidenceJudge()), ContrastiveJudge(WordJudge()), NoConfidenceJudge()):
        values = rewards.get_reward("followup", judge=judge, form="group_relative")(
            prompts=["p"] * 3, completions=turns, context=contexts
        )
        verdicts = judge.judge(BATCH)
        best_failure = max(v for v, d in zip(values, verdicts) if not d.genuine)
        assert all(v > best_failure for v, d in zip(values, verdicts) if d.genuine), (judge.name, values)
    # (genuine, confidence): a failure the judge is unsure of still ranks below a genuine turn it is unsure of
    keys = [rewards.rank_key(Verdict("genuine_followup", confidence=c)) for c in (None, 0.0, 0.51)]
    keys += [rewards.rank_key(Verdict("new_task_prompt", confidence=c)) for c in (None, 0.0, 1.0)]
    assert rewards.group_ranks(keys, [0] * 6)[:3] == [0.8, 0.6, 1.0] and min(keys[:3]) > max(keys[3:])
    assert rewards.rank_key(Verdict.error("x")) is None


def test_foil_every_turn_scores_every_turn_and_keeps_the_labels():
    inner = WordJudge()
    plain = [v.label for v in ContrastiveJudge(WordJudge()).judge(BATCH)]
    verdicts = ContrastiveJudge(inner, foil_every_turn=True).judge(BATCH)
    assert [v.label for v in verdicts] == plain and inner.calls == [3, 3]
    scores = [(v.extra["contrast"]["own_score"], v.extra["contrast"]["foil_score"]) for v in verdicts]
    assert scores == [(0.9, pytest.approx(0.2)), (0.9, 0.9), (pytest.approx(0.2), pytest.approx(0.2))]
