"""A VASD step with its rollouts: the decode loop vs `model.generate`, and both vs the step without generation.

The step: LoRA student, `base` teacher, rows given as `shards` (the student answers every shard but the last itself,
greedily, one batched call per shard index), `lmbda: 0.5` (half of the responses sampled by the student in the
student view, the others from the dataset), `single_turn_mix: 0`. Measured three ways in one process, taking turns:

* `fast`: the rollouts through fic's generation path (`fic.trainers.vasd.rollout`, the decode loop of
  `fic.generation.decode`: one prefill per call, finished rows dropped, stop at the template's end of turn);
* `generate`: the same rollouts through `model.generate` and TRL's `_generate_single_turn` (VASD's path before it,
  kept as `Rollouts.backend = "generate"`);
* `precomputed`: the same step with the rollouts done beforehand (the shard replies written into a fixed `prompt`,
  the responses into `completion`, `lmbda: 0`): pure training;
* on CPU also `fast_one_thread`: `fast` with `rollout_cpu_threads: 1` (torch on one thread while decoding).

A random-init model ends a turn only by chance, where an instruct model's replies end at all lengths below the
limit. So that the rollouts do what they do with a real model, the head's end-of-turn row is raised (`end_bias`)
until greedy replies end after about half of `rollout_max_new_tokens` on average (printed as `mean_reply_tokens`).

Figures: `speedup_vs_generate` (step time, `generate` / `fast`; target >= 3 at the CPU size), `rollout_share`
(share of the `fast` step spent generating, wall clock), `onpolicy_over_offpolicy` (step time, `fast` /
`precomputed`), and on CPU `speedup_vs_generate_one_thread` (`generate` / `fast_one_thread`). Step times are CPU
time on CPU (see common.py), wall time on CUDA; `*_wall` figures are wall-clock (read the one-thread figure in wall
time: one thread also halves the CPU seconds per wall second, which flatters its CPU-time ratio).

The ceiling: `generation_forwards` (the forwards one `fast` step's rollouts make, counted in an extra untimed step),
`generation_matmul_floor_s_*` (the matrix products of exactly those forwards alone, timed on the model's weights;
on CPU on the default threads and on one) and `speedup_bound_wall` (`generate` step / (`precomputed` step + the
smaller floor), wall clock): what a decode loop making the same forwards would reach if they cost nothing beyond
their products.

    python benchmarks/vasd_onpolicy.py [--size smoke|cpu|gpu] [--repeats 3]
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import training  # noqa: E402

NAME = "vasd_onpolicy"


@dataclass
class Size:
    spec: training.Spec
    rollout_tokens: int  # rollout_max_new_tokens (shard replies)
    completion_tokens: int  # max_completion_length (on-policy responses) and dataset completions
    words_per_shard: int
    rows: int = 16
    grad_accum: int = 1  # gradient_accumulation_steps (all its rows are generated in one generation batch)


SIZES = {
    "smoke": Size(training.Spec(hidden=64, layers=2, vocab=0, batch=2, shards=3), 8, 8, 6, rows=4),
    "cpu": Size(training.Spec(hidden=256, layers=4, vocab=8192, batch=4, shards=4), 32, 32, 10),
    "gpu": Size(
        training.Spec(
            hidden=2048, layers=16, heads=32, intermediate=8192, vocab=128_256, batch=8, shards=5, dtype="bfloat16"
        ),
        128,
        256,
        24,
        rows=64,
    ),  # fmt: skip
}
KINDS = ("fast", "generate", "precomputed", "fast_one_thread")


def shard_rows(tokenizer, size: Size, seed: int) -> list[dict]:
    from fic.chat import full_view
    from fic.tiny import _WORDS

    rng = random.Random(seed)
    rows = []
    for _ in range(size.rows):
        shards = [
            " ".join(rng.choices(_WORDS, k=size.words_per_shard)).capitalize() + "." for _ in range(size.spec.shards)
        ]
        words: list[str] = []
        while len(tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]) < size.completion_tokens - 1:
            words += rng.choices(_WORDS, k=8)
        rows.append({"shards": shards, "teacher_prompt": full_view(" ".join(shards)), "completion": " ".join(words)})
    return rows


def set_end_bias(model, tokenizer, size: Size, prompts: list[list[int]], device: str) -> tuple[float, float]:
    """Raise the end-of-turn logit (a bias on the head) until greedy replies average about half the rollout limit.

    Returns the bias and the mean reply length it gives."""
    import torch

    from fic.generation.decode import decode

    eos = tokenizer.eos_token_id
    head = model.get_output_embeddings()
    if head.bias is None:
        head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0], device=head.weight.device,
                                                   dtype=head.weight.dtype), requires_grad=False)  # fmt: skip
    target = size.rollout_tokens / 2

    def mean_length(bias: float) -> float:
        with torch.no_grad():
            head.bias[eos] = bias
            out = decode(model, prompts, max_new_tokens=size.rollout_tokens, end_ids={eos}, pad_id=eos, keep_end=True)
        return sum(len(rows[0]) for rows in out) / len(out)

    lo, hi = 0.0, 64.0
    if mean_length(lo) <= target:
        return lo, mean_length(lo)
    for _ in range(12):  # bisection on the bias
        mid = (lo + hi) / 2
        if mean_length(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi, mean_length(hi)


def make_trainer(kind: str, path: str, size: Size, rows: list[dict], device: str, seed: int, bias: float):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback

    from fic.trainers.vasd import VASDConfig, VASDTrainer

    spec = size.spec
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = training.load_model(path, spec, device)
    if bias:
        import torch

        head = model.get_output_embeddings()
        head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0], device=head.weight.device,
                                                   dtype=head.weight.dtype), requires_grad=False)  # fmt: skip
        with torch.no_grad():
            head.bias[tokenizer.eos_token_id] = bias
    config = VASDConfig(
        **{**training.common_args(spec, device, seed), "gradient_accumulation_steps": size.grad_accum},
        teacher_mode="base", lmbda=0.0 if kind == "precomputed" else 0.5,
        single_turn_mix=0.0, beta=0.5, temperature=1.0, max_completion_length=size.completion_tokens,
        rollout_max_new_tokens=size.rollout_tokens, shuffle_dataset=False,
        rollout_cpu_threads=1 if kind == "fast_one_thread" else None,
    )  # fmt: skip
    trainer = VASDTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          peft_config=training.lora_config(spec))  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    if kind == "generate":
        trainer._rollouts.backend = "generate"
    return trainer


def precompute(trainer, rows: list[dict]) -> list[dict]:
    """The rows with the rollouts done: shard replies in a fixed `prompt`, on-policy responses as `completion`."""
    views = trainer.rollout_student_views([r["shards"] for r in rows])
    student_ids = [list(ids) for ids in trainer._tokenize_prompts(views)[0]]
    half = [i % 2 == 0 for i in range(len(rows))]  # lmbda 0.5: every other response sampled by the student
    sampled = trainer._rollouts.responses(student_ids, student_ids, ["student" if h else "data" for h in half])
    out = []
    for row, view, ids in zip(rows, views, sampled):
        text = trainer._tokenizer.decode(ids, skip_special_tokens=True) if ids is not None else row["completion"]
        out.append({"prompt": view, "teacher_prompt": row["teacher_prompt"], "completion": text or "."})
    return out


def generation_forwards(trainer) -> list[tuple[int, int]]:
    """`(rows, tokens fed)` of every forward the rollouts of one (untimed) `trainer` step make."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    shapes: list[tuple[int, int]] = []
    inside = [False]
    generate = trainer._rollouts.generate

    def flagged(*args, **kwargs):
        inside[0] = True
        try:
            return generate(*args, **kwargs)
        finally:
            inside[0] = False

    def record(module, args, kwargs):
        if inside[0]:
            shapes.append(tuple(kwargs["input_ids"].shape))

    trainer._rollouts.generate = flagged
    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        training.run_steps(trainer, 1)
    finally:
        handle.remove()
        trainer._rollouts.generate = generate
    return shapes


