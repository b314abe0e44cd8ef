"""`fic build-followups`: contexts, real conversations as they are, template candidates, rejection sampling, CLI."""

import argparse
import json
import re

import pytest

from fic import cli_followups
from fic.data import DataError, Record, load_source
from fic.data import followups as fu
from fic.judges import JudgeSettings, Verdict

CONTEXT = [
    {"role": "user", "content": "Tom has 5 apples and buys 3 more. How many apples does he have?"},
    {"role": "assistant", "content": "Tom starts with 5 apples and buys 3, so 5 + 3 = 8. He has 8 apples in total."},
]


class RuleJudge:
    """A fast, deterministic stand-in judge: '?' -> genuine, 'ERR' -> judge_error, else degenerate_short."""

    name = "rule"

    def __init__(self):
        self.calls = 0

    def judge(self, cases):
        self.calls += 1
        out = []
        for case in cases:
            if "ERR" in case.user_turn:
                out.append(Verdict.error("boom", judge=self.name))
            elif "?" in case.user_turn:
                out.append(
                    Verdict("genuine_followup", confidence=min(1.0, len(case.user_turn) / 100), judge=self.name)
                )
            else:
                out.append(Verdict("degenerate_short", confidence=0.9, judge=self.name))
        return out


def test_template_followups_are_grounded_distinct_and_deterministic():
    turns = fu.template_followups(CONTEXT, n=6, seed=1)
    assert len(turns) == 6 and len(set(turns)) == 6
    assert turns == fu.template_followups(CONTEXT, n=6, seed=1)
    assert turns != fu.template_followups(CONTEXT, n=6, seed=2)
    generic = set(fu.GENERIC_TEMPLATES)
    assert not generic & set(turns), turns  # the answer offers a number and terms: no stock request
    for turn in turns:
        # a number the answer introduced (8, never the question's 5 or 3 alone) or a term of the answer
        numbers = re.findall(r"\d+", turn)
        assert "8" in numbers or any(
            w in CONTEXT[1]["content"].lower() for w in re.findall(r"[a-z]{6,}", turn.lower())
        )


def test_template_followups_fall_back_to_generic_requests_only_when_the_answer_offers_nothing():
    bare = [{"role": "user", "content": "Is it okay?"}, {"role": "assistant", "content": "Yes, it is."}]
    turns = fu.template_followups(bare, n=3, seed=0)
    assert len(turns) == 3 and set(turns) <= set(fu.GENERIC_TEMPLATES)


def test_contexts_from_records_use_the_reference_and_skip_items_without_one():
    records = [
        Record("a", "gsm8k", [CONTEXT[0]], reference="5 + 3 = 8. #### 8"),
        Record("b", "gsm8k", [CONTEXT[0]], reference=None),
        Record("c", "mt_bench", [CONTEXT[0]], meta={"reference_turns": ["Eight.", "Nine."]}),
        Record("d", "coval", [CONTEXT[0]], meta={"candidates": [{"text": "It is 8."}]}),
        Record("e", "x", CONTEXT),  # ends with an assistant turn: nothing to answer
    ]
    contexts = fu.contexts_from_records(records)
    assert [c["id"] for c in contexts] == ["gsm8k:a", "mt_bench:c", "coval:d"]
    assert [c["messages"][-1]["content"] for c in contexts] == ["5 + 3 = 8. #### 8", "Eight.", "It is 8."]
    assert all(c["messages"][-1]["role"] == "assistant" for c in contexts)
    with pytest.raises(ValueError, match="answers: unknown value 'gold'"):
        fu.contexts_from_records(records, answers="gold")
    with pytest.raises(ValueError, match="backend"):
        fu.contexts_from_records(records, answers="model")


def test_real_conversations_are_kept_as_they_are(shared_data):
    mt = load_source(f"mt_bench:{shared_data}/mt_bench/question.jsonl")
    hb = load_source(f"healthbench:{shared_data}/healthbench/oss_eval_first30.jsonl")
    rows, skipped = fu.real_conversations(mt + hb)
    by_source = {s: [r for r in rows if r["source"] == s] for s in ("mt_bench", "healthbench")}
    with_refs = [r for r in mt if (r.meta.get("reference_turns") or [""])[0].strip()]  # id 133 has an empty one
    assert len(by_source["mt_bench"]) == len(with_refs)
    first = next(r for r in mt if r.meta.get("reference_turns"))
    row = next(r for r in by_source["mt_bench"] if r["id"] == f"mt_bench:{first.id}")
    assert row["messages"][0]["content"] == first.meta["turns"][0]
    assert row["messages"][1] == {"role": "assistant", "content": first.meta["reference_turns"][0]}
    assert row["messages"][2]["content"] == first.meta["turns"][1]
    multi = [r for r in hb if any(m["role"] == "assistant" for m in r.messages)]
    assert [r["messages"] for r in by_source["healthbench"]] == [r.messages for r in multi]
    assert skipped == len(mt) + len(hb) - len(rows)
    assert all(fu.has_followup(r["messages"]) and r["origin"] == "real" for r in rows)


