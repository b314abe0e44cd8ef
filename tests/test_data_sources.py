"""fic.data sources: real rows (tests/data, subsets of ../shared/data), malformed rows, answer checkers, hub errors
(never online)."""

import csv
import json
import socket
from collections import Counter
from pathlib import Path

import pytest

from fic.data import (
    SOURCES,
    DataError,
    Record,
    check_answer,
    extract_choice,
    extract_final_number,
    load_source,
    parse_spec,
)

# ---------------------------------------------------------------- real rows (tests/data/SOURCE.md: which, from where)


def _load(shared_data: Path, name: str, relative: str, **kw) -> list[Record]:
    return load_source(f"{name}:{shared_data / relative}", **kw)


@pytest.mark.parametrize(
    "name, relative, count",
    [
        ("gsm8k", "gsm8k/test.jsonl", 51),
        ("ifeval", "ifeval/input_data.jsonl", 5),
        ("ifbench", "ifbench/IFBench_test.jsonl", 11),
        ("mt_bench", "mt_bench/question.jsonl", 80),
        ("healthbench", "healthbench/oss_eval_first30.jsonl", 15),
        ("ambigqa", "ambigqa/dev_light.json", 40),
        ("lost_in_conversation", "lost_in_conversation/sample_5_per_task.json", 6),
        ("lost_in_conversation", "lost_in_conversation/sharded_translation.json", 3),
        ("products", "products_dummyjson/products.json", 20),
    ],
)
def test_real_file_counts_and_record_shape(shared_data, name, relative, count):
    records = _load(shared_data, name, relative)
    assert len(records) == count
    assert len({r.id for r in records}) == count
    for record in records:
        assert record.source == name
        assert record.messages and record.messages[-1]["role"] == "user"
        assert all(m["role"] in ("system", "user", "assistant") for m in record.messages)
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in record.messages)


def test_limit_reads_only_the_first_rows(shared_data):
    records = _load(shared_data, "gsm8k", "gsm8k/test.jsonl", limit=3)
    assert [r.id for r in records] == ["0", "1", "2"]
    assert records[0].messages[0]["content"].startswith("Janet\u2019s ducks lay 16 eggs")
    with pytest.raises(ValueError, match="limit"):
        _load(shared_data, "gsm8k", "gsm8k/test.jsonl", limit=-1)


def test_gsm8k_records_and_checker_on_real_references(shared_data):
    records = _load(shared_data, "gsm8k", "gsm8k/test.jsonl")
    first = records[0]
    assert first.verifier == {"type": "gsm8k", "answer": "18"}
    assert first.reference.endswith("#### 18")
    # Every reference solution passes its own check; a number off by one fails.
    assert all(check_answer(r, r.reference) for r in records)
    for record in records[:200]:
        wrong = int(record.verifier["answer"]) + 1
        assert check_answer(record, f"{record.reference.rsplit('####', 1)[0]}#### {wrong}") is False
        assert check_answer(record, f"So the answer is {int(record.verifier['answer']):,}.") is True
    # The answers with thousands separators in the file ("#### 2,125") are normalised.
    raw = [json.loads(line)["answer"] for line in (shared_data / "gsm8k/test.jsonl").open()]
    with_comma = [i for i, answer in enumerate(raw) if "," in answer.rsplit("####", 1)[1]]
    assert with_comma and all("," not in records[i].verifier["answer"] for i in with_comma)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Janet makes 9 * 2 = 18 dollars.\n#### 18", "18"),
        ("The answer is 1,234.", "1234"),
        ("She pays $18", "18"),
        ("Therefore \\boxed{18} is it, not 20", "18"),
        ("The temperature drops to -7 degrees.", "-7"),
        ("The answer is 18.0", "18"),
        ("It costs $1,250.50 in total", "1250.5"),
        ("Between 3-5 days, then 12 more; the answer is: 40 apples", "40"),
        ("first 12, then 7, finally 30", "30"),
        ("no digits here", None),
    ],
)
def test_extract_final_number(text, expected):
    assert extract_final_number(text) == expected


