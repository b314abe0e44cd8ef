"""`train.py --plan`, dataset splits, overrides in the Trainer's own spelling, and the recipe fixes they showed."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from fic.data.records import DataError
from fic.data.splits import check_training_split, file_split, spec_split, split_spec
from fic.recipe import load_raw

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))


def plan(*args: str, in_process: bool = True) -> subprocess.CompletedProcess:
    """`train.py ARGS --plan`: in this process (`train.main`, seconds) or, `in_process=False`, as a command."""
    if not in_process:
        from test_reliability_eval import child_env

        command = [sys.executable, "train.py", *args, "--plan"]
        return subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=240)
    import train

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train.main([*args, "--plan"])
    return subprocess.CompletedProcess(["train.py", *args, "--plan"], code, out.getvalue(), err.getvalue())


def test_specs_name_their_split():
    assert split_spec("gsm8k@train") == ("gsm8k", "train")
    assert split_spec("gsm8k:/a/b@c/test.jsonl") == ("gsm8k:/a/b@c/test.jsonl", None)
    assert file_split("/x/train.jsonl") == "train" and file_split("IFBench_test.jsonl") == "test"
    assert file_split("dev_light.json") == "validation" and file_split("question.jsonl") is None
    assert spec_split("gsm8k") == "test"  # the source's default, for evaluation
    assert spec_split("gsm8k", training=True) == "train"  # `gsm8k` for training means the train split
    assert spec_split("gsm8k@test", training=True) == "test"
    assert spec_split("healthbench", training=True) is None  # one file, no splits


def test_training_on_a_test_split_is_an_error_unless_forced():
    with pytest.raises(DataError, match="train_data: 'gsm8k:/d/test.jsonl' reads the test split.*train_on_test"):
        check_training_split("train_data", "gsm8k:/d/test.jsonl")
    with pytest.raises(DataError, match="test split"):
        check_training_split("contexts", "gsm8k@test")
    assert check_training_split("train_data", "gsm8k:/d/test.jsonl", allow_test=True) == "test"
    assert check_training_split("train_data", "gsm8k") == "train"


def test_vasd_rows_refuse_the_test_split_and_drop_calculator_annotations(shared_data):
    from fic.trainers.vasd.recipe import dataset_rows, reference_completion

    assert reference_completion("Natalia sold 48/2 = <<48/2=24>>24 clips.") == "Natalia sold 48/2 = 24 clips."
    with pytest.raises(DataError, match="test split"):
        dataset_rows(f"gsm8k:{shared_data}/gsm8k/test.jsonl", limit=2)
    rows = dataset_rows(f"gsm8k:{shared_data}/gsm8k/train.jsonl", limit=20)
    texts = [row["completion"][0]["content"] for row in rows]
    assert texts and not any("<<" in t or ">>" in t for t in texts)
    assert any("#### " in t for t in texts)  # the final answer line stays


@pytest.mark.parametrize("key", ["save_strategy", "eval_strategy"])
def test_no_is_read_as_the_string_no(key):
    raw = load_raw("fic_tiny", [f"{key}=no", "report_to=none", "use_cpu=no", "learning_rate=1e-5"], ROOT / "recipes")
    assert raw[key] == "no" and raw["report_to"] == "none" and raw["learning_rate"] == 1e-5


def test_trainer_spelling_parses_into_the_trainer_args(tmp_path):
    import train

    recipe, _ = train.load(["recipe=fic_tiny", "save_strategy=no", "eval_strategy=no", "report_to=none",
                            "use_cpu=off", f"output_dir={tmp_path}"])  # fmt: skip
    from fic.trainers.vasd import VASDConfig

    args = recipe.get(VASDConfig)
    assert str(args.save_strategy.value) == "no" and str(args.eval_strategy.value) == "no"
    assert args.report_to in ([], "none", ["none"]) and args.use_cpu is False


def test_yaml_no_in_a_recipe_file_is_a_string(tmp_path):
    (tmp_path / "r.yaml").write_text("method: vasd\nsave_strategy: no\nuse_cpu: yes\n")
    raw = load_raw(str(tmp_path / "r.yaml"), [], tmp_path)
    assert raw["save_strategy"] == "no" and raw["use_cpu"] == "yes"


def test_pure_bf16_adamw_is_refused():
    from types import SimpleNamespace

    import torch

    from fic.recipe import RecipeError
    from fic.trainers.common import check_master_weights

    model = torch.nn.Linear(4, 4).to(torch.bfloat16)
    with pytest.raises(RecipeError, match="dtype=float32 with bf16=true"):
        check_master_weights(model, SimpleNamespace(deepspeed=None), peft=False)
    check_master_weights(model, SimpleNamespace(deepspeed=None), peft=True)  # LoRA adapters are fp32
    check_master_weights(torch.nn.Linear(4, 4), SimpleNamespace(deepspeed=None), peft=False)


def test_chat_template_kwargs_reach_every_rendering(tmp_path):
    from transformers import AutoTokenizer

    from fic.chat import render, role_prefix, set_template_kwargs
    from fic.tiny import tiny_model

    tok = AutoTokenizer.from_pretrained(tiny_model("chatml"))
    tok.chat_template = "{% if enable_thinking is defined and not enable_thinking %}NOTHINK{% endif %}" + (
        tok.chat_template
    )
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert "NOTHINK" not in render(tok, messages)
    set_template_kwargs(tok, {"enable_thinking": False})
    assert render(tok, messages).startswith("NOTHINK")
    assert role_prefix(tok, messages, "user").startswith("NOTHINK")
    tok.save_pretrained(tmp_path)  # a checkpoint's tokenizer keeps them
    assert render(AutoTokenizer.from_pretrained(tmp_path), messages).startswith("NOTHINK")


def test_gpu_recipes_set_thinking_and_fp32_master_weights():
    for name in ("collab_sft_qwen2b", "followup_rl_qwen2b"):
        raw = load_raw(name, [], ROOT / "recipes")
        assert raw["chat_template_kwargs"] == {"enable_thinking": False}
        assert raw["dtype"] == "float32" and raw["bf16"] is True


@pytest.mark.parametrize("name", RECIPES)
def test_plan_runs_for_every_recipe(name, shared_data):
    done = plan(f"recipe={name}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "optimizer steps" in done.stdout and "Traceback" not in done.stderr
    assert "datasets:" in done.stdout


def test_plan_refuses_training_on_the_evaluation_data(shared_data):
    test = shared_data / "gsm8k" / "test.jsonl"
    done = plan("recipe=fic_llama3b", f"train_data=gsm8k:{test}", f"eval.lic.data=gsm8k:{test}", "train_on_test=true",
                in_process=False)  # the command itself: exit status 1 and one line, no traceback  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "overlaps" in done.stderr and "train_data=" in done.stderr and "eval.lic.data=" in done.stderr
    assert "Traceback" not in done.stderr
    done = plan("recipe=fic_llama3b", f"train_data=gsm8k:{test}", f"eval.lic.data=gsm8k:{test}")
    assert done.returncode == 1 and "overlaps" in done.stderr and "Traceback" not in done.stderr
    train = shared_data / "gsm8k" / "train.jsonl"
    done = plan("recipe=fic_llama3b", f"train_data=gsm8k:{test}", f"eval.lic.data=gsm8k:{train}")
    assert done.returncode == 1 and "reads the test split" in done.stderr  # train_on_test is not set


def test_plan_of_fic_llama3b_on_train_and_test(shared_data):
    data = shared_data / "gsm8k"
    done = plan("recipe=fic_llama3b", f"train_data=gsm8k:{data / 'train.jsonl'}",
                f"eval.lic.data=gsm8k:{data / 'test.jsonl'}", "save_steps=1", "--processes", "8")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    # 64 problems (tests/data), all with two shards or more; 32 per step; 2 epochs
    assert "optimizer steps: 4\n" in out
    assert "examples per optimizer step: 32" in out
    assert "saves: 4 at steps [1, 2, 3, 4]" in out
    assert "in-training evaluations (probe, lic): 2 at steps [2, 4]" in out  # every second save
    assert "longest student prompt" in out and "WARNING" not in out.split("longest student prompt")[1].split("\n")[0]
    assert "split=train 64 rows" in out and "split=test 51 rows" in out  # all rows: the recipe's limits are larger


def test_plan_prints_each_evaluations_minutes_and_the_ones_past_ddp_timeout(shared_data):
    """The cost model of `fic.trainers.plan_cost` on the real recipes: 200 HealthBench + 200 Coval contexts x 13 user
    turns x 256 tokens after follow-up RL is 1,331,200 tokens; at the assumed 250 tokens/s per process that is ~12.7
    min on 7 processes and ~44 min on 2, past the 30-minute ddp_timeout."""
    done = plan("recipe=followup_rl_qwen2b", "--processes", "7")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "evaluation time (assumed 250 generated tokens/s per process" in done.stdout
    assert "held-out rate after training: 1331200 tokens, ~12.7 min" in done.stdout
    assert "held-out rate before training: 1536000 tokens, ~14.6 min" in done.stdout  # + 400 answers x 512 tokens
    assert "ddp_timeout" not in done.stdout
    two = plan("recipe=followup_rl_qwen2b", "--processes", "2").stdout
    assert "held-out rate after training: 1331200 tokens, ~44.4 min" in two
    assert ("warning: the held-out rate evaluation after training (~44 min) would pass ddp_timeout (30 min): set "
            "ddp_timeout=5324 or lower eval.limit / eval.samples") in two  # fmt: skip
    assert "warning" not in plan("recipe=followup_rl_qwen2b", "--processes", "2", "ddp_timeout=7200").stdout
    slow = plan("recipe=followup_rl_qwen2b", "--processes", "7", "--tokens-per-second", "100").stdout
    assert "~31.7 min" in slow and "would pass ddp_timeout" in slow
    bad = plan("recipe=followup_rl_qwen2b", "--tokens-per-second", "fast")
    assert bad.returncode == 1 and "--tokens-per-second: 'fast'" in bad.stderr


def test_plan_minutes_of_the_in_training_probe_and_lic_of_fic_llama3b(shared_data):
    data = shared_data / "gsm8k"
    done = plan("recipe=fic_llama3b", f"train_data=gsm8k:{data / 'train.jsonl'}",
                f"eval.lic.data=gsm8k:{data / 'test.jsonl'}", "save_steps=1", "--processes", "8")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    probe = next(line for line in lines if line.startswith("  probe at each of 2 checkpoints"))
    assert probe.startswith("  probe at each of 2 checkpoints: 35200 tokens")  # 50 x 3 x 64 + 50 answers x 512
    lic = next(line for line in lines if line.startswith("  lic at each of 2 checkpoints"))
    tokens = int(lic.split(": ")[1].split()[0])
    assert 51 * 3 * 512 < tokens < 51 * 14 * 512  # FULL and CONCAT one answer each, SHARDED one per shard
    assert "held-out rate" not in done.stdout  # VASD measures nothing before and after outside its checkpoints
