"""fic.data.sharding: the rule sharder on real GSM8K problems, and the LLM sharder on a stub and the mock server."""

import json

import pytest
from mock_openai_server import MockOpenAIServer

from fic.data.sharding import (
    LLMSharder,
    ShardingError,
    check_coverage,
    numbers_in,
    shard_math_problem,
    split_sentences,
)

JANET = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her friends "
    "every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck egg. How much in "
    "dollars does she make every day at the farmers' market?"
)


def test_question_first_then_one_fact_per_shard():
    shards = shard_math_problem(JANET)
    assert shards[0] == "How much in dollars does she make every day at the farmers' market?"
    assert [numbers_in(s) for s in shards[1:]] == [["16"], ["three"], ["four"], ["2"]]
    assert check_coverage(JANET, shards) == []


def test_numbers_and_abbreviations_do_not_end_sentences():
    text = "Mr. Lee paid $1,200.50 for 3.5 kg. He sold it for $2,000. How much did he earn?"
    assert split_sentences(text) == [
        "Mr. Lee paid $1,200.50 for 3.5 kg.",
        "He sold it for $2,000.",
        "How much did he earn?",
    ]
    shards = shard_math_problem(text)
    assert shards[0] == "How much did he earn?"
    assert check_coverage(text, shards) == []


def test_conditions_of_the_question_become_facts():
    lead = "Tom has 5 apples. If he sells each apple for $3, how much money does he get?"
    assert shard_math_problem(lead) == [
        "How much money does he get?",
        "Tom has 5 apples.",
        "He sells each apple for $3.",
    ]
    trail = "Each box holds 6 pens. How many pens are there if there are 4 boxes?"
    assert shard_math_problem(trail) == ["How many pens are there?", "Each box holds 6 pens.", "There are 4 boxes."]


def test_ranges_are_not_split():
    text = "A bag holds between 3 and 5 marbles. How many bags are needed for 20 marbles?"
    shards = shard_math_problem(text)
    assert "A bag holds between 3 and 5 marbles." in shards
    assert check_coverage(text, shards) == []


def test_every_gsm8k_number_lands_in_exactly_one_shard(shared_data):
    rows = [json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines()]
    questions_first = 0
    for row in rows:
        shards = shard_math_problem(row["question"])
        assert check_coverage(row["question"], shards) == [], row["question"]
        assert all(s.strip() for s in shards)
        questions_first += shards[0].endswith("?")
    assert questions_first / len(rows) > 0.9


def test_check_coverage_finds_missing_duplicated_and_invented_numbers():
    text = "Ann has 3 cats and 4 dogs. How many pets?"
    assert check_coverage(text, ["How many pets?", "Ann has 3 cats.", "Ann has 4 dogs."]) == []
    assert "missing" in " ".join(check_coverage(text, ["How many pets?", "Ann has 3 cats."]))
    assert "more shards" in " ".join(check_coverage(text, ["How many pets?", "Ann has 3 cats.", "3 cats and 4 dogs."]))
    assert "not in the original" in " ".join(check_coverage(text, ["How many of the 2 kinds?", "3 cats, 4 dogs."]))


def test_empty_problem_is_an_error():
    with pytest.raises(ShardingError, match="text"):
        shard_math_problem("  ")


TEXT = "Ann has 3 cats. She buys 4 more cats. How many cats does she have?"
SEGMENTS = ["Ann has 3 cats.", "She buys 4 more cats.", "How many cats does she have?"]
SHARDS = ["How many cats does Ann have in the end?", "She starts with 3 cats.", "Then she buys 4 more."]


class Scripted:
    """A stub chat model that answers the three steps from a script and records the prompts."""

    def __init__(self, *replies):
        self.replies, self.prompts = list(replies), []

    def __call__(self, messages):
        self.prompts.append(messages[-1]["content"])
        return self.replies.pop(0)


def test_llm_sharder_segments_rephrases_and_verifies():
    stub = Scripted(json.dumps(SEGMENTS), "Here you go:\n" + json.dumps(SHARDS), "Yes.")
    assert LLMSharder(complete=stub).shard(TEXT) == SHARDS
    assert "atomic units" in stub.prompts[0] and TEXT in stub.prompts[0]
    assert "- She buys 4 more cats." in stub.prompts[1]  # the segments feed the rephrase step
    assert "1. How many cats" in stub.prompts[2]


def test_llm_sharder_retries_a_lossy_attempt_then_succeeds():
    lossy = ["How many cats?", "She starts with 3 cats."]  # drops the 4
    stub = Scripted(json.dumps(SEGMENTS), json.dumps(lossy), json.dumps(SEGMENTS), json.dumps(SHARDS), "yes")
    assert LLMSharder(complete=stub, max_attempts=2).shard(TEXT) == SHARDS
    assert len(stub.prompts) == 5


def test_llm_sharder_gives_up_or_falls_back():
    def no():
        return Scripted(*[json.dumps(SEGMENTS), json.dumps(SHARDS), "no"] * 2)

    with pytest.raises(ShardingError, match="verify step"):
        LLMSharder(complete=no(), max_attempts=2).shard(TEXT)
    assert LLMSharder(complete=no(), max_attempts=2, fallback="rules").shard(TEXT) == shard_math_problem(TEXT)
    with pytest.raises(ShardingError, match="JSON list"):
        LLMSharder(complete=Scripted("I cannot do that."), max_attempts=1).shard(TEXT)


def test_llm_sharder_over_the_mock_openai_server():
    def reply(body):
        prompt = body["messages"][-1]["content"]
        if "atomic units" in prompt:
            return json.dumps(SEGMENTS)
        if "reveal one per turn" in prompt:
            return json.dumps(SHARDS)
        return "yes"

    with MockOpenAIServer(chat_reply=reply) as server:
        shards = LLMSharder(base_url=server.url, model="sharder").shard(TEXT)
        assert shards == SHARDS
        assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 3
        assert all(r["body"]["model"] == "sharder" and r["body"]["temperature"] == 0.0 for r in server.requests)


def test_llm_sharder_arguments():
    with pytest.raises(ValueError, match="base_url"):
        LLMSharder()
    with pytest.raises(ValueError, match="fallback"):
        LLMSharder(complete=lambda m: "", fallback="maybe")