def test_ifeval_and_ifbench_have_constraints_but_no_checker(shared_data):
    ifeval = _load(shared_data, "ifeval", "ifeval/input_data.jsonl")
    first = ifeval[0]
    assert first.id == "1000"
    assert first.verifier["type"] == "ifeval"
    assert first.verifier["instruction_id_list"][0] == "punctuation:no_comma"
    assert first.verifier["kwargs"][1] == {"num_highlights": 3}
    assert check_answer(first, "anything") is None
    ifbench = _load(shared_data, "ifbench", "ifbench/IFBench_test.jsonl")
    sizes = Counter(len(r.verifier["instruction_id_list"]) for r in ifbench)
    assert sizes == {1: 10, 2: 1}
    assert all(len(r.verifier["kwargs"]) == len(r.verifier["instruction_id_list"]) for r in ifbench)


def test_mt_bench_turns_and_reference_answers_beside(shared_data, tmp_path):
    records = _load(shared_data, "mt_bench", "mt_bench/question.jsonl")
    assert all(len(r.meta["turns"]) == 2 and r.messages[0]["content"] == r.meta["turns"][0] for r in records)
    categories = Counter(r.meta["category"] for r in records)
    assert len(categories) == 8 and set(categories.values()) == {10}
    by_id = {r.id: r for r in records}
    gpt4 = {r.id for r in records if r.meta.get("reference_source") == "reference_answer_gpt-4.jsonl"}
    assert gpt4 == {str(i) for i in range(101, 131)}
    answers = {
        str(row["question_id"]): row["choices"][0]["turns"]
        for row in map(json.loads, (shared_data / "mt_bench/reference_answer_gpt-4.jsonl").open())
    }
    assert by_id["101"].meta["reference_turns"] == answers["101"]
    assert by_id["101"].reference == answers["101"][0]
    assert "reference_turns" not in by_id["81"].meta
    # Without the side file, only the question file's own "reference" field (39 questions) is used.
    alone = tmp_path / "question.jsonl"
    alone.write_bytes((shared_data / "mt_bench/question.jsonl").read_bytes())
    records = load_source(f"mt_bench:{alone}")
    assert Counter(r.meta.get("reference_source") for r in records) == {None: 41, "question": 39}


def test_healthbench_conversations_and_rubrics(shared_data):
    records = _load(shared_data, "healthbench", "healthbench/oss_eval_first30.jsonl")
    assert sum(len(r.messages) > 1 for r in records) == 3
    assert sum(len(r.meta["rubrics"]) for r in records) == 125
    assert sum(r.reference is not None for r in records) == 10
    themes = Counter(t for r in records for t in r.meta["tags"] if t.startswith("theme:"))
    assert themes["theme:global_health"] == 4
    assert check_answer(records[0], "See a doctor.") is None


def test_ambigqa_intents(shared_data):
    records = _load(shared_data, "ambigqa", "ambigqa/dev_light.json")
    assert sum(r.meta["ambiguous"] for r in records) == 29
    cardinals = next(r for r in records if r.messages[0]["content"].startswith("Why did the st louis cardinals"))
    assert cardinals.meta["ambiguous"] and cardinals.reference is None
    assert [i["question"].split(" caused")[0] for i in cardinals.meta["intents"]] == [
        "What ability",
        "What physical issue",
        "What fan issue",
    ]
    dexter = records[0]
    assert not dexter.meta["ambiguous"]
    assert dexter.meta["intents"] == [
        {"question": dexter.messages[0]["content"], "answers": ["Tony Goldwyn", "Goldwyn"]}
    ]
    assert dexter.reference == "Tony Goldwyn"


def test_lost_in_conversation_full_instruction_and_shards(shared_data):
    records = _load(shared_data, "lost_in_conversation", "lost_in_conversation/sample_5_per_task.json")
    assert Counter(r.meta["task"] for r in records) == dict.fromkeys(
        ["code", "database", "actions", "math", "data2text", "summary"], 1
    )
    assert all(len(r.meta["shards"]) >= 2 and all(s.strip() for s in r.meta["shards"]) for r in records)
    math = [r for r in records if r.meta["task"] == "math"]
    assert all(r.verifier["type"] == "gsm8k" and check_answer(r, r.reference) for r in math)
    assert math[0].verifier["answer"] == "5" and math[0].messages[0]["content"].startswith("Ray had 25 lollipops")
    assert check_answer(math[0], "#### 6") is False
    database = next(r for r in records if r.meta["task"] == "database")
    assert database.reference.upper().startswith("SELECT") and check_answer(database, database.reference) is None
    summary = next(r for r in records if r.meta["task"] == "summary")
    assert "Document " in summary.meta["shards"][1] and summary.meta["query"] in summary.messages[0]["content"]
    translation = _load(shared_data, "lost_in_conversation", "lost_in_conversation/sharded_translation.json")
    # Two documents end with an empty shard in the real file: dropped, and said so.
    assert {r.id: r.meta["dropped_empty_shards"] for r in translation if "dropped_empty_shards" in r.meta} == {
        "wmt-news-17-de-en": [3],
        "wmt-news-20-de-en": [4],
    }
    first = translation[0]
    assert first.reference == first.meta["document_en"]
    assert first.meta["document_de"] in first.messages[0]["content"]


