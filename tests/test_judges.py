"""Follow-up judges: heuristic rules on obvious cases, the LLM judge against a local mock server, the cascade,
agreement statistics, the `fic judge` commands, and the heuristic on MT-Bench turns (real data)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re

import pytest
from mock_openai_server import Fault, MockOpenAIServer

from fic.cli_judge import (
    add_agreement_arguments,
    add_judge_arguments,
    run_agreement,
    run_judge,
)
from fic.judges import JUDGE_ERROR, LABELS, Case, Verdict, is_genuine, make_judge
from fic.judges.agreement import judgement_agreement
from fic.judges.cache import JudgementCache, cache_key
from fic.judges.cascade import CascadeJudge
from fic.judges.constructed import mt_bench_constructed_cases
from fic.judges.heuristic import HeuristicJudge
from fic.judges.llm import PROMPT_VERSION, LLMJudge, build_prompt, parse_reply
from fic.metrics import agreement, cohen_kappa

QUESTION = (
    "A bakery sells muffins for $3 each and cookies for $2 each. Maria buys 4 muffins and 6 cookies. "
    "How much does she spend in total?"
)
ANSWER = (
    "Step 1: The muffins cost 4 x $3 = $12.\nStep 2: The cookies cost 6 x $2 = $12.\n"
    "Step 3: Add the two amounts: $12 + $12 = $24.\nMaria spends $24 in total."
)
CONTEXT = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ANSWER}]


def case(user_turn: str, messages=None) -> Case:
    return Case(messages=list(messages or CONTEXT), user_turn=user_turn)


@pytest.fixture(scope="module")
def heuristic():
    return HeuristicJudge()


# ---------------------------------------------------------------- labels and data types


def test_label_inventory_and_verdict_consistency():
    assert set(LABELS) == {
        "genuine_followup", "previous_turn_restate", "assistant_turn_restate", "meta_planning",
        "degenerate_short", "malformed_artifact", "new_task_prompt",
    }  # fmt: skip
    assert all(isinstance(d, str) and len(d) > 20 for d in LABELS.values())
    assert is_genuine("genuine_followup") is True and is_genuine("meta_planning") is False
    assert is_genuine(JUDGE_ERROR) is None
    assert Verdict("new_task_prompt").genuine is False
    assert Verdict.error("boom").genuine is None
    with pytest.raises(ValueError, match="genuine=True contradicts"):
        Verdict("meta_planning", genuine=True)
    with pytest.raises(ValueError, match="not a follow-up label"):
        Verdict("great")


def test_case_validates_its_context():
    with pytest.raises(ValueError, match="must end with the assistant turn"):
        Case(messages=[{"role": "user", "content": "hi"}], user_turn="x")
    with pytest.raises(ValueError, match="non-empty list"):
        Case(messages=[], user_turn="x")
    c = Case(messages=[{"role": "user", "content": [{"type": "text", "text": "Q"}]}, {"role": "model", "content": "A"}],
             user_turn="u")  # fmt: skip
    assert (c.previous_user_text, c.assistant_text) == ("Q", "A")


# ---------------------------------------------------------------- heuristic judge


@pytest.mark.parametrize(
    "user_turn, label",
    [
        (QUESTION, "previous_turn_restate"),  # verbatim restatement of the user query
        ("maria buys 4 muffins and 6 cookies how much does she spend in total", "previous_turn_restate"),
        (
            "Step 2: The cookies cost 6 x $2 = $12.\nStep 3: Add the two amounts: $12 + $12 = $24.",
            "assistant_turn_restate",
        ),
        ("ok", "degenerate_short"),
        ("Thanks!", "degenerate_short"),
        ("", "degenerate_short"),
        ("<|im_start|>user\nWhat if she buys 5 muffins?", "malformed_artifact"),
        ("What if she buys 5 muffins?<|eot_id|><|start_header_id|>assistant", "malformed_artifact"),
        ("<start_of_turn>model\nSure.", "malformed_artifact"),
        ("[INST] What about 5 muffins? [/INST]", "malformed_artifact"),
        ("Got it.\nAssistant: Let me recompute the total.", "malformed_artifact"),
        ("<think>The user wants a discount</think> What about tax?", "malformed_artifact"),
        ("```\n---\n```", "malformed_artifact"),
        ("I will ask the assistant to explain step 2 in more detail.", "meta_planning"),
        ("As the user, I want to know more about the muffins.", "meta_planning"),
        ("Let me think about what to ask next.", "meta_planning"),
        ("Sure! Here is a breakdown of the costs for each item.", "assistant_turn_restate"),
        ("Write a haiku about autumn leaves falling in the forest.", "new_task_prompt"),
        ("Please summarize the plot of Hamlet in three sentences.", "new_task_prompt"),
        ("In step 2, why do the cookies cost $12 and not $8?", "genuine_followup"),  # refers to a step and a number
        ("Can you double-check the $24?", "genuine_followup"),
        ("What if she buys 5 muffins instead?", "genuine_followup"),
        ("What if she buys 5 muffins instead?<|im_end|>", "genuine_followup"),  # the turn's own end token is fine
    ],
)
def test_heuristic_obvious_cases(heuristic, user_turn, label):
    (verdict,) = heuristic.judge([case(user_turn)])
    assert verdict.label == label, verdict.rationale
    assert verdict.genuine is (label == "genuine_followup")
    assert verdict.judge == "heuristic" and verdict.rationale


def test_heuristic_confidence_separates_sure_from_borderline(heuristic):
    sure = ["ok", "<|im_start|>user\nhi", QUESTION, "I will ask the assistant about the muffins."]
    borderline = [
        "Why?",
        "¿Y si compra cinco magdalenas en lugar de cuatro?",
        "How would I write this as a single equation?",
    ]
    verdicts = heuristic.judge([case(u) for u in sure + borderline])
    assert all(v.confidence >= 0.9 for v in verdicts[: len(sure)]), [(v.label, v.confidence) for v in verdicts]
    assert all(v.confidence < 0.85 for v in verdicts[len(sure) :]), [(v.label, v.confidence) for v in verdicts]


def test_heuristic_encodes_each_distinct_text_once_per_batch(heuristic, monkeypatch):
    import fic.judges.heuristic as module

    encoder = module.get_encoder()
    calls = []

    class Recorder:
        max_seq_length = encoder.max_seq_length

        def encode(self, texts, **kw):
            calls.append(list(texts))
            return encoder.encode(texts, **kw)

    monkeypatch.setattr(module, "get_encoder", lambda: Recorder())
    haiku, rivers, grounded = (
        "Write a haiku about autumn leaves.",
        "Name three long rivers in Africa.",
        "In step 2, why $12?",
    )
    other = [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7 is prime."}]
    cases = [case(haiku), case(rivers), case(haiku), case(haiku, other), case("ok"), case(grounded)]
    verdicts = heuristic.judge(cases)
    assert len(calls) == 1, "one batched encode call per judge() call"
    (texts,) = calls
    assert sorted(texts) == sorted({haiku, rivers, QUESTION, ANSWER, "Name a prime.", "7 is prime."})
    assert "ok" not in texts and grounded not in texts, "cases the rules decide are not encoded"
    assert [v.label for v in verdicts] == ["new_task_prompt"] * 4 + ["degenerate_short", "genuine_followup"]


# ---------------------------------------------------------------- LLM judge (mock chat server)


def _turn_of(body: dict) -> str:
    """The generated user message a judge request is about."""
    prompt = body["messages"][1]["content"]
    return re.search(r"<generated_user_message>\n(.*)\n</generated_user_message>", prompt, re.DOTALL).group(1)


def _answer(label: str, confidence: float = 0.9) -> str:
    return json.dumps(
        {"label": label, "genuine": label == "genuine_followup", "confidence": confidence, "rationale": "because"}
    )


def _judge(server, **kw) -> LLMJudge:
    kw.setdefault("max_retries", 1)
    return LLMJudge(server.url, "judge-model", timeout=5, backoff_base=0.01, **kw)


def test_parse_reply_is_strict_about_the_verdict():
    assert parse_reply(_answer("meta_planning", 0.7)) == ("meta_planning", False, 0.7, "because")
    assert parse_reply("```json\n" + _answer("genuine_followup") + "\n```")[0] == "genuine_followup"
    for bad, why in [
        ("The label is genuine_followup.", "no JSON object"),
        ('["genuine_followup"]', "no JSON object"),
        ('{"label": "genuine_followup", "genuine": tr', "no JSON object"),
        ('{"label": "polite", "genuine": false, "confidence": 0.5}', "not one of"),
        ('{"label": "meta_planning", "genuine": true, "confidence": 0.5}', "contradicts"),
        ('{"label": "meta_planning", "genuine": false, "confidence": 1.5}', "from 0 to 1"),
        ('{"label": "meta_planning", "genuine": "no", "confidence": 0.5}', "true or false"),
        ('{"label": "meta_planning", "confidence": 0.5}', "lacks"),
        ('{"genuine": false}', "lacks"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_reply(bad)


def test_parse_reply_takes_what_real_judge_models_write():
    # SmolLM2 behind `transformers serve` (which ignores response_format) answers with a fenced object and goes on.
    smol = "```json\n" + _answer("new_task_prompt", 0.6) + '\n```\n\nThe user asks about {something} else.\n{"x": 1}'
    assert parse_reply(smol) == ("new_task_prompt", False, 0.6, "because")
    assert parse_reply("Sure! Here it is: " + _answer("genuine_followup"))[0] == "genuine_followup"
    assert parse_reply('{"label": "meta_planning", "genuine": false}') == ("meta_planning", False, None, "")


def test_llm_judge_reply_without_confidence_is_a_verdict():
    with MockOpenAIServer(
        chat_reply='{"label": "genuine_followup", "genuine": true, "rationale": "asks why"}'
    ) as server:
        verdicts = _judge(server).judge([case("Why step 2?"), case("What about 5 muffins?")])
    assert [(v.label, v.genuine, v.confidence) for v in verdicts] == [("genuine_followup", True, None)] * 2
    assert [v.extra["attempts"] for v in verdicts] == [1, 1]


def test_llm_judge_asks_for_structured_output_and_falls_back_when_refused():
    with MockOpenAIServer(chat_reply=_answer("meta_planning")) as server:
        judge = _judge(server)
        judge.judge([case("Why?")])
        assert server.requests[0]["body"]["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"]
        server.add_faults(Fault(status=400, body='{"error": "response_format json_schema is not supported"}'))
        (verdict,) = judge.judge([case("Why step 2?")])
        assert verdict.label == "meta_planning"
        assert "response_format" not in server.requests[-1]["body"] and not judge.structured_output


def test_prompt_lists_every_label_and_the_case():
    messages = build_prompt(case("Why step 2?"))
    assert all(label in messages[0]["content"] for label in LABELS)
    assert QUESTION in messages[1]["content"] and ANSWER in messages[1]["content"]
    assert "<generated_user_message>\nWhy step 2?\n</generated_user_message>" in messages[1]["content"]
    assert PROMPT_VERSION == "followup-v1"


def test_llm_judge_valid_fenced_and_reasked_replies():
    replies = {
        "plain": _answer("genuine_followup", 0.8),
        "fenced": "```json\n" + _answer("new_task_prompt", 0.6) + "\n```",
    }

    def reply(body):
        turn = _turn_of(body)
        if turn == "chatty":  # non-JSON first, valid once it sees its error
            return "I think this one is genuine." if len(body["messages"]) == 2 else _answer("genuine_followup")
        return replies[turn]

    with MockOpenAIServer(chat_reply=reply) as server:
        verdicts = _judge(server).judge([case("plain"), case("fenced"), case("chatty")])
        reask = [r["body"]["messages"] for r in server.requests if len(r["body"]["messages"]) > 2]
    assert [(v.label, v.genuine, v.confidence) for v in verdicts] == [
        ("genuine_followup", True, 0.8), ("new_task_prompt", False, 0.6), ("genuine_followup", True, 0.9),
    ]  # fmt: skip
    assert [v.extra["attempts"] for v in verdicts] == [1, 1, 2]
    assert all(v.judge == "llm:judge-model" for v in verdicts)
    assert len(server.requests) == 4 and len(reask) == 1
    assert reask[0][2] == {"role": "assistant", "content": "I think this one is genuine."}
    assert "no JSON object" in reask[0][3]["content"]


def test_llm_judge_unknown_label_becomes_judge_error_after_reasks(tmp_path):
    bad = '{"label": "helpful", "genuine": true, "confidence": 0.9, "rationale": "x"}'
    with MockOpenAIServer(chat_reply=bad) as server:
        cache = JudgementCache(tmp_path / "cache.jsonl")
        (verdict,) = _judge(server, max_reasks=2, cache=cache).judge([case("What about 5 muffins?")])
        assert len(server.requests) == 3  # the first ask and two re-asks
        assert verdict.label == JUDGE_ERROR and verdict.genuine is None and verdict.confidence == 0.0
        assert "helpful" in verdict.rationale
        assert len(cache) == 0, "judge_errors are not cached"
        _judge(server, max_reasks=0, cache=cache).judge([case("What about 5 muffins?")])
        assert len(server.requests) == 4, "a failed case is asked again next time"


def test_llm_judge_http_failure_is_a_judge_error_not_an_exception():
    with MockOpenAIServer(chat_reply=_answer("genuine_followup")) as server:
        server.add_faults("400")
        (verdict,) = _judge(server).judge([case("What about 5 muffins?")])
    assert verdict.label == JUDGE_ERROR and verdict.genuine is None
    assert "400" in verdict.rationale


def test_llm_judge_cache_hit_avoids_a_second_call(tmp_path):
    path = tmp_path / "cache.jsonl"
    with MockOpenAIServer(chat_reply=_answer("meta_planning", 0.75)) as server:
        first = _judge(server, cache=path).judge([case("I will ask about tax."), case("Why?")])
        assert len(server.requests) == 2
        again = _judge(server, cache=path).judge([case("Why?"), case("I will ask about tax.")])  # a fresh process
        assert len(server.requests) == 2, "both verdicts came from the cache"
        other_model = LLMJudge(server.url, "another-model", cache=path, max_retries=0).judge([case("Why?")])
        assert len(server.requests) == 3, "the key includes the judge model"
    assert [v.label for v in again] == [v.label for v in first] == ["meta_planning"] * 2
    assert all(v.extra.get("cached") for v in again) and other_model[0].label == "meta_planning"
    key = cache_key(case("Why?"), "judge-model", PROMPT_VERSION)
    assert key != cache_key(case("Why?"), "judge-model", "followup-v2")
    assert JudgementCache(path).get(key).label == "meta_planning"


def test_llm_judge_concurrency_is_bounded():
    # the gate holds the first requests until 3 are in flight: exactly 3 with a bound of 3, whatever the timing
    with MockOpenAIServer(chat_reply=_answer("genuine_followup"), latency=0.01, gate=3) as server:
        verdicts = _judge(server, concurrency=3).judge([case(f"What about {n} muffins?") for n in range(12)])
    assert len(verdicts) == 12 and all(v.genuine for v in verdicts)
    assert server.max_in_flight == 3


def test_api_key_is_sent_but_never_written(tmp_path, monkeypatch, caplog, capsys):
    secret = "sk-test-SECRET-4242"
    monkeypatch.setenv("FIC_JUDGE_API_KEY", secret)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "messages": CONTEXT, "user_turn": "Why?"}) + "\n")

    def reply(body):
        return _answer("genuine_followup") if len(body["messages"]) > 2 else "not json"

    caplog.set_level(logging.DEBUG)
    with MockOpenAIServer(chat_reply=reply) as server:
        server.add_faults("503")
        judge = _judge(server, cache=tmp_path / "cache.jsonl")
        verdicts = judge.judge([case("Why?")])
        args = _parse(add_judge_arguments, [str(src), "--out", str(tmp_path / "out"), "--judge", "llm",
                                            "--judge-base-url", server.url, "--judge-model", "m2", "--cache", str(tmp_path / "c2.jsonl")])  # fmt: skip
        assert run_judge(args) == 0
        headers = [r["headers"] for r in server.requests]
    assert all(h.get("Authorization") == f"Bearer {secret}" for h in headers)
    (row,) = [json.loads(line) for line in (tmp_path / "out" / "judgements.jsonl").read_text().splitlines()]
    assert (row["id"], row["label"], row["genuine"], row["judge"]) == ("a", "genuine_followup", True, "llm:m2")
    assert verdicts[0].label == "genuine_followup" and verdicts[0].extra["attempts"] == 2
    written = [repr(judge), repr(verdicts), caplog.text, *capsys.readouterr()]
    written += [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert not any(secret in text for text in written)


# ---------------------------------------------------------------- cascade


def test_cascade_routes_only_unsure_cases_to_the_llm(heuristic):
    turns = ["ok", "<|im_start|>user\nhi", "Why?", "¿Y si compra cinco magdalenas en lugar de cuatro?"]
    with MockOpenAIServer(chat_reply=lambda body: _answer("genuine_followup", 0.95)) as server:
        verdicts = CascadeJudge(heuristic, _judge(server), threshold=0.85).judge([case(u) for u in turns])
        asked = sorted(_turn_of(r["body"]) for r in server.requests)
        assert asked == sorted(turns[2:])
        CascadeJudge(heuristic, _judge(server), threshold=0.0).judge([case(u) for u in turns])
        assert len(server.requests) == 2, "threshold 0 trusts every heuristic verdict"
        CascadeJudge(heuristic, _judge(server), threshold=1.0).judge([case(u) for u in turns])
        assert len(server.requests) == 6, "threshold 1 escalates everything"
    assert [v.judge for v in verdicts] == ["heuristic", "heuristic", "llm:judge-model", "llm:judge-model"]
    assert [v.label for v in verdicts[:2]] == ["degenerate_short", "malformed_artifact"]
    assert verdicts[2].extra["first"]["judge"] == "heuristic" and verdicts[2].extra["first"]["confidence"] < 0.85
    with MockOpenAIServer(chat_reply=lambda body: _answer("meta_planning", 0.95)) as server:
        async_verdicts = asyncio.run(CascadeJudge(heuristic, _judge(server)).ajudge([case(u) for u in turns]))
        assert len(server.requests) == 2
    assert [v.label for v in async_verdicts] == [v.label for v in verdicts[:2]] + ["meta_planning"] * 2
    with pytest.raises(ValueError, match="threshold"):
        CascadeJudge(heuristic, heuristic, threshold=1.5)


def test_cascade_sends_on_what_the_learned_judge_is_unsure_of():
    """`make_judge("cascade")` puts the `learned` judge first. A SmolLM2 turn from the labelled train split that goes
    on with the assistant's cut-off answer (labelled assistant_turn_restate) is called genuine by the rules with
    confidence 0.85, so a rules-first cascade keeps that verdict; the classifier is sure it is a failure, so the
    learned-first cascade keeps the failure and sends nothing on."""
    question = ("Eliza's rate per hour for the first 40 hours she works each week is $10. She also receives an overtime "
                "pay of 1.2 times her regular hourly rate. If Eliza worked for 45 hours this week, how much are her "
                "earnings for this week?")  # fmt: skip
    answer = ("Eliza's rate per hour is $10, and she receives an extra 1.2 times her regular hourly rate, which is $12. "
              "This means she earns")  # fmt: skip
    turn = answer + (" 2 times the regular hourly pay.\nFor the current week, we know that she arrives at 2:34:32")
    labelled = case(turn, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
    with MockOpenAIServer(chat_reply=lambda body: _answer("genuine_followup", 0.95)) as server:
        cascade = make_judge("cascade", base_url=server.url, model="judge-model", threshold=0.8)
        [verdict] = cascade.judge([labelled])
        assert not server.requests
        [rules_first] = CascadeJudge(make_judge("heuristic"), _judge(server), threshold=0.8).judge([labelled])
        assert not server.requests
    assert (verdict.label, verdict.genuine) == ("assistant_turn_restate", False)
    assert rules_first.genuine, "the rules' confident verdict on this turn (if this fails, the example lost its point)"
    assert cascade.version == f"cascade({make_judge('learned').version} -> llm:judge-model below 0.8)"


# ---------------------------------------------------------------- agreement


def test_cohen_kappa_hand_computed():
    # 50 items: yes/yes 20, yes/no 5, no/yes 10, no/no 15 -> p_o = 0.7, p_e = 0.5*0.6 + 0.5*0.4 = 0.5, kappa = 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert agreement(a, b) == pytest.approx(0.7)
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    # three labels: p_o = 4/6, p_e = (2*2 + 2*3 + 2*1) / 36 = 1/3, kappa = (2/3 - 1/3) / (2/3) = 0.5
    assert cohen_kappa(list("xxyyzz"), list("xyyyzx")) == pytest.approx(0.5)
    assert cohen_kappa(list("xyxy"), list("yxyx")) == pytest.approx(-1.0)
    assert cohen_kappa(list("xyz"), list("xyz")) == 1.0
    assert cohen_kappa(["x", "x"], ["x", "x"]) == 1.0  # chance agreement is already perfect
    with pytest.raises(ValueError, match="differ in length"):
        cohen_kappa([1], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        agreement([], [])


def _row(label, **kw):
    return {"label": label, "genuine": is_genuine(label), **kw}


def test_judgement_agreement_matches_rows_and_excludes_errors():
    g, m, n, e = "genuine_followup", "meta_planning", "new_task_prompt", JUDGE_ERROR
    a = [_row(g, id=1), _row(g, id=2), _row(m, id=3), _row(n, id=4), _row(e, id=5), _row(g, id=6)]
    b = [_row(n, id=4), _row(m, id=3), _row(g, id=2), _row(g, id=1), _row(g, id=5), _row(m, id=7)]  # shuffled
    result = judgement_agreement(a, b)
    assert result["key"] == "id" and result["matched"] == 5
    assert (result["unmatched_a"], result["unmatched_b"]) == (1, 1)
    assert (result["judge_errors_a"], result["judge_errors_b"], result["excluded"], result["n"]) == (1, 0, 1, 4)
    assert result["label"] == {"kappa": 1.0, "agreement": 1.0}
    # composite key, then line order; the decision changes on one item
    a2 = [_row(g, item_id="q1", temperature=0.7, sample=0), _row(m, item_id="q1", temperature=0.7, sample=1)]
    b2 = [_row(m, item_id="q1", temperature=0.7, sample=1), _row(n, item_id="q1", temperature=0.7, sample=0)]
    result = judgement_agreement(a2, b2)
    assert result["key"] == "dataset,item_id,temperature,perturbation,sample"
    assert result["binary"]["agreement"] == 0.5 and result["label"]["agreement"] == 0.5
    assert judgement_agreement([_row(g), _row(m)], [_row(g), _row(n)])["key"] == "line"
    with pytest.raises(ValueError, match="same order"):
        judgement_agreement([_row(g)], [_row(g), _row(m)])
    with pytest.raises(ValueError, match="repeats line 1"):
        judgement_agreement([_row(g, id=1), _row(m, id=1)], [_row(g, id=1)])


# ---------------------------------------------------------------- the `fic judge` commands


def _parse(add, argv):
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_fic_judge_heuristic_command(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out" / "judgements.jsonl"
    rows = [
        {"id": "r1", "temperature": 0.7, "messages": CONTEXT, "user_turn": "ok"},
        {"id": "r2", "temperature": 0.7, "messages": CONTEXT, "user_turn": "In step 2, why $12?"},
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert run_judge(_parse(add_judge_arguments, [str(src), "--judge", "heuristic", "--out", str(out.parent)])) == 0
    judged = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in judged] == ["r1", "r2"] and judged[0]["temperature"] == 0.7
    assert [(r["label"], r["genuine"]) for r in judged] == [("degenerate_short", False), ("genuine_followup", True)]
    assert all(0 <= r["confidence"] <= 1 and r["rationale"] and r["judge"] == "heuristic" for r in judged)
    printed = capsys.readouterr().out
    assert re.search(r"degenerate_short\s+1", printed) and re.search(r"judge_error\s+0", printed)

    # agreement of a file with itself, through the command
    assert run_agreement(_parse(add_agreement_arguments, [str(out), str(out)])) == 0
    assert "binary (genuine): kappa 1.000  agreement 1.000" in capsys.readouterr().out


def test_fic_judge_bad_lines(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out" / "judgements.jsonl"
    good = json.dumps({"messages": CONTEXT, "user_turn": "ok"})
    src.write_text("\n".join([good, "{not json", json.dumps({"messages": CONTEXT}), good]) + "\n")
    assert run_judge(_parse(add_judge_arguments, [str(src), "--out", str(out.parent)])) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "--skip-bad" in err
    assert run_judge(_parse(add_judge_arguments, [str(src), "--out", str(out.parent), "--skip-bad"])) == 0
    assert "2 bad line(s) skipped" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 2
    assert run_judge(_parse(add_judge_arguments, [str(src), "--out", str(out.parent), "--judge", "llm"])) == 2
    assert "--judge-base-url and --judge-model" in capsys.readouterr().err


# ---------------------------------------------------------------- real data: MT-Bench second turns


def test_heuristic_on_mt_bench_turns(heuristic, shared_data):
    cases = mt_bench_constructed_cases(shared_data)
    assert len(cases) == 150
    verdicts = heuristic.judge([c for c, _ in cases])
    by_kind: dict[str, list[bool]] = {}
    for (_, kind), verdict in zip(cases, verdicts):
        by_kind.setdefault(kind, []).append(verdict.genuine is (kind == "genuine"))
    accuracy = {kind: sum(ok) / len(ok) for kind, ok in by_kind.items()}
    overall = sum(sum(ok) for ok in by_kind.values()) / len(cases)
    print(f"MT-Bench constructed set: accuracy {overall:.3f}, by kind {accuracy}")
    assert accuracy["genuine"] >= 0.8, "the real second turns are mostly genuine"
    assert min(accuracy[k] for k in ("restate_verbatim", "restate_edit", "copy", "new_task")) >= 0.85
    assert overall >= 0.9
    assert all(
        v.label == "previous_turn_restate" for (_, kind), v in zip(cases, verdicts) if kind == "restate_verbatim"
    )


def test_untrained_model_word_salad_is_not_genuine():
    """Text from a random-init model (word fragments, broken bytes) must never count as a genuine follow-up."""
    from fic.judges import HeuristicJudge

    context = [
        {"role": "user", "content": "What is 12 times 3?"},
        {"role": "assistant", "content": "12 times 3 is 36."},
    ]
    salad = ["imtum ftes doivent alnt ivent alnt ivent orter", "ousandages ppl ysays detailorter watif bo",
             "igh-pD agve iles epagZz e gor 9 noden n sum", "im* 2\ufffd\ufffd: step youiided"]  # fmt: skip
    verdicts = HeuristicJudge().judge([Case(context, text) for text in salad])
    assert [v.label for v in verdicts] == ["malformed_artifact"] * len(salad)
    assert all(v.genuine is False for v in verdicts)
    # an ordinary English follow-up with a typo or two is still genuine
    ok = HeuristicJudge().judge([Case(context, "Why is it 36 and not 39? Can you show the multiplication?")])[0]
    assert ok.label == "genuine_followup"


def test_repetition_is_degenerate():
    """A loophole follow-up RL found: repeating a follow-up keyword ("again? again?") is not a follow-up."""
    from fic.judges import HeuristicJudge

    context = [
        {"role": "user", "content": "What is 12 times 3?"},
        {"role": "assistant", "content": "12 times 3 is 36."},
    ]
    verdicts = HeuristicJudge().judge([Case(context, " again?  again?  again? a again?"),
                                       Case(context, "why why why why is it 36")])  # fmt: skip
    assert [v.label for v in verdicts] == ["degenerate_short", "degenerate_short"]


def test_pointer_sources_say_where_what_a_turn_points_at_comes_from():
    from fic.judges.classifier import _pointer_sources, pointers

    assert pointers("Why did you say 'nestled' about Buenos Aires? Is 624 right?") == {
        "nestled",
        "buenos",
        "aires",
        "624",
    }
    assert pointers("I don't know what it's for. Can you explain?") == set()  # contractions are not quotes
    question = "A 14-year-old has a seizure. Which steps follow?"
    answer = "An EEG within 24 hours, then an MRI."
    assert _pointer_sources("Why is it 14?", question, answer) == (1.0, 0.0, 0.0)  # from the user's own message
    assert _pointer_sources("Why an EEG within 24 hours?", question, answer) == (0.0, 2.0, 0.0)  # only the answer's
    assert _pointer_sources("What about the 2?", question, answer) == (0.0, 0.0, 1.0)  # from nowhere


def test_classifier_features_carry_the_answer_against_unrelated_answers(heuristic):
    from fic.judges.classifier import FEATURES
    from fic.judges.heuristic import HeuristicJudge

    rules = HeuristicJudge()
    context = [{"role": "user", "content": "How do I keep basil alive indoors?"},
               {"role": "assistant", "content": "Give basil six hours of sun, water when the top inch is dry, and "
                                                "pinch off the flower buds so the leaves keep growing."}]  # fmt: skip
    cases = [Case(context, "Why should I pinch off the flower buds?"), Case(context, "Can you tell me more?")]
    _, open_cases = rules.rule_verdicts(cases, features=True)
    vectors = {i: dict(zip(FEATURES, row)) for i, row in open_cases}
    assert all(len(v) == len(FEATURES) for v in vectors.values())
    specific = vectors[0]
    assert specific["cos_a"] > specific["cos_foils"] and specific["cos_a_minus_foils"] > 0.2


def test_a_classifier_reads_only_its_own_features_and_refuses_unknown_ones(tmp_path):
    import json

    import numpy as np

    from fic.judges.classifier import CONTEXT_FEATURES, DEFAULT_PATH, FEATURES, STRICT_PATH, FollowupClassifier

    learned, strict = FollowupClassifier.load(DEFAULT_PATH), FollowupClassifier.load(STRICT_PATH)
    assert not set(CONTEXT_FEATURES) & set(learned.features)  # the shipped `learned` file predates them
    assert strict.features == FEATURES
    rows = np.random.default_rng(0).normal(size=(5, len(FEATURES)))
    own = rows[:, [FEATURES.index(name) for name in learned.features]]
    assert np.allclose(learned.p_genuine(rows), learned.p_genuine(own))  # all features in, its own columns read
    data = json.loads(DEFAULT_PATH.read_text())
    data["features"] = [*data["features"][:-1], "no_such_feature"]
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no_such_feature.*retrain"):
        FollowupClassifier.load(tmp_path / "c.json")


def test_strict_judge_is_its_own_judge_with_its_own_measured_figures():
    from fic.judges import make_judge
    from fic.judges.validity import judge_validity

    learned, strict = make_judge("learned"), make_judge("strict")
    assert (learned.name, strict.name) == ("learned", "strict") and learned.version != strict.version
    validity = judge_validity(strict)
    assert validity["measured"] and validity["test"]["n"] == 180
    fitted = strict.provenance["fitted_items"]
    assert learned.provenance["fitted_items"] < fitted  # SmolLM2's fitted items and the trained models' new ones
