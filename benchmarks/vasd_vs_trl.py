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
    figures = {}
    for trl_kind in ("sdft", "distill"):
        figures[f"time_ratio_{trl_kind}"] = common.ratio(t["vasd"], t[trl_kind])
        figures[f"time_ratio_{trl_kind}_wall"] = common.ratio(t_wall["vasd"], t_wall[trl_kind])
        figures[f"peak_mem_ratio_{trl_kind}"] = common.ratio(mem["vasd"]["peak_bytes"], mem[trl_kind]["peak_bytes"])
    for kind in KINDS:
        figures[f"{kind}_step_s"] = t_wall[kind]
    for kind in KINDS:
        figures[f"{kind}_peak_mib"] = mem[kind]["peak_bytes"] / 2**20
    return common.emit(
        NAME, figures, args, **training.spec_settings(spec), model=Path(path).name, memory_steps=MEMORY_STEPS,
        steps_per_round=STEPS_PER_ROUND, memory_method=mem["vasd"]["method"], clock=clock, seconds_wall=wall, seconds_cpu=cpu,
        step_peak_mib={k: mem[k]["step_peak_bytes"] / 2**20 for k in KINDS},
    )  # fmt: skip


if __name__ == "__main__":
    main()
