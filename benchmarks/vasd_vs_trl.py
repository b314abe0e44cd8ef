"""VASD vs TRL's `SDFTTrainer` and `DistillationTrainer`, configured for the same job.

The job: distil a frozen base teacher's next-token distributions into a LoRA student on the same completions, with
the generalised JSD (beta 0.5) over the full vocabulary, at a 128,256-token vocabulary (Llama-3's).

* VASD (`fic.trainers.vasd.VASDTrainer`): off-policy, teacher `base` (the LoRA model with its adapter disabled),
  teacher view = the single-turn prompt; the chunked divergence (logits never materialised).
* `trl.experimental.sdft.SDFTTrainer`: `teacher_model_kind="base"` (adapter disabled, as VASD),
  `distillation_mode="full_logits"`, `distillation_alpha=0.5`, no importance-sampling clip, one generation per
  prompt; its teacher sees the student prompt plus the single-turn prompt as privileged context.
* `trl.DistillationTrainer`: the student with LoRA and a separate frozen copy of the base as `teacher_model` (it
  takes no adapter-disabled teacher), `beta=0.5`; TRL's chunked divergence, the same kernel as VASD's.

The TRL trainers sample their completions on-policy; here their generation returns the dataset's completion ids
(see benchmarks/training.py), so all three train on identical rollouts and the step measured is everything else.

Figures (VASD / TRL): `time_ratio_sdft`, `peak_mem_ratio_sdft`, `time_ratio_distill`, `peak_mem_ratio_distill`.
Target: time ratios <= 1 (no slower) and peak-memory ratios < 1. Times: median step, the trainers taking turns in
one process, CPU time on CPU (see common.py; `*_wall` figures are wall-clock); peak memory: building the trainer and a few steps, each in a fresh process, weights included.

    python benchmarks/vasd_vs_trl.py [--size smoke|cpu|gpu] [--repeats 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import training  # noqa: E402

NAME = "vasd_vs_trl"
SIZES = {
    "smoke": training.Spec(hidden=64, layers=2, vocab=8192, batch=2, prompt_tokens=48, completion_tokens=16),
    "cpu": training.Spec(hidden=128, layers=2, vocab=128_256, batch=4, prompt_tokens=128, completion_tokens=32),
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
KINDS = ("vasd", "sdft", "distill")


def main(argv: list[str] | None = None) -> dict:
    c = training.compare(__file__, __doc__, SIZES, KINDS, argv)
    if not isinstance(c, training.Comparison):
        return c  # a memory worker's result
    figures = {}
    for trl_kind in ("sdft", "distill"):
        figures[f"time_ratio_{trl_kind}"] = common.ratio(c.times["vasd"], c.times[trl_kind])
        figures[f"time_ratio_{trl_kind}_wall"] = common.ratio(c.wall["vasd"], c.wall[trl_kind])
        figures[f"peak_mem_ratio_{trl_kind}"] = common.ratio(
            c.mem["vasd"]["peak_bytes"], c.mem[trl_kind]["peak_bytes"]
        )
    for kind in KINDS:
        figures[f"{kind}_step_s"] = c.wall[kind]
    for kind in KINDS:
        figures[f"{kind}_peak_mib"] = c.mem[kind]["peak_bytes"] / 2**20
    return c.emit(NAME, figures, step_peak_mib={k: c.mem[k]["step_peak_bytes"] / 2**20 for k in KINDS})


if __name__ == "__main__":
    main()
