#!/usr/bin/env python
"""The machine's speed at the start of `make reproduce`, so the run's minutes can be read against it.

The same 2-core machine has run the same commit's steps 1.3-1.8x apart on different days, so "within 90 minutes"
depends on the day. `measure()` times a fixed reference workload, a training step of SmolLM2-135M-Instruct (fp32,
forward, backward and AdamW on 4 rows of 256 random tokens, the shape of the parts' training steps at a quarter of
the tokens), in its own process, before any part runs; `summary.json` keeps it as `machine` and the report prints it.
Nothing is chosen from it.

    python reproduce/speed.py   # prints the measurement as JSON
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEPS = 4  # the first step warms the allocator and is not counted
SHAPE = (2, 256)


def _reference_step_seconds() -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    from fic.modeling import resolve_model_name

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_name("smollm2"), torch_dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, model.config.vocab_size, SHAPE, generator=torch.Generator().manual_seed(0))
    seconds = []
    for _ in range(STEPS):
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
    return seconds


def measure() -> dict:
    """{reference, step_seconds (median of the counted steps), steps, threads, cpus} from a fresh process."""
    code = "import json, speed; print(json.dumps(speed._reference_step_seconds()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    seconds = json.loads(done.stdout.strip().splitlines()[-1])
    return {"reference": f"SmolLM2-135M fp32 training step (forward, backward, AdamW) on {SHAPE[0]} x {SHAPE[1]} "
                         "random tokens, median of steps 2-4 in a fresh process",
            "step_seconds": round(statistics.median(seconds[1:]), 3), "steps": [round(s, 3) for s in seconds],
            "cpus": os.cpu_count()}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