def test_rejection_sampling_keeps_only_genuine_and_counts_every_label():
    contexts = [{"id": "x:1", "source": "x", "messages": CONTEXT}, {"id": "x:2", "source": "x", "messages": CONTEXT}]
    candidates = [["ok", "Why 8?", "Why is it 8 and not 9?", "ERR?"], ["thanks", "fine"]]
    judge = RuleJudge()
    rows, counts = fu.rejection_sample(contexts, candidates, judge, keep=1)
    assert judge.calls == 1  # one batched call
    assert counts == {"degenerate_short": 3, "genuine_followup": 2, "judge_error": 1}
    assert len(rows) == 1  # the second context has no genuine candidate
    assert rows[0]["messages"] == [*CONTEXT, {"role": "user", "content": "Why is it 8 and not 9?"}]  # most confident
    rows, _ = fu.rejection_sample(contexts, candidates, judge, keep=5)
    assert [r["messages"][-1]["content"] for r in rows] == ["Why is it 8 and not 9?", "Why 8?"]  # no judge_error row
    with pytest.raises(ValueError, match="one per context"):
        fu.rejection_sample(contexts, candidates[:1], judge)


def test_drop_overlap_uses_the_first_user_message():
    rows = [{"messages": CONTEXT}, {"messages": [{"role": "user", "content": "Other question"}, CONTEXT[1]]}]
    heldout = [[{"role": "user", "content": "  tom has 5 apples and buys 3 more.  How many apples does he have?"}]]
    kept, dropped = fu.drop_overlap(rows, heldout)
    assert dropped == 1 and kept == rows[1:]


def parse(argv):
    parser = argparse.ArgumentParser()
    cli_followups.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_samples_with_a_model_judges_and_writes_an_sft_set(shared_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(JudgeSettings, "build", lambda self, **k: RuleJudge())
    out = tmp_path / "followups" / "followups.jsonl"
    args = parse([
        "--contexts", f"gsm8k:{shared_data}/gsm8k/test.jsonl", "--real", f"healthbench:{shared_data}/healthbench/oss_eval_first30.jsonl",
        "--limit", "8", "--model", "tiny:chatml", "--samples", "2", "--max-new-tokens", "12", "--out", str(out.parent),
    ])  # fmt: skip
    assert cli_followups.run(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    summary = json.loads((out.parent / "summary.json").read_text())
    assert json.loads(capsys.readouterr().out) == summary
    sampled = [r for r in rows if r["origin"] == "sampled"]
    assert summary["sampled"]["contexts"] == 8 and summary["sampled"]["candidates"] == 16
    assert sum(summary["sampled"]["labels"].values()) == 16
    assert summary["sampled"]["kept"] == len(sampled) <= 8
    assert all("?" in r["messages"][-1]["content"] and r["label"] == "genuine_followup" for r in sampled)
    assert summary["real"]["kept"] == sum(r["origin"] == "real" for r in rows) > 0
    # the output reads back as a conversations dataset and every row has a user follow-up to train on
    back = load_source(f"conversations:{out}")
    assert len(back) == len(rows) and all(fu.has_followup(r.messages) for r in back)


def test_cli_errors_name_the_fix(tmp_path):
    with pytest.raises(DataError, match="nothing to build"):
        cli_followups.build(parse(["--out", str(tmp_path / "o")]))
    contexts = tmp_path / "contexts.jsonl"
    contexts.write_text(json.dumps({"question": "Tom has 3 apples and buys 2. How many?", "answer": "#### 5"}) + "\n")
    with pytest.raises(DataError, match="--model"):
        cli_followups.build(parse(["--contexts", f"gsm8k:{contexts}", "--out", str(tmp_path / "o")]))


def test_cli_is_routed_by_fic():
    from fic.cli import commands

    module, add, run, _ = commands()["build-followups"]
    assert module == "fic.cli_followups" and add == "add_arguments" and run == "run"


@pytest.mark.slow
def test_templates_with_the_heuristic_judge(shared_data, tmp_path):
    """The offline path end to end: GSM8K contexts, template candidates, the real heuristic judge."""
    out = tmp_path / "t"
    args = parse(["--contexts", f"gsm8k:{shared_data}/gsm8k/test.jsonl", "--limit", "12", "--candidates", "templates",
                  "--samples", "3", "--judge", "heuristic", "--out", str(out)])  # fmt: skip
    rows, summary = cli_followups.build(args)
    assert summary["sampled"]["candidates"] == 36 and summary["sampled"]["judge"] == "heuristic"
    assert 0 < len(rows) <= 12 and all(r["origin"] == "template" for r in rows)