def test_products_catalog(shared_data):
    records = _load(shared_data, "products", "products_dummyjson/products.json")
    assert Counter(r.meta["category"] for r in records) == dict.fromkeys(
        ["beauty", "fragrances", "furniture", "groceries"], 5
    )
    assert sum("brand" not in r.meta for r in records) == 5  # groceries carry no brand
    first = records[0]
    assert first.reference == "Essence Mascara Lash Princess" and first.meta["price"] == 9.99
    assert "beauty" in first.messages[0]["content"] and first.meta["title"] not in first.messages[0]["content"]


# ---------------------------------------------------------------- local formats without real data


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_gpqa_local_csv_shuffles_by_id_and_checks_letters(tmp_path):
    path = tmp_path / "gpqa_diamond.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["Record ID", "Question", "Correct Answer", *[
            f"Incorrect Answer {i}" for i in (1, 2, 3)], "Subdomain"])  # fmt: skip
        writer.writeheader()
        for i in range(12):
            writer.writerow({"Record ID": f"rec{i}", "Question": f"Question {i}?\nSecond line.",
                             "Correct Answer": f" right {i} ", "Incorrect Answer 1": "w1",
                             "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3", "Subdomain": "Physics"})  # fmt: skip
    records = load_source(f"gpqa:{path}")
    assert records == load_source(f"gpqa:{path}")  # same order every time
    assert len({r.verifier["answer"] for r in records}) > 1  # not always the same position
    for i, record in enumerate(records):
        letter = record.verifier["answer"]
        assert record.verifier["options"][letter] == f"right {i}" == record.reference
        assert f"{letter}) right {i}" in record.messages[0]["content"]
        assert record.meta["Subdomain"] == "Physics"
        assert check_answer(record, f"Answer: {letter}") is True
        assert check_answer(record, f"Answer: {'B' if letter == 'A' else 'A'}") is False


@pytest.mark.parametrize(
    "text, expected",
    [("Answer: B", "B"), ("The answer is (C).", "C"), ("\\boxed{D}", "D"), (" (A) ", "A"), ("**Answer: C**", "C"),
     ("(B) looks wrong, so the answer is A", "A"), ("The answer is Actually unclear", None)],
)  # fmt: skip
def test_extract_choice(text, expected):
    assert extract_choice(text) == expected


def test_coval_schema(tmp_path):
    path = _write_jsonl(
        tmp_path / "coval.jsonl",
        [
            {"id": "a", "prompt": "Plan a trip.", "responses": ["Go to Rome.", {"content": "Ask first.", "score": 2}],
             "rubrics": ["Asks about budget", "Is concise"]},
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                          {"role": "user", "content": "Help?"}], "candidates": [{"text": "Sure"}], "rubric": "Helps"},
        ],
    )  # fmt: skip
    first, second = load_source(f"coval:{path}")
    assert first.id == "a" and first.messages == [{"role": "user", "content": "Plan a trip."}]
    assert first.meta["candidates"] == [{"text": "Go to Rome."}, {"text": "Ask first.", "score": 2}]
    assert first.meta["rubrics"] == [{"criterion": "Asks about budget"}, {"criterion": "Is concise"}]
    assert second.id == "1" and len(second.messages) == 3 and second.meta["rubrics"] == [{"criterion": "Helps"}]
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "x", "responses": ["y"]}, {"prompt": "x"}])
    with pytest.raises(DataError, match=r"bad.jsonl row 2: field 'responses' \(or 'candidates'/'completions'\)"):
        load_source(f"coval:{bad}")


