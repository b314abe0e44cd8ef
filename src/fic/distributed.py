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
    if any(os.environ.get(k, "").lower() == "true" for k in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")):
        return False  # accelerate would then drop DeepSpeed / FSDP; see cpu_backend_overrides
    import torch

    if torch.cuda.is_available():
        return False
    os.environ["ACCELERATE_USE_CPU"] = "true"
    return True


def cpu_backend_overrides(overrides: list[str]) -> list[str]:
    """Recipe overrides that make DeepSpeed or FSDP processes on a machine without CUDA one gloo group.

    Under `distributed_type: DEEPSPEED` or `FSDP` accelerate finds no backend on a GPU-less machine and makes every
    process a lone main process (each iterates the whole dataloader). Passing `ddp_backend=gloo` (the Trainer hands it
    to accelerate) gives it one; DeepSpeed also needs its CPU accelerator (`DS_ACCELERATOR=cpu`, set here).
    Returns the overrides to add (none when the user set `ddp_backend` or the launch is not such a one)."""
    kinds = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not any(os.environ.get(k, "").lower() == "true" for k in kinds):
        return []
    import torch

    if torch.cuda.is_available():
        return []
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if any(o.startswith("ddp_backend=") for o in overrides):
        return []
    return ["ddp_backend=gloo"]


def rank_slice(n: int) -> slice:
    """This process's contiguous share of `n` items (all of them in a single process)."""
    from accelerate import PartialState

    state = PartialState()
    k, r = state.num_processes, state.process_index
    return slice(n * r // k, n * (r + 1) // k)


def map_across_ranks(fn, items: list) -> list:
    """`fn(items)` computed once over all processes: each rank maps its contiguous share, every rank gets the
    concatenation, in the order of `items`.

    `fn` maps a list to a list (one result per item, or fewer: it may drop items, as long as it keeps their order).
    Every rank must call this at the same point, with the same `items`: it ends in one `gather_object`. Used for the
    work before training that would otherwise run once per rank (model answers to contexts) or on the main process
    while the others wait at their first collective (the evaluation before training, bounded by `ddp_timeout`).
    """
    from accelerate import PartialState

    state = PartialState()
    if state.num_processes <= 1:
        return list(fn(list(items)))
    from accelerate.utils import gather_object

    share = list(items)[rank_slice(len(items))]
    local = list(fn(share)) if share else []
    parts = gather_object([local])  # one entry per rank, in rank order
    return [x for part in parts for x in part]
