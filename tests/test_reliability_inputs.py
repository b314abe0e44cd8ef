"""Bad inputs end to end: each gives one clear error line or a counted skip, never a traceback from a library.

Unit-level checks live beside their modules (recipe mistakes: test_recipe.py; malformed data rows:
test_data_sources.py; missing chat template: test_chat.py; too-long probe contexts: test_probe.py). Here the same
mistakes go through the entry points users run (`train.py`, `fic probe`, `fic lic`, `fic eval-checkpoints`,
`resume_from_checkpoint`), plus damaged and partial checkpoints and models that are neither cached nor reachable.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fic import cli
from fic.tiny import tiny_model

BAD_ROWS = {
    "unknown role": ({"messages": [{"role": "user", "content": "Hi"}, {"role": "bot", "content": "Hello"}]},
                     "field 'messages[1].role' has unknown role 'bot'"),
    "empty content": ({"messages": [{"role": "user", "content": "   "}]}, "field 'messages[0].content' is empty"),
    "non-string content": ({"messages": [{"role": "user", "content": ["a"]}]},
                           "field 'messages[0].content' must be str"),
    "missing field": ({"id": "x"}, "field 'messages' is missing"),
}  # fmt: skip
GOOD_CONVERSATION = {"messages": [
    {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And times 3?"},
]}  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> str:
    return tiny_model("chatml")


def copy_model(tiny: str, dest: Path, damage=None) -> Path:
    shutil.copytree(tiny, dest)
    if damage:
        damage(dest)
    return dest


def truncate(name: str, keep: float = 0.5):
    def damage(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])

    return damage


def drop_template(folder: Path) -> None:
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def one_error_line(err: str) -> str:
    """The single `error: ...` line of a failed command; no traceback around it."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------- train.py (real processes)


@pytest.mark.slow
def test_train_py_model_or_dataset_offline_fails_with_one_line(tiny, tmp_path, shared_data):
    """A recipe naming a model, or a dataset, that is neither cached nor reachable: exit 1, one `error:` line naming
    it and how to point at a local copy (two processes side by side, with empty caches and the hub switched off)."""
    from test_reliability_eval import child_env, finish, start

    empty = tmp_path / "empty_cache"
    env = child_env(HF_HUB_CACHE=str(empty / "hub"), HF_DATASETS_CACHE=str(empty / "datasets"),
                    FIC_CACHE=str(empty / "fic"), FIC_SHARED_DATA=str(tmp_path / "no_shared_data"))  # fmt: skip
    base = [sys.executable, "train.py", "recipe=collab_sft_tiny", "followup_contexts=[]", "eval.datasets=[]", "eval.enabled=false",
            "max_steps=1", "report_to=none"]  # fmt: skip
    cases = {
        # readable data (the data are checked first, before any model loads), a model that is nowhere
        "model": [
            f"output_dir={tmp_path / 'o1'}",
            "model_name_or_path=some-org/not-cached-model",
            f"train_datasets=[mt_bench:{shared_data / 'mt_bench' / 'question.jsonl'}]",
        ],  # fmt: skip
        "dataset": [f"output_dir={tmp_path / 'o2'}", f"model_name_or_path={tiny}", "train_datasets=[mt_bench]"],
    }
    procs = {name: start([*base, *extra], tmp_path / f"{name}.log", env) for name, extra in cases.items()}
    results = {name: finish(proc) for name, proc in procs.items()}
    for name, (rc, log) in results.items():
        assert rc == 1, f"{name}: exit {rc}\n{log[-3000:]}"
    line = one_error_line(results["model"][1])
    assert "'some-org/not-cached-model'" in line and "model_name_or_path=PATH" in line and "HF_HUB_OFFLINE" in line
    line = one_error_line(results["dataset"][1])
    assert "'mt_bench'" in line and "HuggingFaceH4/mt_bench_prompts" in line and "'mt_bench:PATH'" in line


