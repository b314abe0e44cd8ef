"""Collaboration SFT: config checks, TRL trains on exactly the masked turns, held-out follow-up rate, the recipe."""

import json

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from fic.followup_eval import genuine_followup_rate, probe_prompts
from fic.generation import HFBackend
from fic.judges import Verdict
from fic.masks import IGNORE_INDEX, turn_masks
from fic.tiny import tiny_model
from fic.trainers.collab_sft import CollabSFTConfig, CollabSFTTrainer

CONVERSATION = [
    {"role": "user", "content": "What is 12 times 3?"},
    {"role": "assistant", "content": "12 times 3 is 36."},
    {"role": "user", "content": "Why is it 36?"},
]
NO_FOLLOWUP = [{"role": "user", "content": "Hello there."}]


def config(tmp_path, **kw):
    defaults = dict(output_dir=str(tmp_path), report_to="none", bf16=False, save_strategy="no", logging_steps=1,
                    per_device_train_batch_size=2, max_length=256, seed=0)  # fmt: skip
    return CollabSFTConfig(**{**defaults, **kw})


def test_config_rejects_bad_turn_choices_and_trl_masks(tmp_path):
    with pytest.raises(ValueError, match="train_on: invalid value .*user_followups, assistant"):
        config(tmp_path, train_on=["followups"])
    with pytest.raises(ValueError, match="assistant_only_loss / completion_only_loss: .*train_on"):
        config(tmp_path, assistant_only_loss=True)
    assert config(tmp_path).train_on == ["user_followups"]


def test_tiny_model_names_resolve_in_one_place():
    from fic.modeling import ModelArguments, ModelLoadError, load_model_and_tokenizer, resolve_model_name

    assert resolve_model_name("tiny:llama3") == tiny_model("llama3")
    assert resolve_model_name("Qwen/Qwen3.5-2B") == "Qwen/Qwen3.5-2B"
    model, tok = load_model_and_tokenizer(ModelArguments(model_name_or_path="tiny:norole"))
    assert tok.chat_template and "start_of_turn" in tok.chat_template and model.num_parameters() < 5_000_000
    with pytest.raises(ModelLoadError, match="tiny:FAMILY or tiny:FAMILY:ARCH"):
        resolve_model_name("tiny:gpt")


def test_the_model_loader_and_the_data_layer_import_no_test_fixture_and_no_cli():
    """`fic.modeling` loads `fic.tiny` only for a `tiny:` name; `fic.data.followups` knows no CLI."""
    import subprocess
    import sys

    code = ("import sys, fic.modeling, fic.data.followups; from fic.modeling import resolve_model_name; "
            "resolve_model_name('Qwen/Qwen3.5-2B'); "
            "print(sorted(m for m in sys.modules if m in ('fic.tiny', 'fic.cli_args', 'fic.cli')))")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def followup_nll(model, tok, conversation) -> float:
    ids, labels = turn_masks(tok, conversation, ["user_followups"])
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()


@pytest.mark.parametrize("family", ["chatml", "llama3"])
def test_trl_trains_on_exactly_the_masked_turns(tmp_path, family):
    path = tiny_model(family)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    data = Dataset.from_list([{"messages": CONVERSATION}, {"messages": NO_FOLLOWUP}] * 4)
    args = config(tmp_path, max_steps=12, learning_rate=1e-2, train_on=["user_followups"])
    trainer = CollabSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    # prepared: only conversations with a follow-up stay, with the masks of fic.masks
    ids, labels = turn_masks(tok, CONVERSATION, ["user_followups"])
    assert len(trainer.train_dataset) == 4
    assert all(row["input_ids"] == ids and row["labels"] == labels for row in trainer.train_dataset)
    # TRL's collator keeps those labels: the loss sees the follow-up and its end-of-turn token, nothing else
    batch = next(iter(trainer.get_train_dataloader()))
    trained = [tok.decode(row[row != IGNORE_INDEX]) for row in batch["labels"]]
    assert trained == ["Why is it 36?" + ("<|im_end|>" if family == "chatml" else "<|eot_id|>")] * len(trained)
    before = followup_nll(model, tok, CONVERSATION)
    trainer.train()
    assert followup_nll(trainer.model, tok, CONVERSATION) < before - 1.0