def matmul_floor_s(trainer, shapes: list[tuple[int, int]], device: str, repeats: int = 5) -> float:
    """Seconds the forwards of `shapes` spend in their weights' matrix products alone (each shape's fastest of
    `repeats`): the model's linear layers on `rows * tokens` inputs, the head on `rows` (the last position)."""
    import torch
    import torch.nn.functional as F

    model = trainer.accelerator.unwrap_model(trainer.model)
    weights = [(name, m.weight) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and "lora_" not in name]  # fmt: skip
    cost: dict[tuple[int, int], float] = {}
    with torch.no_grad():
        for shape in sorted(set(shapes)):
            inputs = [torch.randn(shape[0] * (1 if name.endswith("lm_head") else shape[1]), w.shape[1],
                                  dtype=w.dtype, device=w.device) for name, w in weights]  # fmt: skip
            best = float("inf")
            for _ in range(repeats):
                common.sync(device)
                start = time.perf_counter()
                for x, (_, w) in zip(inputs, weights):
                    F.linear(x, w)
                common.sync(device)
                best = min(best, time.perf_counter() - start)
            cost[shape] = best
    return sum(cost[s] for s in shapes)


def main(argv: list[str] | None = None) -> dict:
    args = common.parse(common.parser(__doc__, default_repeats=3), argv)
    size = SIZES[args.size]
    from transformers import AutoTokenizer

    path = training.build_model(size.spec, seed=args.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = shard_rows(tokenizer, size, args.seed)

    probe = make_trainer("fast", path, size, rows, args.device, args.seed, 0.0)
    from fic.chat import full_view

    first_shards = [list(ids) for ids in probe._tokenize_prompts([full_view(r["shards"][0]) for r in rows])[0]]
    bias, mean_reply = set_end_bias(probe.accelerator.unwrap_model(probe.model), tokenizer, size, first_shards,
                                    args.device)  # fmt: skip
    del probe
    trainers = {k: make_trainer(k, path, size, rows, args.device, args.seed, bias) for k in KINDS[:2]}
    pre_rows = precompute(trainers["fast"], rows)
    trainers["precomputed"] = make_trainer("precomputed", path, size, pre_rows, args.device, args.seed, bias)
    kinds = KINDS if args.device == "cpu" else KINDS[:3]
    if "fast_one_thread" in kinds:
        trainers["fast_one_thread"] = make_trainer("fast_one_thread", path, size, rows, args.device, args.seed, bias)

    # What any decode loop making these forwards could reach: the step if they cost only their matrix products.
    shapes = generation_forwards(trainers["fast"])
    floors = {"default": matmul_floor_s(trainers["fast"], shapes, args.device)}
    if args.device == "cpu":  # small products can run faster on one thread (see rollout_cpu_threads)
        from fic.trainers.vasd.rollout import _cpu_threads

        with _cpu_threads(1, "cpu"):
            floors["one_thread"] = matmul_floor_s(trainers["fast"], shapes, args.device)
    rollout_s = {k: [] for k in kinds}
    for kind, trainer in trainers.items():
        take = trainer._rollouts.take_seconds

        def recording(mode, _take=take, _kind=kind):
            seconds = _take(mode)
            rollout_s[_kind].append(seconds)
            return seconds

        trainer._rollouts.take_seconds = recording
    wall, cpu = training.timed_rounds(trainers, args.device, args.repeats, 1, max(1, args.warmup))
    times, clock = common.ratio_times(args.device, wall, cpu)
    t = {k: common.median(v) for k, v in times.items()}
    t_wall = {k: common.median(v) for k, v in wall.items()}
    warm = max(1, args.warmup)
    share = {k: common.median(rollout_s[k][warm:]) / t_wall[k] for k in ("fast", "generate")}
    figures = {
        "speedup_vs_generate": common.ratio(t["generate"], t["fast"]),
        "rollout_share": share["fast"],
        "onpolicy_over_offpolicy": common.ratio(t["fast"], t["precomputed"]),
        "speedup_vs_generate_wall": common.ratio(t_wall["generate"], t_wall["fast"]),
        "onpolicy_over_offpolicy_wall": common.ratio(t_wall["fast"], t_wall["precomputed"]),
        "generate_rollout_share": share["generate"],
        "mean_reply_tokens": mean_reply,
    }
    if "fast_one_thread" in kinds:
        figures["speedup_vs_generate_one_thread"] = common.ratio(t["generate"], t["fast_one_thread"])
        figures["speedup_vs_generate_one_thread_wall"] = common.ratio(t_wall["generate"], t_wall["fast_one_thread"])
    for kind in kinds:
        figures[f"{kind}_step_s"] = t_wall[kind]
    figures["generation_forwards"] = len(shapes)
    for threads, floor in floors.items():
        figures[f"generation_matmul_floor_s_{threads}"] = floor
    figures["speedup_bound_wall"] = common.ratio(t_wall["generate"], t_wall["precomputed"] + min(floors.values()))
    return common.emit(
        NAME, figures, args, spec=asdict(size.spec), rollout_tokens=size.rollout_tokens,
        completion_tokens=size.completion_tokens, words_per_shard=size.words_per_shard, rows=size.rows, grad_accum=size.grad_accum, lmbda=0.5,
        end_bias=bias, model=Path(path).name, clock=clock, seconds_wall=wall, seconds_cpu=cpu, rollout_seconds=rollout_s,
    )  # fmt: skip


if __name__ == "__main__":
    main()
