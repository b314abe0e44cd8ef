"""Heuristic follow-up judge: accuracy and speed on MT-Bench second turns (real data, CPU).

Cases (`fic.judges.constructed`, as in tests/test_judges.py): for each of the 30 MT-Bench items with a GPT-4 reference, context = first
question + reference answer; the real human second turn (should be genuine), the first question verbatim and
lightly edited (restatements), and the longest sentence of the answer (a copy). Speed counts judge() calls only
(the encoder is loaded and warmed up first) and takes the best of `--repeats` runs.

    OMP_NUM_THREADS=2 python benchmarks/bench_judges.py [--repeats 3] [--max-seq-length 128]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from pathlib import Path

import torch

from fic.judges.base import Case
from fic.judges.constructed import mt_bench_constructed_cases
from fic.judges.heuristic import HeuristicJudge, HeuristicJudgeConfig, get_encoder

DATA = Path(os.environ.get("FIC_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


def timed(judge: HeuristicJudge, cases: list[Case], repeats: int) -> tuple[float, float, list]:
    """Best wall-clock and best CPU seconds (all threads of this process) over `repeats` runs."""
    best_wall, best_cpu, verdicts = float("inf"), float("inf"), None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        verdicts = judge.judge(cases)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, verdicts


def report(name: str, n: int, wall: float, cpu: float) -> None:
    # On a shared machine wall time includes waiting for other processes; CPU time does not. n / cpu is the rate
    # one dedicated core would give, a lower bound for two.
    print(f"{name}: {n} cases, {n / wall:.1f} cases/s wall, {n / cpu:.1f} cases per CPU-second")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-seq-length", type=int, default=HeuristicJudgeConfig.max_seq_length)
    args = parser.parse_args()

    start = time.perf_counter()
    get_encoder().encode(["warm up"])
    load = time.perf_counter() - start
    judge = HeuristicJudge(HeuristicJudgeConfig(max_seq_length=args.max_seq_length))
    labelled = mt_bench_constructed_cases(DATA)
    cases = [c for c, _ in labelled]

    wall, cpu, verdicts = timed(judge, cases, args.repeats)
    ok = Counter(kind for (_, kind), v in zip(labelled, verdicts) if v.genuine is (kind == "genuine"))
    total = Counter(kind for _, kind in labelled)
    print(f"torch threads {torch.get_num_threads()}, encoder load + warm-up {load:.1f}s (excluded below)")
    print(f"MT-Bench constructed set: {len(cases)} cases, binary accuracy {sum(ok.values()) / len(cases):.3f}")
    for kind in total:
        print(f"  {kind:18s} {ok[kind]}/{total[kind]}")
    print(f"  labels: {dict(Counter(v.label for v in verdicts))}")
    report(f"speed, mixed set (best of {args.repeats})", len(cases), wall, cpu)

    # A probe-like batch: 4 samples per context, the real second turns (decided mostly without embeddings).
    genuine = [
        Case(c.messages, c.user_turn + f" ({i % 4})") for i, (c, kind) in enumerate(labelled * 4) if kind == "genuine"
    ]
    report("speed, real second turns x4 samples", len(genuine), *timed(judge, genuine, args.repeats)[:2])
    # Worst case: every case needs all three embeddings (unrelated new tasks, all distinct, 4 per context).
    fresh = [c for c, kind in labelled if kind == "new_task"]
    worst = [Case(c.messages, fresh[(i + j) % len(fresh)].user_turn) for j in range(4) for i, c in enumerate(fresh)]
    report("speed, worst case (every turn needs 3 embeddings)", len(worst), *timed(judge, worst, args.repeats)[:2])


if __name__ == "__main__":
    main()