def test_conversations_and_other_local_formats(tmp_path):
    conv = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
             "id": 7, "topic": "greeting"}]  # fmt: skip
    (record,) = load_source(f"conversations:{_write_jsonl(tmp_path / 'c.jsonl', conv)}")
    assert record.id == "7" and record.meta == {"topic": "greeting"} and len(record.messages) == 2
    products = tmp_path / "products.json"  # the DummyJSON API response shape
    products.write_text(json.dumps({"products": [{"id": 1, "title": "Pan", "category": "kitchen-accessories"}]}))
    assert load_source(f"products:{products}")[0].reference == "Pan"
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pyarrow.Table.from_pylist([{"question": "1+1?", "answer": "1+1=2\n#### 2"}])
    pq.write_table(table, tmp_path / "gsm8k.parquet")
    assert load_source(f"gsm8k:{tmp_path / 'gsm8k.parquet'}")[0].verifier["answer"] == "2"


# ---------------------------------------------------------------- malformed input

GOOD = {"role": "user", "content": "Hi"}


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ({"id": "x"}, "field 'messages' is missing"),
        ({"messages": [GOOD, {"role": "bot", "content": "Hi"}]}, "field 'messages[1].role' has unknown role 'bot'"),
        ({"messages": [{"role": "user", "content": "  "}]}, "field 'messages[0].content' is empty"),
        ({"messages": [{"role": "user", "content": 5}]}, "field 'messages[0].content' must be str, got int 5"),
        ({"messages": [{"role": "user"}]}, "field 'messages[0].content' is missing"),
        ({"messages": "Hi"}, "field 'messages' must be list, got str"),
        ("[1, 2]", "expected a JSON object, got list"),
        ("{not json", "not valid JSON"),
    ],
)
def test_malformed_conversation_rows_name_file_row_and_field(tmp_path, bad_row, message):
    # Row 4 is the bad one: a blank line (row 2) is skipped but still counted.
    path = tmp_path / "conv.jsonl"
    path.write_text("\n".join([json.dumps({"messages": [GOOD]}), "", json.dumps({"messages": [GOOD]}),
                               bad_row if isinstance(bad_row, str) else json.dumps(bad_row)]) + "\n")  # fmt: skip
    with pytest.raises(DataError) as info:
        load_source(f"conversations:{path}")
    assert str(info.value).startswith("conv.jsonl row 4: ")
    assert message in str(info.value)


