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
STEPS_PER_ROUND = 1
MEMORY_STEPS = 2


def main(argv: list[str] | None = None) -> dict:
    args = common.parse(common.parser(__doc__, default_repeats=4), argv)
    spec = SIZES[args.size]
    if args.worker:
        training.import_training_stack()
    from transformers import AutoTokenizer

    path = training.build_model(spec, seed=args.seed)
    examples = training.make_examples(AutoTokenizer.from_pretrained(path), spec, 64, seed=args.seed)
    if args.worker:
        return common.worker_result(
            **training.memory_worker(args.worker, path, spec, examples, args.device, args.seed, MEMORY_STEPS)
        )

    mem = {k: common.run_worker(__file__, k, args) for k in KINDS}
    trainers = {k: training.make_trainer(k, path, spec, examples, args.device, args.seed) for k in KINDS}
    wall, cpu = training.timed_rounds(trainers, args.device, args.repeats, STEPS_PER_ROUND, max(1, args.warmup))
    times, clock = common.ratio_times(args.device, wall, cpu)
    t = {k: common.median(v) for k, v in times.items()}
    t_wall = {k: common.median(v) for k, v in wall.items()}
    figures = {
        "time_ratio": common.ratio(t["vasd"], t["sft"]),
        "time_ratio_wall": common.ratio(t_wall["vasd"], t_wall["sft"]),
        "peak_mem_ratio": common.ratio(mem["vasd"]["peak_bytes"], mem["sft"]["peak_bytes"]),
        "step_peak_mem_ratio": common.ratio(mem["vasd"]["step_peak_bytes"], mem["sft"]["step_peak_bytes"]),
        "vasd_step_s": t_wall["vasd"],
        "sft_step_s": t_wall["sft"],
        "vasd_peak_mib": mem["vasd"]["peak_bytes"] / 2**20,
        "sft_peak_mib": mem["sft"]["peak_bytes"] / 2**20,
    }
    return common.emit(
        NAME, figures, args, **training.spec_settings(spec), model=Path(path).name, memory_steps=MEMORY_STEPS,
        steps_per_round=STEPS_PER_ROUND, memory_method=mem["vasd"]["method"], clock=clock, seconds_wall=wall, seconds_cpu=cpu,
    )  # fmt: skip


if __name__ == "__main__":
    main()
