"""Each method's CPU recipe, a few optimizer steps on the real SmolLM2-135M-Instruct (`smollm2`): real weights, a
real ChatML template, real tokenizer offsets. About 7 minutes on 2 cores (collab SFT 280 s, follow-up RL 100 s,
VASD 45 s), which would push `make test` past its 20-minute budget, so they run only with FIC_REAL_RECIPES=1:
`FIC_REAL_RECIPES=1 pytest tests/test_recipes_smollm2.py`."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_reliability_eval import child_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("FIC_REAL_RECIPES"), reason="set FIC_REAL_RECIPES=1 (about 7 minutes)"),
]
ROOT = Path(__file__).resolve().parents[1]
COMMON = ["model_name_or_path=smollm2", "dtype=float32", "bf16=false", "report_to=none", "save_strategy=no",
          "eval.enabled=false", "logging_steps=1", "max_steps=2", "per_device_train_batch_size=2"]  # fmt: skip


def train(out: Path, *args: str, timeout: float = 900) -> str:
    """Run train.py on one process; its whole log (the Trainer prints one dict per logged step)."""
    command = [sys.executable, str(ROOT / "train.py"), *args, *COMMON, f"output_dir={out}"]
    env = {**child_env(), "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}  # a real model: use both cores
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def _losses(log: str, key: str = "loss") -> list[float]:
    values = []
    for line in log.splitlines():
        start = line.find("{'")
        if start != -1 and f"'{key}'" in line:
            try:
                entry = ast.literal_eval(line[start:])
            except (ValueError, SyntaxError):
                continue
            if key in entry:
                values.append(float(entry[key]))
    return values


def test_vasd_on_smollm2(tmp_path, shared_data):
    log = train(tmp_path / "vasd", "recipe=fic_llama3b", f"train_data=gsm8k:{shared_data / 'gsm8k' / 'train.jsonl'}",
                "use_vllm=false",
                "train_limit=4", "gradient_accumulation_steps=1", "lmbda=0.5", "single_turn_mix=0.5",
                "rollout_max_new_tokens=16", "max_completion_length=48", "warmup_steps=0")  # fmt: skip
    losses = _losses(log)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), log[-3000:]


def test_collab_sft_on_smollm2(tmp_path, shared_data):
    # dataset_limit=15: all of tests/data's HealthBench rows, 3 of them multi-turn conversations to train on
    log = train(tmp_path / "sft", "recipe=collab_sft_tiny", "dataset_limit=15", "followup_contexts=[]",
                "max_length=512", "learning_rate=1e-5", "warmup_steps=0")  # fmt: skip
    losses = _losses(log)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), log[-3000:]


def test_followup_rl_on_smollm2(tmp_path, shared_data):
    log = train(tmp_path / "rl", "recipe=followup_rl_tiny", "context_limit=4", "num_generations=2",
                "max_completion_length=16", "learning_rate=1e-6")  # fmt: skip
    rewards = _losses(log, "reward")
    assert len(rewards) == 2 and all(-1.0 <= r <= 1.0 for r in rewards), log[-3000:]
    # The recipe pays genuine 1.0 and every failure 0.0, and its judge never errs: the reward is the genuine share.
    assert rewards == pytest.approx(_losses(log, "followup/label_share/genuine_followup"), abs=1e-4), log[-3000:]
