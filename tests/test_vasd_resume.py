"""VASD resumes exactly: a run restarted from its step-2 checkpoint (`resume_from_checkpoint=auto`) has the losses and
weights of the uninterrupted run. The per-row single-turn / on-policy draws are a function of (seed, step, row), and
the sampling RNG is the Trainer's, saved in every checkpoint, so nothing of the draws lives outside the checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_reliability_eval import child_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def run(out: Path, shared_data: Path, *extra: str) -> None:
    command = [sys.executable, "train.py", "recipe=fic_llama3b", "model_name_or_path=tiny:llama3", "use_vllm=false",
               f"train_data=gsm8k:{shared_data / 'gsm8k' / 'train.jsonl'}", "train_limit=16", "max_steps=4",
               "per_device_train_batch_size=4", "gradient_accumulation_steps=1", "bf16=false", "dtype=float32",
               "report_to=none", "eval.enabled=false", "logging_steps=1", "save_strategy=steps", "save_steps=2",
               "lmbda=0.5", "single_turn_mix=0.5", "learning_rate=1e-3", "warmup_steps=0", "max_prompt_length=4096",
               "rollout_max_new_tokens=12", "max_completion_length=16", "temperature=1.0", f"output_dir={out}",
               "resume_from_checkpoint=auto", *extra]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]


def history(out: Path) -> list[tuple[int, float]]:
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    return [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]


def test_resumed_vasd_run_matches_the_uninterrupted_one(tmp_path, shared_data):
    from safetensors.torch import load_file

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run(whole, shared_data)
    # the run "killed" after its step-2 checkpoint: only that checkpoint is left in its output folder
    resumed.mkdir()
    shutil.copytree(whole / "checkpoint-2", resumed / "checkpoint-2")
    run(resumed, shared_data)
    a, b = history(whole), history(resumed)
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
    assert [x for _, x in b] == pytest.approx([x for _, x in a], rel=1e-6, abs=1e-9)
    wa, wb = load_file(str(whole / "adapter_model.safetensors")), load_file(str(resumed / "adapter_model.safetensors"))
    worst = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert worst <= 1e-6, f"final weights differ by up to {worst}"
