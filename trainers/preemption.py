"""Cluster preemption: on SIGTERM, save a checkpoint at the end of the current step and stop cleanly.

Schedulers (SLURM, Kubernetes) send SIGTERM some time before killing a job. The handler only sets a flag; the
callback turns it into `should_save` + `should_training_stop` at the next step end, so the Trainer writes a normal
checkpoint (weights, optimizer, scheduler, RNG state) that `resume_from_checkpoint` picks up.
"""

from __future__ import annotations

import logging
import signal

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class PreemptionCallback(TrainerCallback):
    """Save and stop at the next step end after SIGTERM (installed on every process)."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)):
        self.requested = False
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        logger.warning("received signal %d: saving a checkpoint at the end of this step, then stopping", signum)
        self.requested = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control