def test_malformed_source_rows(tmp_path):
    gsm = _write_jsonl(
        tmp_path / "gsm8k.jsonl", [{"question": "q", "answer": "a\n#### 1"}] * 11 + [{"answer": "#### 3"}]
    )
    with pytest.raises(DataError, match=r"^gsm8k.jsonl row 12: field 'question' is missing"):
        load_source(f"gsm8k:{gsm}")
    no_final = _write_jsonl(tmp_path / "g2.jsonl", [{"question": "q", "answer": "forty-two"}])
    with pytest.raises(DataError, match=r"g2.jsonl row 1: field 'answer' has no final '#### <number>' line"):
        load_source(f"gsm8k:{no_final}")
    health = _write_jsonl(tmp_path / "hb.jsonl", [{"prompt_id": "p", "prompt": [{"role": "doctor", "content": "x"}],
                                                   "rubrics": [{"criterion": "c", "points": 1}]}])  # fmt: skip
    with pytest.raises(DataError, match=r"hb.jsonl row 1: field 'prompt\[0\].role' has unknown role 'doctor'"):
        load_source(f"healthbench:{health}")
    ambig = tmp_path / "dev.json"
    ambig.write_text(json.dumps([{"id": "1", "question": "q", "annotations": [{"type": "weird"}]}]))
    with pytest.raises(DataError, match=r"dev.json row 1: field 'annotations\[0\].type' is 'weird'"):
        load_source(f"ambigqa:{ambig}")
    dup = _write_jsonl(tmp_path / "dup.jsonl", [{"id": 1, "messages": [GOOD]}, {"id": "1", "messages": [GOOD]}])
    with pytest.raises(DataError, match=r"dup.jsonl row 2: id '1' repeats dup.jsonl row 1"):
        load_source(f"conversations:{dup}")
    with pytest.raises(DataError, match="does not exist"):
        load_source(f"gsm8k:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(DataError, match=r"unsupported file type '.txt'; this source reads .jsonl, .json, .parquet"):
        load_source(f"gsm8k:{_write_jsonl(tmp_path / 'x.txt', [])}")


# ---------------------------------------------------------------- names and specs


def test_parse_spec_and_unknown_names():
    assert parse_spec("gsm8k") == ("gsm8k", None)
    assert parse_spec("GSM8K:/data/a:b.jsonl") == ("gsm8k", "/data/a:b.jsonl")
    for bad in ("", ":x.jsonl", "gsm8k:"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    with pytest.raises(ValueError) as info:
        load_source("gsm8:x.jsonl")
    message = str(info.value)
    assert "unknown dataset source 'gsm8'" in message and "Did you mean 'gsm8k'?" in message
    assert all(name in message for name in SOURCES)
    assert {"gsm8k", "ifeval", "ifbench", "gpqa", "mt_bench", "healthbench", "coval", "ambigqa",
            "lost_in_conversation", "products", "conversations"} <= set(SOURCES)  # fmt: skip


# ---------------------------------------------------------------- hub (never online)


@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    """HF offline switches on, empty caches, and any socket connection recorded and refused."""
    import datasets
    import huggingface_hub.constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("FIC_CACHE", str(tmp_path / "fic_cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    attempts = []

    def refuse(sock, address):
        attempts.append(address)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield
    assert attempts == [], f"tests tried to reach the network: {attempts}"


@pytest.mark.parametrize(
    "name, hub_id",
    [("gsm8k", "openai/gsm8k"), ("lost_in_conversation", "microsoft/lost_in_conversation"),
     ("healthbench", "oss_eval.jsonl")],
)  # fmt: skip
def test_offline_hub_error_names_the_id_and_the_local_fallback(offline_hub, name, hub_id):
    with pytest.raises(DataError) as info:
        load_source(name)
    message = str(info.value)
    assert f"could not load source '{name}'" in message and hub_id in message
    assert f"'{name}:PATH'" in message


def test_local_only_sources_say_how_to_pass_a_path():
    for name in ("products", "conversations"):
        with pytest.raises(DataError, match=f"source '{name}' cannot load from the hub: .*pass '{name}:PATH'"):
            load_source(name)


def test_hub_rows_are_normalised_like_local_ones(monkeypatch):
    """A hub load (faked: no network) passes id, config and sliced split, and hub-shaped rows normalise."""
    import datasets

    calls = []
    hub_row = {  # AmbigQA on the hub: Sequence features come back as dicts of lists
        "id": "9", "question": "Who won?",
        "annotations": {"type": ["multipleQAs"], "answer": [[]],
                        "qaPairs": [{"question": ["Who won in 2001?", "Who won in 2002?"], "answer": [["A"], ["B"]]}]},
    }  # fmt: skip

    gpqa_row = {"Record ID": "r1", "Question": "Q?", "Correct Answer": "yes", "Incorrect Answer 1": "no",
                "Incorrect Answer 2": "maybe", "Incorrect Answer 3": "never"}  # fmt: skip

    def fake_load_dataset(repo_id, config=None, split=None):
        calls.append((repo_id, config, split))
        return [gpqa_row] if repo_id == "Idavidrein/gpqa" else [hub_row]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (record,) = load_source("ambigqa", limit=5)
    assert calls == [("sewon/ambig_qa", "light", "validation[:5]")]
    assert record.meta["ambiguous"] is True
    assert record.meta["intents"] == [
        {"question": "Who won in 2001?", "answers": ["A"]},
        {"question": "Who won in 2002?", "answers": ["B"]},
    ]
    (question,) = load_source("gpqa_main", split="test")
    assert calls[-1] == ("Idavidrein/gpqa", "gpqa_main", "test")
    assert question.id == "r1" and question.reference == "yes"


def test_gated_hub_failure_becomes_data_error(monkeypatch):
    import datasets

    def gated(*args, **kwargs):
        raise PermissionError("Dataset 'Idavidrein/gpqa' is a gated dataset on the Hub. You must be authenticated")

    monkeypatch.setattr(datasets, "load_dataset", gated)
    with pytest.raises(DataError) as info:
        load_source("gpqa")
    message = str(info.value)
    assert "Idavidrein/gpqa, gpqa_diamond, train" in message and "gated" in message and "'gpqa:PATH'" in message
