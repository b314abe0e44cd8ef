"""Run every benchmark, one fresh process each, and print their result lines (`make bench`).

Each script prints one JSON line `{"name": ..., <figures>}` and writes `benchmarks/results/<name>.json`; this
runner prints their lines on stdout, and progress and a failing script's stderr on stderr. It exits non-zero when
any script failed, after running the others.

    python benchmarks/run_all.py [--size smoke|cpu|gpu] [--only probe_throughput,judge_throughput] [extra flags...]

Extra flags (e.g. `--repeats 5`, `--results-dir DIR`) are passed to every script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "probe_throughput", "probe_parallel", "judge_throughput", "chunked_divergence", "vasd_vs_sft", "vasd_vs_trl",
    "vasd_onpolicy", "vllm_vs_transformers", "qwen3_5_kernels",
)  # fmt: skip
# Benchmarks that need vLLM run on the interpreter of `.venv-vllm` (`make venv-vllm`), skipped without it.
VLLM_PYTHON = HERE.parent / ".venv-vllm" / "bin" / "python"
NEEDS_VLLM = ("vllm_vs_transformers",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="cpu", choices=("smoke", "cpu", "gpu"))
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    args, extra = parser.parse_known_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {unknown}; valid: {', '.join(BENCHMARKS)}")

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    failed, start = [], time.perf_counter()
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} --size {args.size} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        python = sys.executable
        if name in NEEDS_VLLM:
            if not VLLM_PYTHON.exists():
                print(f"    skipped: {VLLM_PYTHON} is absent (make venv-vllm)", file=sys.stderr, flush=True)
                continue
            python = str(VLLM_PYTHON)
        cmd = [python, str(HERE / f"{name}.py"), "--size", args.size, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"name"')]
        if proc.returncode != 0 or not lines:
            failed.append(name)
            print(f"    FAILED (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
            continue
        try:
            json.loads(lines[-1])
        except ValueError:
            failed.append(name)
            print(f"    FAILED: malformed result line {lines[-1][:200]!r}", file=sys.stderr, flush=True)
            continue
        print(lines[-1], flush=True)
        print(f"    done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    print(f"all benchmarks: {time.perf_counter() - start:.0f} s; failed: {failed or 'none'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
