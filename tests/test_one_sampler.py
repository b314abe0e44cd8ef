"""One follow-up sampler: the same settings give the same rows through `fic probe`, the trainers' held-out evaluation
before/after training, and `fic eval-checkpoints` (the step the training callback takes too)."""

import json
import shutil

import pytest

from fic import cli
from fic.eval_config import EvalConfig
from fic.followup_summary import row_key
from fic.tiny import tiny_model

SETTINGS = {"limit": 3, "temperatures": [0.0, 1.0], "samples": 2, "seed": 7, "max_new_tokens": 8,
            "response_tokens": 12, "responses": "model"}  # fmt: skip


def read_rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def as_written(rows: list[dict]) -> list[dict]:
    """Rows as a JSONL file holds them (the trainers' rows are in memory)."""
    return [json.loads(json.dumps(row)) for row in rows]


@pytest.fixture(scope="module")
def gsm8k(shared_data):
    return f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"


def test_probe_trainers_and_checkpoint_evaluation_give_the_same_rows(gsm8k, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.trainers.heldout import eval_judge, evaluate_followups, heldout_contexts, heldout_records

    path = tiny_model("chatml")
    # GSM8K test item 0 is inside the default judge's fit: every path is told it may evaluate it.
    config = EvalConfig(datasets=[gsm8k], allow_judge_overlap=True, **SETTINGS)

    argv = ["probe", "--model", path, "--datasets", gsm8k, "--limit", "3", "--temperatures", "0,1", "--samples", "2",
            "--seed", "7", "--max-new-tokens", "8", "--response-tokens", "12", "--responses", "model",
            "--allow-judge-overlap", "--out", str(tmp_path / "probe")]  # fmt: skip
    assert cli.main(argv) == 0
    probed = read_rows(tmp_path / "probe" / "samples.jsonl")

    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    records = heldout_records(config)
    contexts = heldout_contexts(records, config, model, tokenizer)
    trained = as_written(
        evaluate_followups(model, tokenizer, contexts, config, eval_judge(config), split=False)["rows"]
    )

    run = tmp_path / "run"
    shutil.copytree(path, run / "checkpoint-1")
    (run / "checkpoint-1" / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    (run / "eval").mkdir()
    (run / "eval" / "config.json").write_text(json.dumps({**config.to_dict(), "evaluations": ["probe"]}))
    assert cli.main(["eval-checkpoints", str(run)]) == 0
    checkpointed = read_rows(run / "checkpoint-1" / "eval" / "probe" / "samples.jsonl")

    # 3 items x 2 temperatures x 2 samples (greedy too: its one decoded text, repeated)
    assert len(probed) == 12
    assert [row_key(r) for r in probed] == [row_key(r) for r in trained] == [row_key(r) for r in checkpointed]
    assert (
        [r["user_turn"] for r in probed] == [r["user_turn"] for r in trained] == [r["user_turn"] for r in checkpointed]
    )
    assert probed == trained == checkpointed  # contexts, verdicts, generic floor and `correct` too
    greedy = [r["user_turn"] for r in probed if r["temperature"] == 0.0 and r["item_id"] == probed[0]["item_id"]]
    sampled = [r["user_turn"] for r in probed if r["temperature"] == 1.0]
    assert len(set(greedy)) == 1 and len(set(sampled)) > 1
