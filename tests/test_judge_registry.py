"""The judge registry (`fic.judges.JUDGES`): one row per judge, a lookup that names the valid kinds, one settings block
(`JudgeSettings`) whose endpoint rule every user of a judge reaches (evaluation, reward, filter, CLI), training
signals on `strict` + contrast by default, and a toy judge added by one row reachable from every entry point."""

from __future__ import annotations

import json

import pytest

from fic import cli
from fic.eval_config import EvalConfig
from fic.judges import DEFAULT_JUDGE, JUDGES, TRAINING_JUDGE, JudgeSettings, JudgeSpec, Verdict, make_judge
from fic.judges.validity import load_validation


class QuestionJudge:
    """A toy judge: a turn with a question mark is genuine."""

    name = "question"
    version = "question-v1"

    def judge(self, cases):
        return [Verdict("genuine_followup" if "?" in c.user_turn else "degenerate_short", confidence=1.0,
                        judge=self.name) for c in cases]  # fmt: skip


def test_make_judge_is_a_lookup_that_names_the_valid_kinds():
    with pytest.raises(ValueError, match=r"unknown judge 'oracle'; valid: heuristic, learned, strict, llm, cascade"):
        make_judge("oracle")
    assert {"heuristic", "learned", "strict", "llm", "cascade"} == set(JUDGES)
    assert [k for k, spec in JUDGES.items() if spec.endpoint] == ["llm", "cascade"]


def test_rules_and_learned_are_separate_classes_and_the_fitted_files_name_them():
    from fic.judges.heuristic import HeuristicJudge
    from fic.judges.learned import LearnedJudge

    rules, learned, strict = make_judge("heuristic"), make_judge("learned"), make_judge("strict")
    assert type(rules) is HeuristicJudge and type(learned) is type(strict) is LearnedJudge
    assert (rules.name, learned.name, strict.name) == ("heuristic", "learned", "strict")
    assert learned.version != strict.version and rules.version.endswith("+rules-only")
    with pytest.raises(FileNotFoundError, match="no fitted judge file"):
        LearnedJudge("no/such/classifier.json")


def test_measured_flags_match_the_validation_file():
    """A row that says `measured` has figures in validation.json for the version its judge reports, and only then."""
    validation = load_validation()
    for kind, spec in JUDGES.items():
        if spec.endpoint:
            assert not spec.measured, kind
            continue
        assert spec.measured == (make_judge(kind).version in validation), kind


def test_training_signals_default_to_strict_with_the_contrast_and_rates_to_learned():
    from fic.trainers.collab_sft import CollabSFTConfig
    from fic.trainers.followup_rl import FollowupRLConfig

    sft = CollabSFTConfig(output_dir="/tmp/x", bf16=False).followup_judge_settings()
    rl = FollowupRLConfig(output_dir="/tmp/x", bf16=False).reward_judge_settings()
    assert (sft.kind, sft.contrast) == (rl.kind, rl.contrast) == (TRAINING_JUDGE, True) == ("strict", True)
    assert (EvalConfig().judge_settings().kind, EvalConfig().judge_settings().contrast) == (DEFAULT_JUDGE, False)
    assert make_judge(TRAINING_JUDGE, contrast=True).name == "strict+contrast"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: EvalConfig(judge="cascade"), "eval.judge='cascade' needs eval.judge_base_url and eval.judge_model"),
        (lambda: __import__("fic.trainers.followup_rl", fromlist=["x"]).FollowupRLConfig(
            output_dir="/tmp/x", bf16=False, reward_judge="llm", reward_judge_base_url="http://j/v1"),
         "reward_judge='llm' needs reward_judge_model"),
        (lambda: __import__("fic.trainers.collab_sft", fromlist=["x"]).CollabSFTConfig(
            output_dir="/tmp/x", bf16=False, followup_judge="llm"),
         "followup_judge='llm' needs followup_judge_base_url and followup_judge_model"),
        (lambda: make_judge("cascade", model="m"), "kind='cascade' needs base_url"),
    ],
)  # fmt: skip
def test_one_endpoint_rule_names_the_fields_where_they_were_set(build, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        build()


def test_the_cli_refuses_an_endpoint_judge_without_its_endpoint(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("")
    with pytest.raises(SystemExit) as done:
        cli.main(["judge", str(src), "--judge", "llm", "--judge-model", "j", "--out", str(tmp_path / "o")])
    assert done.value.code == 2
    assert "--judge llm needs --judge-base-url (an OpenAI-compatible chat endpoint" in capsys.readouterr().err


def test_a_judge_added_by_one_row_is_reached_by_settings_and_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(JUDGES, "question", JudgeSpec(lambda settings, **options: QuestionJudge(), endpoint=False,
                                                      about="a question mark is a follow-up", measured=False))  # fmt: skip
    assert JudgeSettings("question", contrast=True).build().name == "question+contrast"
    context = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"messages": context, "user_turn": t}) + "\n" for t in ("Why 4?", "ok")))
    assert cli.main(["judge", str(src), "--judge", "question", "--out", str(tmp_path / "o")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "o" / "judgements.jsonl").read_text().splitlines()]
    assert [(r["label"], r["judge"]) for r in rows] == [
        ("genuine_followup", "question"),
        ("degenerate_short", "question"),
    ]
