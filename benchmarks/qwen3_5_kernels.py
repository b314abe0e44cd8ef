"""Qwen3.5's linear-attention layers with `flash-linear-attention` (the `gpu` extra) vs transformers' torch loops.

One training step (forward, backward, AdamW) of a random-init Qwen3.5 text model (gated delta-net layers with a
full-attention layer every fourth, `fic.tiny.random_model(arch="qwen3_5")`), on `batch x tokens` random tokens:

* torch: `fla` hidden from the process (`sys.modules["fla"] = None`), so transformers runs its torch fallback.
* fla: whatever the environment has; `fla_loaded` says whether transformers actually imported it (1) or not (0).

Each variant runs in a fresh process (the kernels are chosen at import). Figures: `speedup` = torch step time /
fla step time (medians after warm-up, wall time with CUDA synchronised), `peak_mem_ratio` = fla / torch peak memory
of the step, `fla_loaded`. On CPU, and wherever `fla` is not installed, both variants run the same torch code (a
ratio near 1; `fla_loaded` 0): the figure that matters is `--size gpu` on a CUDA machine with `pip install -e '.[gpu]'`.

    python benchmarks/qwen3_5_kernels.py [--size smoke|cpu|gpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "qwen3_5_kernels"
# hidden, layers, heads, batch, tokens; `gpu` is Qwen3.5-2B's width and depth is cut to 8 layers (2 full-attention)
SIZES = {
    "smoke": dict(hidden=64, layers=4, heads=4, batch=1, tokens=64),
    "cpu": dict(hidden=256, layers=4, heads=4, batch=2, tokens=256),
    "gpu": dict(hidden=2048, layers=8, heads=16, batch=4, tokens=2048),
}
VARIANTS = ("torch", "fla")


def worker(args, variant: str) -> None:
    if variant == "torch":
        sys.modules["fla"] = None  # importlib's find_spec and import both treat a None entry as absent
    import torch

    from fic.tiny import build_tokenizer, random_model

    size = SIZES[args.size]
    tokenizer = build_tokenizer("chatml")
    memory = common.PeakMemory(args.device).start()
    model = random_model(tokenizer, arch="qwen3_5", hidden_size=size["hidden"], num_layers=size["layers"],
                         num_heads=size["heads"], intermediate_size=3 * size["hidden"], seed=args.seed)  # fmt: skip
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = model.to(args.device, dtype=dtype).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, len(tokenizer), (size["batch"], size["tokens"]), generator=g).to(args.device)
    memory.mark()

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.repeats):
        common.sync(args.device)
        start = time.perf_counter()
        step()
        common.sync(args.device)
        times.append(time.perf_counter() - start)
    common.worker_result(seconds=common.median(times), step_peak=memory.step_peak(), fla_loaded=int("fla" in sys.modules
                         and sys.modules["fla"] is not None))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__, default_repeats=5)
    args = common.parse(p, argv)
    if args.worker:
        return worker(args, args.worker)
    runs = {v: common.run_worker(__file__, v, args, ["--repeats", str(args.repeats), "--warmup", str(args.warmup)])
            for v in VARIANTS}  # fmt: skip
    figures = {
        "speedup": common.ratio(runs["torch"]["seconds"], runs["fla"]["seconds"]),
        "peak_mem_ratio": common.ratio(runs["fla"]["step_peak"], runs["torch"]["step_peak"]),
        "fla_loaded": runs["fla"]["fla_loaded"],
        "torch_step_s": runs["torch"]["seconds"],
        "fla_step_s": runs["fla"]["seconds"],
    }
    common.emit(NAME, figures, args, **SIZES[args.size])


if __name__ == "__main__":
    main()
