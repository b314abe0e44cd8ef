"""Cluster preemption: on SIGTERM, save a checkpoint at the end of the current step and stop cleanly.

Schedulers (SLURM, Kubernetes) send SIGTERM some time before killing a job. The handler only sets a flag; the
callback turns it into `should_save` + `should_training_stop` at the next step end, so the Trainer writes a normal
checkpoint (weights, optimizer, scheduler, RNG state) that `resume_from_checkpoint` picks up.
"""

from __future__ import annotations

import logging
import signal

import torch
import torch.distributed as dist
from accelerate import PartialState
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


# One process-wide flag: the handler is process-wide too, so every callback instance must see the same request.
_REQUESTED = {"signal": None}


def _handle(signum, frame) -> None:
    logger.warning("received signal %d: saving a checkpoint at the end of this step, then stopping", signum)
    _REQUESTED["signal"] = signum


class PreemptionCallback(TrainerCallback):
    """Save and stop at the next step end after SIGTERM (installed on every process)."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)):
        for sig in signals:
            signal.signal(sig, _handle)

    @property
    def requested(self) -> bool:
        return _REQUESTED["signal"] is not None

    def on_step_end(self, args, state, control, **kwargs):
        if agreed(self.requested):
            control.should_save = True
            control.should_training_stop = True
        return control


def agreed(requested: bool) -> bool:
    """Whether any process was asked to stop, agreed by all of them (one all-reduce per step when there are several).

    Schedulers signal the processes of a job one by one: a rank that saved and stopped on its own signal would leave
    the others waiting in their next step's gradient all-reduce (or in the save's own collectives) until they time
    out. All ranks stop at the same step end instead, and save the same checkpoint together.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return requested
    flag = torch.tensor([1 if requested else 0], dtype=torch.int32, device=PartialState().device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
