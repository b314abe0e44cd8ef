"""A VASD training step vs an SFT step on the same batch and model.

VASD (`fic.trainers.vasd.VASDTrainer`): off-policy (the dataset's completions), teacher `base` (the same LoRA model
with its adapter disabled: one extra forward without gradient on the teacher view), token-level generalised JSD
(beta 0.5) from the chunked divergence. SFT: TRL's `SFTTrainer` on the student view and the same completions
(completion-only loss). Both: the same random-init Llama, LoRA r=16 on all linear layers, AdamW, one micro-batch per
step, no gradient checkpointing. See benchmarks/training.py for the shared setup and how steps are timed.

Figures: `time_ratio` = median VASD step / median SFT step, the two trainers taking turns in one process, in CPU
time on CPU (see common.py; `time_ratio_wall` is wall-clock) (target <= 1.35: one extra forward without gradient
costs about a third of a training step); `peak_mem_ratio` = VASD / SFT
peak memory of building the trainer and running a few steps, each in a fresh process (model weights included;
target <= 1.10).

    python benchmarks/vasd_vs_sft.py [--size smoke|cpu|gpu] [--repeats 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import training  # noqa: E402

NAME = "vasd_vs_sft"
SIZES = {
    "smoke": training.Spec(hidden=64, layers=2, batch=2, prompt_tokens=48, completion_tokens=16),
    "cpu": training.Spec(hidden=256, layers=4, vocab=8192, batch=4, prompt_tokens=128, completion_tokens=64),
    "gpu": training.Spec(
        hidden=2048,
        layers=16,
        heads=32,
        intermediate=8192,
        vocab=128_256,
        batch=8,
        prompt_tokens=512,
        completion_tokens=256,
        dtype="bfloat16",
    ),  # fmt: skip
}
KINDS = ("vasd", "sft")


def main(argv: list[str] | None = None) -> dict:
    c = training.compare(__file__, __doc__, SIZES, KINDS, argv)
    if not isinstance(c, training.Comparison):
        return c  # a memory worker's result
    figures = {
        "time_ratio": common.ratio(c.times["vasd"], c.times["sft"]),
        "time_ratio_wall": common.ratio(c.wall["vasd"], c.wall["sft"]),
        "peak_mem_ratio": common.ratio(c.mem["vasd"]["peak_bytes"], c.mem["sft"]["peak_bytes"]),
        "step_peak_mem_ratio": common.ratio(c.mem["vasd"]["step_peak_bytes"], c.mem["sft"]["step_peak_bytes"]),
        "vasd_step_s": c.wall["vasd"],
        "sft_step_s": c.wall["sft"],
        "vasd_peak_mib": c.mem["vasd"]["peak_bytes"] / 2**20,
        "sft_peak_mib": c.mem["sft"]["peak_bytes"] / 2**20,
    }
    return c.emit(NAME, figures)


if __name__ == "__main__":
    main()
