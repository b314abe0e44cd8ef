"""The follow-up reward's penalty rules and its three forms (absolute, dense, group_relative): pure, no model."""

import pytest

from fic.judges import Verdict
from fic.judges.contrast import ContrastiveJudge, genuine_probability
from fic.trainers import rewards

# The table `make reproduce` trained with before issue 45: a generic follow-up (degenerate_short after the contrast)
# earned -0.5, a brand-new unrelated task -0.25.
OLD_TABLE = {"malformed_artifact": -1.0, "meta_planning": -0.5, "assistant_turn_restate": -0.5,
             "previous_turn_restate": -0.5, "degenerate_short": -0.5, "new_task_prompt": -0.25}  # fmt: skip


def test_every_failure_earns_the_same_by_default():
    assert rewards.check_penalties(None) == {}
    assert rewards.check_penalties(dict.fromkeys(rewards.FAILURE_LABELS, -0.5))["new_task_prompt"] == -0.5
    assert rewards.check_penalties({"malformed_artifact": -1.0}) == {"malformed_artifact": -1.0}  # below: allowed


def test_a_failure_that_outranks_a_generic_followup_is_refused_unless_allowed():
    with pytest.raises(ValueError, match=r"^penalties: new_task_prompt \(-0.25\) would earn more than a generic "
                                         r"follow-up \(degenerate_short, the contrast's label: -0.5\)"):  # fmt: skip
        rewards.check_penalties(OLD_TABLE)
    with pytest.raises(ValueError, match="previous_turn_restate \\(0.0\\).*reward_allow_ranked_failures=true"):
        rewards.check_penalties({"degenerate_short": -0.5})  # the unlisted modes earn 0.0, above it
    assert rewards.check_penalties(OLD_TABLE, allow_ranked_failures=True) == OLD_TABLE


@pytest.mark.parametrize(
    ("value", "message"),
    [(0.5, r"new_task_prompt=0.5 pays a failure \(> 0\).*\(new_task_prompt: -0.5\)"),
     (1.0, r"new_task_prompt=1.0: a failure would earn as much as a genuine follow-up \(1.0\)"),
     (3, "as much as a genuine follow-up")],
)  # fmt: skip
def test_a_failure_reward_above_zero_is_refused_even_when_ranking_is_allowed(value, message):
    for allow in (False, True):
        with pytest.raises(ValueError, match=message):
            rewards.check_penalties({"new_task_prompt": value}, allow_ranked_failures=allow)
    for bad in ({"new_task_prompt": value}, {"x": -1}, {"meta_planning": float("nan")}):
        with pytest.raises(ValueError) as err:
            rewards.check_penalties(bad)
        assert "\n" not in str(err.value)  # one line


def test_genuine_probability_prefers_the_classifier_then_the_confidence_then_the_label():
    assert genuine_probability(Verdict("new_task_prompt", confidence=0.9, extra={"p_genuine": 0.42})) == 0.42
    assert genuine_probability(Verdict("genuine_followup", confidence=0.7)) == 0.7
    assert genuine_probability(Verdict("new_task_prompt", confidence=0.7)) == pytest.approx(0.3)
    assert genuine_probability(Verdict("genuine_followup", confidence=None)) == 1.0
    assert genuine_probability(Verdict("malformed_artifact", confidence=None)) == 0.0
    assert genuine_probability(Verdict.error("x")) is None


def test_dense_score_subtracts_the_foil_score():
    def contrasted(own, foil, label="new_task_prompt"):
        return Verdict(label, confidence=0.5, extra={"contrast": {"own_score": own, "foil_score": foil}})

    assert rewards.dense_score(contrasted(0.7, 0.2), contrast=True) == pytest.approx(0.5)
    assert rewards.dense_score(contrasted(0.3, 0.9, "degenerate_short"), contrast=True) == pytest.approx(-0.6)
    assert rewards.dense_score(contrasted(0.7, None), contrast=True) is None  # the foil judgement failed
    assert rewards.dense_score(Verdict("genuine_followup", confidence=0.8), contrast=False) == 0.8
    assert rewards.dense_score(Verdict.error("x"), contrast=True) is None
    with pytest.raises(ValueError, match="foil_every_turn=True"):
        rewards.dense_score(Verdict("new_task_prompt"), contrast=True)


class ScoreJudge:
    """P(genuine) read off the turn ("0.7 ..."), 0.1 after any answer but its own ("own"); genuine from 0.5."""

    name = "score"

    def judge(self, cases):
        out = []
        for case in cases:
            p = float(case.user_turn.split()[0]) if case.assistant_text == "own" else 0.1
            out.append(Verdict("genuine_followup" if p >= 0.5 else "new_task_prompt", confidence=0.5,
                               extra={"p_genuine": p}))  # fmt: skip
        return out


def test_dense_reward_end_to_end_with_and_without_the_contrast():
    ctx = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "own"}]
    other = [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "other"}]
    turns, contexts = ["0.9 a", "0.3 b", "0.6 c"], [ctx, ctx, other]
    kw = dict(prompts=["p"] * 3, completions=turns, context=contexts)
    assert rewards.get_reward("followup", judge=ScoreJudge(), form="dense")(**kw) == [0.9, 0.3, 0.1]
    # own-context score minus foil-context score (the foil of an "own" context is "other": 0.1; of "other", "own")
    dense = rewards.get_reward("followup", judge=ContrastiveJudge(ScoreJudge(), foil_every_turn=True), form="dense")
    assert dense(**kw) == [pytest.approx(0.8), pytest.approx(0.2), pytest.approx(0.1 - 0.6)]
    with pytest.raises(ValueError, match="foil_every_turn=True"):
        rewards.get_reward("followup", judge=ContrastiveJudge(ScoreJudge()), form="dense")(**kw)
    with pytest.raises(ValueError, match="reward_form: unknown form 'sparse'; valid: absolute, dense, group_relative"):
        rewards.get_reward("followup", judge=ScoreJudge(), form="sparse")(**kw)


def test_absolute_reward_of_each_label():
    table = rewards.check_penalties({"malformed_artifact": -1.0})
    assert rewards.absolute_reward(Verdict("genuine_followup"), table) == 1.0
    assert rewards.absolute_reward(Verdict("malformed_artifact"), table) == -1.0
    assert rewards.absolute_reward(Verdict("new_task_prompt"), table) == 0.0
    assert rewards.absolute_reward(Verdict.error("x"), table) is None
