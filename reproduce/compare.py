#!/usr/bin/env python
"""Where a fresh `make reproduce` summary differs from the committed one.

    python reproduce/compare.py outputs/reproduce/summary.json [reproduce/results/summary.json] [--parts collab,vasd]

Prints one line per differing leaf (`collab.calibrated.base.n_labels: 29 -> 28`), numbers compared exactly (the runs
are meant to be deterministic; `--tolerance` relaxes that), and exits 1 when anything differs. Paths, wall times and
machine speed are left out (`IGNORED`): they differ between any two runs. Plain json, no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "summary.json"
# keys whose values differ between any two runs: where they ran, how long they took, how fast the machine was
IGNORED = {"minutes", "minutes_per_part", "machine", "wall_s", "train_wall_s", "folder", "labels", "committed",
           "command", "then", "model", "data", "date"}  # fmt: skip


def differences(fresh, committed, tolerance: float = 0.0, path: str = "") -> list[str]:
    """`path: committed -> fresh` for every leaf where the two differ (a key on one side only included)."""
    if isinstance(fresh, dict) and isinstance(committed, dict):
        out = []
        for key in sorted(set(fresh) | set(committed), key=str):
            if key in IGNORED:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in fresh or key not in committed:
                side = "only committed" if key not in fresh else "only fresh"
                out.append(f"{where}: {side}")
                continue
            out += differences(fresh[key], committed[key], tolerance, where)
        return out
    if isinstance(fresh, list) and isinstance(committed, list) and len(fresh) == len(committed):
        return [
            d for i, (f, c) in enumerate(zip(fresh, committed)) for d in differences(f, c, tolerance, f"{path}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(fresh, numbers) and isinstance(committed, numbers) and not isinstance(fresh, bool):
        return [] if abs(fresh - committed) <= tolerance else [f"{path}: {committed!r} -> {fresh!r}"]
    return [] if fresh == committed else [f"{path}: {_short(committed)} -> {_short(fresh)}"]


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fresh", type=Path)
    parser.add_argument("committed", type=Path, nargs="?", default=RESULTS)
    parser.add_argument("--parts", default="", help="comma-separated top-level keys to compare (default: all)")
    parser.add_argument("--tolerance", type=float, default=0.0)
    args = parser.parse_args(argv)
    fresh, committed = (json.loads(p.read_text(encoding="utf-8")) for p in (args.fresh, args.committed))
    parts = [p for p in args.parts.split(",") if p]
    if parts:
        fresh, committed = ({p: d.get(p) for p in parts} for d in (fresh, committed))
    found = differences(fresh, committed, args.tolerance)
    print("\n".join(found) if found else "no difference", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