def test_a_dataset_with_no_followup_fails_clearly(tmp_path):
    path = tiny_model("chatml")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    with pytest.raises(ValueError, match="no conversation has a user_followups turn"):
        CollabSFTTrainer(model=model, args=config(tmp_path), train_dataset=Dataset.from_list([{"messages": NO_FOLLOWUP}]),
                         processing_class=tok)  # fmt: skip


class LengthJudge:
    """Stand-in judge: genuine when the turn has an even number of characters, judge_error when it is empty."""

    name = "length"

    def judge(self, cases):
        return [
            Verdict.error("empty") if not c.user_turn else Verdict("genuine_followup" if len(c.user_turn) % 2 == 0
                                                                   else "new_task_prompt")
            for c in cases
        ]  # fmt: skip


def test_genuine_followup_rate_generates_from_the_user_header_and_counts_right(tiny_family):
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    backend = HFBackend(AutoModelForCausalLM.from_pretrained(path), tok)
    contexts = [CONVERSATION[:2], [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello!"}]]
    prompts = probe_prompts(tok, contexts)
    header = {"chatml": "<|im_start|>user\n", "llama3": "<|start_header_id|>user<|end_header_id|>\n\n",
              "norole": "<start_of_turn>user\n"}[family]  # fmt: skip
    assert all(p.endswith(header) for p in prompts)
    result = genuine_followup_rate(backend, tok, contexts, LengthJudge(), temperatures=(0.0, 1.0), samples=3,
                                   max_new_tokens=6)  # fmt: skip
    for temperature in ("0.0", "1.0"):  # greedy too: 3 rows each (one decoded text, repeated), as `fic probe` writes
        assert result["by_temperature"][temperature]["n"] + result["by_temperature"][temperature]["judge_errors"] == 6
    greedy = [r["user_turn"] for r in result["rows"] if r["temperature"] == 0.0 and r["item_id"] == "0"]
    assert len(greedy) == 3 and len(set(greedy)) == 1
    rate = result["genuine_rate"]
    assert rate["n"] == 12 - result["judge_errors"]
    assert rate["low"] <= rate["rate"] <= rate["high"]
    genuine = result["labels"].get("genuine_followup", 0)
    assert rate["rate"] == pytest.approx(genuine / rate["n"] if rate["n"] else 0.0)
    with pytest.raises(ValueError, match=r"contexts\[0\]: must end with the assistant turn"):
        genuine_followup_rate(backend, tok, [CONVERSATION], LengthJudge())


@pytest.mark.slow
def test_recipe_runs_end_to_end_and_writes_before_and_after(tmp_path, shared_data):
    """A shrunken collab_sft_tiny: real and template data, held-out contexts disjoint, summary with intervals."""
    import train

    out = tmp_path / "run"
    status = train.main([
        "recipe=collab_sft_tiny", f"output_dir={out}", "dataset_limit=24", "num_train_epochs=1", "max_length=384",
        "eval.limit=3", "eval.temperatures=[0.0]", "eval.datasets=[gsm8k:" + f"{shared_data}/gsm8k/test.jsonl]",
    ])  # fmt: skip
    assert status == 0
    summary = json.loads((out / "eval_summary.json").read_text())
    for side in ("before", "after"):
        rate = summary[side]["genuine_rate"]
        # 3 items x eval.samples=4 (greedy: one decoded text, repeated, as `fic probe` writes it)
        assert rate["n"] == 12 and rate["n_items"] == 3 and rate["low"] <= rate["rate"] <= rate["high"]
    data = summary["data"]
    assert data["dropped_heldout_overlap"] == 0  # the 3 held-out GSM8K items were never made training contexts
    # contexts from GSM8K train, held-out items from GSM8K test: all 24 stay
    assert data["template"]["contexts"] == 24 and data["real"]["kept"] > 0
    assert (out / "model.safetensors").exists()
