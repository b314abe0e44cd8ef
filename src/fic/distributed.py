"""Multi-process runs on machines without a GPU (tests, CPU clusters).

`accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes N` starts N processes through
torchrun. Without CUDA, accelerate would treat each of them as a lone process unless told to use the CPU; this sets
`ACCELERATE_USE_CPU` for such launches so the N processes form one gloo group (rank, world size, barriers).
"""

from __future__ import annotations

import os


def use_cpu_group_without_gpu() -> bool:
    """Set `ACCELERATE_USE_CPU=true` when launched with several processes and no CUDA device. Returns whether it did."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "ACCELERATE_USE_CPU" in os.environ:
        return False
    import torch

    if torch.cuda.is_available():
        return False
    os.environ["ACCELERATE_USE_CPU"] = "true"
    return True
