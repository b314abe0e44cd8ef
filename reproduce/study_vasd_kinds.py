#!/usr/bin/env python
"""Which kinds of items a VASD study's checkpoints get right, beside the start model: where a single-turn loss lives.

    python reproduce/study_vasd_kinds.py outputs/studies/vasd/lic/confirm-240+180 \
        outputs/studies/vasd/data/confirm-240+180-arithmetic-1-update.json [--view full]

The first argument is a folder of `fic lic` runs (`start/`, `seed0/`, ...: each an `episodes.jsonl`), as
`study_vasd.py` writes per task set; the second is the task file they were scored on. On the curve's folder
(`lic/`, where each seed holds `step30/`, `step60/`, ...) `--step K` reads each seed's checkpoint at step K.
The arithmetic tasks (`fic.data.synthetic`) start with a count and apply one update, so each item is one of three
kinds: an addition whose sum stays below ten, an addition that crosses ten (a carry), or a subtraction. For each
run it prints the view's correct count per kind and, against the start model, how many items it lost and gained: a
net loss spread over every kind reads differently from one kind lost. Reads files only (no model, no torch).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

KINDS = ("add below 10", "add crossing 10", "subtract")


def item_kind(question: str, answer: str) -> str:
    """The kind of one arithmetic item from its question's first two numbers and its `#### N` answer."""
    start, update = (int(n) for n in re.findall(r"\d+", question)[:2])
    result = int(answer.rsplit("#", 1)[-1])
    if result == start + update:
        return KINDS[1] if result >= 10 else KINDS[0]
    if result == start - update:
        return KINDS[2]
    raise ValueError(f"not a one-update arithmetic item: {question!r} -> {answer!r}")


def correct_by_item(path: Path, view: str) -> dict[str, bool]:
    """{task_id: correct} for one view of a `fic lic` episodes file (greedy: one run per task and view)."""
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {r["task_id"]: bool(r["correct"]) for r in rows if r["mode"] == view}


def kind_table(start: dict[str, bool], runs: dict[str, dict[str, bool]], kinds: dict[str, str]) -> list[dict]:
    """One row per run (the start model first): correct per kind, and items lost and gained against the start."""
    rows = []
    for name, got in {"start": start, **runs}.items():
        correct = Counter(kinds[t] for t, ok in got.items() if ok)
        lost = Counter(kinds[t] for t in got if start[t] and not got[t])
        gained = Counter(kinds[t] for t in got if got[t] and not start[t])
        rows.append({"run": name, "correct": dict(correct), "lost": dict(lost), "gained": dict(gained)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lic", type=Path, help="a folder of fic lic runs (start/, seed0/, ...)")
    parser.add_argument("tasks", type=Path, help="the task file they were scored on")
    parser.add_argument("--view", default="full", choices=("full", "concat", "sharded"))
    parser.add_argument("--step", type=int, help="each seed's checkpoint at this step (the curve's lic/ folder)")
    args = parser.parse_args(argv)
    try:
        tasks = json.loads(args.tasks.read_text(encoding="utf-8"))
        kinds = {t["task_id"]: item_kind(t["question"], t["answer"]) for t in tasks}
        start = correct_by_item(args.lic / "start" / "episodes.jsonl", args.view)
        folders = [p / f"step{args.step}" if args.step else p for p in sorted(args.lic.iterdir()) if p.name != "start"]
        runs = {p.relative_to(args.lic).as_posix(): correct_by_item(p / "episodes.jsonl", args.view)
                for p in folders if (p / "episodes.jsonl").exists()}  # fmt: skip
        if set(start) != set(kinds) or any(set(r) != set(kinds) for r in runs.values()):
            raise ValueError(f"the runs in {args.lic} were not all scored on the tasks of {args.tasks}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: study-vasd-kinds: {exc}", file=sys.stderr)
        return 1
    total = Counter(kinds.values())
    print(f"{args.view.upper()}, {len(kinds)} tasks: " + ", ".join(f"{k} {total[k]}" for k in KINDS))
    print("| run | " + " | ".join(f"{k}: correct (lost/gained)" for k in KINDS) + " |")
    print("|---" * (len(KINDS) + 1) + "|")
    for row in kind_table(start, runs, kinds):
        cells = [f"{row['correct'].get(k, 0)}/{total[k]}" + ("" if row["run"] == "start" else
                 f" (-{row['lost'].get(k, 0)}/+{row['gained'].get(k, 0)})") for k in KINDS]  # fmt: skip
        print(f"| {row['run']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
