"""Chunked generalised JSD (`fic.losses.chunked_generalized_jsd`) vs the full-logit reference.

One loss step on response tokens, forward and backward, as VASD runs it with LoRA: student and teacher hidden
states `(N, H)`, one frozen `lm_head` weight `(V, H)` (the `base` teacher shares the student's head), the gradient
flowing to the student's hidden states.

* full: `logits = hidden @ W.T` for both (the teacher's under no_grad), then `fic.losses.generalized_jsd` on the
  `(N, V)` logits, then backward: what one writes without the chunked path.
* chunked: `chunked_generalized_jsd(student_hidden, W, teacher_hidden, W)`: TRL's `ChunkedDivergenceFunction`,
  32768-wide vocabulary tiles with online logsumexp, recomputed in the backward; the logits never exist.

Figures: `peak_mem_ratio` = chunked / full peak memory of the step above its inputs (target <= 0.125 at V=128,256,
N=4,096), `time_ratio` = chunked / full time (target <= 1.2), `max_abs_diff` = the larger of the losses' and the
hidden-state gradients' absolute differences (target <= 1e-5; fp32). Memory comes from a fresh process per variant
(CUDA allocator peak, or the resident-set high-water mark on CPU); times from the variants interleaved in one
process (CPU time on CPU, see common.py; `time_ratio_wall` is the wall-clock ratio). `peak_mem_ratio_rows64` / `time_ratio_rows64` are the chunked path with `token_chunk_size=64`: on CPU TRL's kernel
has no Triton and folds each `[rows x 32768]` tile with torch ops holding about eight tile-sized temporaries, so
fewer rows per call bound its peak. Sizes: `smoke` V=8192 N=64; `cpu` V=128,256 N=256 H=256 (the full reference
at N=4,096 needs about 15 GB on CPU); `gpu` V=128,256 N=4,096 H=2,048. `--tokens/--vocab/--hidden` override them.

    python benchmarks/chunked_divergence.py [--size smoke|cpu|gpu] [--tokens 4096]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "chunked_divergence"
SIZES = {
    "smoke": dict(vocab=8192, tokens=64, hidden=64),
    "cpu": dict(vocab=128_256, tokens=256, hidden=256),
    "gpu": dict(vocab=128_256, tokens=4096, hidden=2048),
}
BETA = 0.5


def make_inputs(vocab: int, tokens: int, hidden: int, device: str, seed: int):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    # Scaled like a trained model's final hidden states and head: logits of order 1-10.
    weight = (torch.randn(vocab, hidden, generator=g) / hidden**0.5).to(device)
    student = (torch.randn(tokens, hidden, generator=g) * 2).to(device).requires_grad_(True)
    teacher = (student.detach() + 0.5 * torch.randn(tokens, hidden, generator=g).to(device)).contiguous()
    return student, teacher, weight


def full_step(student, teacher, weight):
    import torch

    from fic.losses import generalized_jsd

    student.grad = None
    logits_s = student @ weight.t()
    with torch.no_grad():
        logits_t = teacher @ weight.t()
    loss = generalized_jsd(logits_s, logits_t, beta=BETA)
    loss.backward()
    return loss.detach(), student.grad


def chunked_step(student, teacher, weight, token_chunk_size=None):
    from fic.losses import chunked_generalized_jsd

    student.grad = None
    out = chunked_generalized_jsd(student, weight, teacher, weight, beta=BETA, token_chunk_size=token_chunk_size)
    out.loss.backward()
    return out.loss.detach(), student.grad


def chunked_rows_step(student, teacher, weight):
    return chunked_step(student, teacher, weight, token_chunk_size=SMALL_ROWS)


# Without Triton (CPU), TRL's kernel folds each [rows x 32768] tile with torch ops that hold about eight fp32
# temporaries of the tile's size, so its peak grows with the rows per call (default 4096). `chunked_rows` caps them.
SMALL_ROWS = 64
STEPS = {"full": full_step, "chunked": chunked_step, "chunked_rows": chunked_rows_step}


def shape_of(args) -> dict:
    s = dict(SIZES[args.size])
    for key in ("vocab", "tokens", "hidden"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    return s


def worker(args) -> None:
    """One variant in this fresh process: its step's peak memory above the inputs."""
    import torch
    import trl.kernels.chunked_divergence  # noqa: F401  (imported here: its import is not the step's memory)

    import fic.losses  # noqa: F401

    s = shape_of(args)
    mem = common.PeakMemory(args.device).start()
    student, teacher, weight = make_inputs(s["vocab"], s["tokens"], s["hidden"], args.device, args.seed)
    step = STEPS[args.worker]
    step(student, teacher, weight)  # warm-up: one-time allocations are not the step's
    student.grad = None
    mem.mark()
    step(student, teacher, weight)
    if mem.cuda:
        torch.cuda.synchronize()
    common.worker_result(step_peak_bytes=mem.step_peak(), peak_bytes=mem.peak(), method=mem.method())


def main(argv: list[str] | None = None) -> dict:
    p = common.parser(__doc__, default_repeats=3)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    args = common.parse(p, argv)
    if args.worker:
        return worker(args)
    s = shape_of(args)
    overrides = [f"--{k}={s[k]}" for k in ("vocab", "tokens", "hidden")]
    mem = {k: common.run_worker(__file__, k, args, overrides) for k in STEPS}

    student, teacher, weight = make_inputs(s["vocab"], s["tokens"], s["hidden"], args.device, args.seed)
    results = {}

    def run(key):
        def go():
            loss, grad = STEPS[key](student, teacher, weight)
            results[key] = (loss.clone(), grad.clone())

        return go

    cpu: dict[str, list[float]] = {}
    wall = common.interleaved_times({k: run(k) for k in STEPS}, args.repeats, args.warmup, args.device, cpu)
    times, clock = common.ratio_times(args.device, wall, cpu)
    (loss_f, grad_f) = results["full"]
    loss_diff = max((loss_f - results[k][0]).abs().item() for k in ("chunked", "chunked_rows"))
    grad_diff = max((grad_f - results[k][1]).abs().max().item() for k in ("chunked", "chunked_rows"))
    figures = {
        "peak_mem_ratio": common.ratio(mem["chunked"]["step_peak_bytes"], mem["full"]["step_peak_bytes"]),
        "time_ratio": common.ratio(common.median(times["chunked"]), common.median(times["full"])),
        "max_abs_diff": max(loss_diff, grad_diff),
        "loss_abs_diff": loss_diff,
        "grad_max_abs_diff": grad_diff,
        "grad_max_abs": grad_f.abs().max().item(),
        "full_peak_mib": mem["full"]["step_peak_bytes"] / 2**20,
        "chunked_peak_mib": mem["chunked"]["step_peak_bytes"] / 2**20,
        "time_ratio_wall": common.ratio(common.median(wall["chunked"]), common.median(wall["full"])),
        "full_ms": 1000 * common.median(times["full"]),
        "chunked_ms": 1000 * common.median(times["chunked"]),
        f"peak_mem_ratio_rows{SMALL_ROWS}": common.ratio(
            mem["chunked_rows"]["step_peak_bytes"], mem["full"]["step_peak_bytes"]
        ),
        f"time_ratio_rows{SMALL_ROWS}": common.ratio(
            common.median(times["chunked_rows"]), common.median(times["full"])
        ),
    }
    return common.emit(
        NAME, figures, args, **s, beta=BETA, dtype="float32", lm_head="frozen, shared by student and teacher",
        memory_method=mem["full"]["method"], clock=clock, seconds_wall=wall, seconds_cpu=cpu,
    )  # fmt: skip


if __name__ == "__main__":
    main()