def test_training_on_a_tokenizer_without_chat_template_raises_the_user_error(tiny, tmp_path):
    """The masks are built inside `datasets.map`; the error must come out as `ChatTemplateError` (which train.py
    prints as one line), not wrapped in a library exception."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.chat import ChatTemplateError
    from fic.errors import USER_ERRORS
    from fic.trainers.collab_sft import CollabSFTConfig, CollabSFTTrainer

    folder = copy_model(tiny, tmp_path / "no_template", drop_template)
    args = CollabSFTConfig(output_dir=str(tmp_path / "out"), report_to="none", max_steps=1, bf16=False)
    with pytest.raises(ChatTemplateError, match="no chat template") as info:
        CollabSFTTrainer(model=AutoModelForCausalLM.from_pretrained(folder), args=args,
                         train_dataset=Dataset.from_list([GOOD_CONVERSATION]),
                         processing_class=AutoTokenizer.from_pretrained(folder))  # fmt: skip
    assert isinstance(info.value, USER_ERRORS)


# ---------------------------------------------------------------- fic commands (in process)


def test_fic_commands_on_models_that_cannot_load(tiny, tmp_path, capsys, shared_data):
    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    damaged = copy_model(tiny, tmp_path / "damaged", truncate("model.safetensors"))
    assert cli.main(["probe", "--model", str(damaged), "--datasets", gsm8k, "--limit", "1", "--judge", "heuristic",
                     "--out", str(tmp_path / "p")]) == 1  # fmt: skip
    line = one_error_line(capsys.readouterr().err)
    assert str(damaged) in line and "missing or damaged" in line and "SafetensorError" in line
    assert cli.main(["lic", "--model", "some-org/not-cached-model", "--limit", "1", "--out", str(tmp_path / "l")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "'some-org/not-cached-model'" in line and "--model PATH" in line
    no_template = copy_model(tiny, tmp_path / "no_template", drop_template)
    assert cli.main(["probe", "--model", str(no_template), "--datasets", gsm8k, "--limit", "1", "--response-tokens",
                     "4", "--judge", "heuristic", "--out", str(tmp_path / "t")]) == 1  # fmt: skip
    assert "no chat template" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_fic_probe_bad_rows_name_file_row_and_field(kind, tmp_path, capsys):
    row, message = BAD_ROWS[kind]
    path = write_jsonl(tmp_path / "conv.jsonl", [GOOD_CONVERSATION, row])
    assert cli.main(["probe", "--model", tiny_model("chatml"), "--datasets", f"conversations:{path}",
                     "--out", str(tmp_path / "p")]) == 1  # fmt: skip
    line = one_error_line(capsys.readouterr().err)
    assert "conv.jsonl row 2" in line and message in line


@pytest.mark.parametrize(
    "damage, cause",
    [(truncate("model.safetensors"), "SafetensorError"), (truncate("model.safetensors", 0.0), "SafetensorError"),
     (lambda f: (f / "model.safetensors").unlink(), "no file named"), (truncate("config.json"), "config")],
    ids=["truncated-weights", "empty-weights", "no-weights", "truncated-config"],
)  # fmt: skip
def test_load_model_on_a_damaged_folder_names_it(tiny, tmp_path, damage, cause):
    from fic.modeling import ModelLoadError, load_model

    folder = copy_model(tiny, tmp_path / "ckpt", damage)
    with pytest.raises(ModelLoadError) as info:
        load_model(str(folder))
    message = str(info.value)
    assert f"local folder {str(folder)!r}" in message and cause in message and "complete checkpoint" in message


def test_a_missing_recipe_output_names_the_recipe_that_writes_it(tmp_path, monkeypatch):
    """followup_rl_tiny starts from outputs/collab_sft_tiny: without it, say which recipe to run (not `hf download`)."""
    from fic.modeling import ModelLoadError, load_model, load_tokenizer

    monkeypatch.chdir(tmp_path)
    for load in (load_tokenizer, load_model):
        with pytest.raises(ModelLoadError) as info:
            load("outputs/collab_sft_tiny")
        message = str(info.value)
        assert "'outputs/collab_sft_tiny' does not exist" in message and "recipe=collab_sft_tiny" in message
        assert "hf download" not in message


# ---------------------------------------------------------------- damaged and partial checkpoints


def make_checkpoint(tiny: str, folder: Path, whole: bool = True) -> Path:
    """A checkpoint-N folder as the Trainer writes it (weights, optimizer, RNG state, trainer_state.json last)."""
    copy_model(tiny, folder)
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"python": 0}, folder / "rng_state.pth")
    if whole:
        step = int(folder.name.split("-")[1])
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return folder


def test_fic_eval_checkpoints_skips_damaged_and_partial_checkpoints(tiny, tmp_path, monkeypatch, capsys):

    run = tmp_path / "run"
    make_checkpoint(tiny, run / "checkpoint-2")
    truncate("model.safetensors")(make_checkpoint(tiny, run / "checkpoint-4"))
    make_checkpoint(tiny, run / "checkpoint-6", whole=False)  # a save cut off by a kill
    make_checkpoint(tiny, run / "checkpoint-8")
    evaluated = []

    def fake_probe(backend, tokenizer, config, out_dir, model_path, progress):
        from fic.generation import SamplingParams

        backend.generate(["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"], SamplingParams(max_new_tokens=2))
        evaluated.append(model_path.name)
        return {"probe/x/genuine_rate@t0": 0.5}

    monkeypatch.setattr("fic.eval.probe.evaluate", fake_probe)
    assert cli.main(["eval-checkpoints", str(run), "--datasets", "x"]) == 0
    out = capsys.readouterr().out
    assert evaluated == ["checkpoint-2", "checkpoint-8"]
    assert "evaluated 2 checkpoint(s): checkpoint-2, checkpoint-8" in out
    assert "skipped checkpoint-4: unreadable" in out and "SafetensorError" in out
    assert "skipped checkpoint-6: still being written" in out
    steps = [r["step"] for r in json.loads((run / "eval" / "comparison.json").read_text())["checkpoints"]]
    assert steps == [2, 8]


def test_resume_from_checkpoint_refuses_damaged_folders_and_auto_skips_them(tiny, tmp_path, caplog):
    from fic.recipe import RecipeError
    from fic.trainers.common import checkpoint_problem, resume_point

    out = tmp_path / "run"
    good = make_checkpoint(tiny, out / "checkpoint-10")
    weights = make_checkpoint(tiny, out / "checkpoint-20")
    truncate("model.safetensors")(weights)
    optimizer = make_checkpoint(tiny, out / "checkpoint-30")
    truncate("optimizer.pt")(optimizer)
    partial = make_checkpoint(tiny, out / "checkpoint-40", whole=False)
    assert checkpoint_problem(good) is None
    assert "model.safetensors is damaged" in checkpoint_problem(weights)
    assert "optimizer.pt is damaged" in checkpoint_problem(optimizer)
    assert "no trainer_state.json" in checkpoint_problem(partial)

    def args(value):
        return SimpleNamespace(resume_from_checkpoint=value, output_dir=str(out))

    for folder, why in [(weights, "model.safetensors is damaged"), (optimizer, "optimizer.pt"),
                        (partial, "no trainer_state.json")]:  # fmt: skip
        with pytest.raises(RecipeError, match=why) as info:
            resume_point(args(str(folder)))
        assert str(folder) in str(info.value) and "auto" in str(info.value)
    with pytest.raises(RecipeError, match="is not a checkpoint folder"):
        resume_point(args(str(out / "checkpoint-99")))
    caplog.set_level(logging.WARNING, logger="fic.trainers.common")
    assert resume_point(args("auto")) == str(good)
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 3 and all(name in " ".join(skipped) for name in ("-20", "-30", "-40"))
    shutil.rmtree(good)
    assert resume_point(args("auto")) is None  # nothing whole: start fresh rather than crash
    assert resume_point(args("false")) is None


# ---------------------------------------------------------------- conversations longer than the context


def test_collab_sft_warns_and_counts_conversations_longer_than_max_length(tiny, tmp_path, caplog):
    """TRL cuts conversations at `max_length` and drops those left without a trained token; the user must hear
    how many (a silent cut hides a data problem)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.trainers.collab_sft import CollabSFTConfig, CollabSFTTrainer

    long_answer = " ".join(["The answer is four, as two plus two is four."] * 20)
    conversations = [
        GOOD_CONVERSATION,  # fits
        {"messages": [*GOOD_CONVERSATION["messages"][:2], {"role": "user", "content": "Why? " + long_answer}]},
        {
            "messages": [
                GOOD_CONVERSATION["messages"][0],
                {"role": "assistant", "content": long_answer},
                {"role": "user", "content": "And times 3?"},
            ]
        },  # fmt: skip
    ]
    args = CollabSFTConfig(output_dir=str(tmp_path), max_length=64, report_to="none", max_steps=1, bf16=False,
                           per_device_train_batch_size=1)  # fmt: skip
    caplog.set_level(logging.WARNING)
    trainer = CollabSFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny), args=args,
                               train_dataset=Dataset.from_list(conversations),
                               processing_class=AutoTokenizer.from_pretrained(tiny))  # fmt: skip
    assert len(trainer.train_dataset) == 2  # the third lost its only trained turn to the cut
    said = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "max_length" in said, f"no warning about conversations cut at max_length; warnings: {said!r}"
    assert "2 " in said and "1 " in said, said
