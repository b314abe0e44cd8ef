"""The probe on 2 processes vs 1: user turns per second of `accelerate launch --num_processes 2 -m fic.cli probe`
against a plain `fic probe`, with the same model, data, settings and seed, measured in the same run.

Both variants run the real command in fresh processes, taking turns (one two one two ...) after `--warmup` runs of
each, every run into a fresh folder. The one process has `--threads` torch threads (default 2, the development
machine's cores); each of the two has half as many (at least 1), so both variants use the same cores. A run's time is
the wall time of `run_probe` on the main process, from its start until `summary.json` is written (answers, user
turns, judging, merging the parts), as the worker reports it; `wall_speedup` also counts the command's start-up
(imports, the process group, loading the model) as a user waits for it.

Figures: `speedup` (turns per second, 2 processes / 1; medians of `--repeats`), `turns_per_s_one`,
`turns_per_s_two`, `wall_speedup`, and `identical` (1 when the 2-process `samples.jsonl` equals the 1-process one
byte for byte, as `tests/test_probe_parallel.py` checks; a correctness figure, not a speed one). With more than one
`--threads`, a third variant runs one process on one thread: `speedup_vs_one_thread`, `turns_per_s_one_thread`
(a small model can run slower on 2 threads than on 1, which would flatter `speedup`).

    python benchmarks/probe_parallel.py [--size smoke|cpu|gpu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "probe_parallel"
PROCESSES = 2

# model shape; items (GSM8K test), items per chunk, temperatures, controls, samples, user-turn and answer tokens
SIZES = {
    "smoke": dict(hidden=64, layers=2, limit=4, chunk=2, temperatures="0,1", perturbations="none", samples=2,
                  max_new_tokens=8, response_tokens=8),
    "cpu": dict(hidden=256, layers=4, limit=16, chunk=4, temperatures="0,0.7,1", perturbations="none,truncate",
                samples=2, max_new_tokens=32, response_tokens=32),
    "gpu": dict(hidden=1024, layers=8, limit=128, chunk=16, temperatures="0,0.3,0.7,1",
                perturbations="none,truncate,question", samples=4, max_new_tokens=64, response_tokens=128),
}  # fmt: skip


def probe_args(s: dict, model: str, out: str) -> list[str]:
    """The `fic probe` command line of a size."""
    data = common.shared_data_dir() / "gsm8k" / "test.jsonl"
    return ["probe", "--model", model, "--datasets", f"gsm8k:{data}", "--judge", "heuristic", "--limit",
            str(s["limit"]), "--chunk-size", str(s["chunk"]), "--temperatures", s["temperatures"], "--perturbations",
            s["perturbations"], "--samples", str(s["samples"]), "--max-new-tokens", str(s["max_new_tokens"]),
            "--response-tokens", str(s["response_tokens"]), "--out", out]  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    """One variant, in this (launched) process: `fic probe`, with `run_probe` timed; the main process reports."""
    import fic.eval.probe as probe
    from fic.cli import main

    timing = {}
    run_probe = probe.run_probe

    def timed(*a, **kw):
        start = time.perf_counter()
        summary = run_probe(*a, **kw)
        timing.update(seconds=time.perf_counter() - start, turns=summary["n_samples"])
        return summary

    probe.run_probe = timed  # `fic probe` looks it up when it runs
    code = main(probe_args(SIZES[args.size], args.model, args.out))
    if code != 0:
        raise SystemExit(code)
    if int(os.environ.get("RANK", "0")) == 0:
        common.worker_result(**timing)


def main(argv: list[str] | None = None) -> dict:
    p = common.parser(__doc__, default_repeats=3)
    p.add_argument("--model", help=argparse.SUPPRESS)  # the worker's model folder and output folder
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = common.parse(p, argv)
    if args.worker:
        worker(args)
        return {}
    import torch

    from fic.tiny import tiny_model

    s = SIZES[args.size]
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the 2 processes form a gloo group on the CPU
    elif torch.cuda.device_count() < PROCESSES:
        raise SystemExit(f"--device {args.device}: one GPU per process needed, {torch.cuda.device_count()} seen")
    model = tiny_model("chatml", hidden_size=s["hidden"], num_layers=s["layers"], num_heads=4,
                       intermediate_size=2 * s["hidden"])  # fmt: skip
    threads = {"one": args.threads, "two": max(1, args.threads // PROCESSES) if args.threads else None}
    if args.threads and args.threads > 1:
        threads["one_thread"] = 1  # one process on one core: a small model may not gain from a second thread
    launch = {
        "two": [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
                str(common.REPO_ROOT / "accelerate_configs" / "cpu.yaml"), "--num_processes", str(PROCESSES),
                "--main_process_port", "0"],
    }  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="probe_parallel_"))
    seconds: dict[str, list[float]] = {v: [] for v in threads}
    walls: dict[str, list[float]] = {v: [] for v in threads}
    turns = {}

    def run(variant: str, n: int) -> None:
        out = work / f"{variant}{n}"
        start = time.perf_counter()
        result = common.run_worker(__file__, "probe", argparse.Namespace(**{**vars(args), "threads": threads[variant]}),
                                   ["--model", model, "--out", str(out)], launcher=launch.get(variant),
                                   measure_memory=False)  # fmt: skip
        if n >= 0:  # a timed run (warm-up runs are numbered below 0)
            walls[variant].append(time.perf_counter() - start)
            seconds[variant].append(result["seconds"])
            turns[variant] = result["turns"]

    try:
        for n in range(-args.warmup, args.repeats):
            for variant in threads:
                run(variant, n)
        identical = (work / "one0" / "samples.jsonl").read_bytes() == (work / "two0" / "samples.jsonl").read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {v: turns[v] / common.median(seconds[v]) for v in seconds}
    figures = {
        "speedup": rate["two"] / rate["one"],
        "turns_per_s_one": rate["one"],
        "turns_per_s_two": rate["two"],
        "wall_speedup": common.median(walls["one"]) / common.median(walls["two"]),
        "identical": float(identical and turns["one"] == turns["two"]),
    }
    if "one_thread" in rate:
        figures["speedup_vs_one_thread"] = rate["two"] / rate["one_thread"]
        figures["turns_per_s_one_thread"] = rate["one_thread"]
    return common.emit(
        NAME, figures, args, model=Path(model).name, processes=PROCESSES, threads=threads, turns=turns["one"],
        seconds=seconds, wall_seconds=walls, **s,
    )  # fmt: skip


if __name__ == "__main__":
    main()
