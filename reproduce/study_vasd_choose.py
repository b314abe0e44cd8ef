#!/usr/bin/env python
"""The VASD dev check's choice: which configuration `make study-vasd` trains, chosen at study length on dev tasks.

    python reproduce/study_vasd_choose.py reproduce/studies/vasd-dev/lr3e-4 reproduce/studies/vasd-dev/mix0.8 [--record]

Each folder is a `study_vasd.py --side dev --set KEY=VALUE ...` results folder (its summary.json). The rule
(reproduce/studies/vasd-dev/README.md, its second check; written before that check ran): a candidate qualifies when,
at its last checkpoint with the seeds pooled, the lower ends of FULL's and CONCAT's last-minus-start differences are
>= -5 points and SHARDED's is > 0; the qualifying candidate with the widest single-turn margin (the higher of the
worse of FULL's and CONCAT's lower ends) is chosen, the higher SHARDED difference breaking a tie. (The first check
chose the highest SHARDED difference; the 5-seed test run then showed SHARDED's gain far above its target and
single-turn skill the binding one.) It prints one line per candidate and the choice; `--record` writes it to
`reproduce/dev_choices.json` as `study_vasd_config`, which `study_vasd.py` applies on top of the part's
`vasd_config`. A folder scored on test tasks is refused: nothing is chosen on the items a study reports. Candidates
must differ only in the values they set: their configurations are compared after each one's `--set` values apply,
so a candidate run after an earlier choice was recorded compares with one run before it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import repro  # noqa: E402
import study  # noqa: E402

RULE = ("at the last checkpoint, seeds pooled: FULL and CONCAT last-minus-start lower ends >= -5 points and SHARDED's "
        "> 0; among those, the highest single-turn margin (the worse of FULL's and CONCAT's lower ends), then the "
        "highest SHARDED difference")  # fmt: skip
FLOOR = -0.05


def qualifies(last_vs_start: dict) -> bool:
    """The rule's test on one candidate's `last_vs_start` ({view: {diff, low, high}})."""
    return (last_vs_start["full"]["low"] >= FLOOR and last_vs_start["concat"]["low"] >= FLOOR
            and last_vs_start["sharded"]["low"] > 0)  # fmt: skip


def margin(last_vs_start: dict) -> float:
    """The single-turn margin: the worse of FULL's and CONCAT's last-minus-start lower ends."""
    return min(last_vs_start["full"]["low"], last_vs_start["concat"]["low"])


def choose(candidates: dict[str, dict]) -> str | None:
    """The qualifying candidate with the widest single-turn margin, then the highest SHARDED difference; None when
    none qualifies."""
    kept = {name: c["last_vs_start"] for name, c in candidates.items() if qualifies(c["last_vs_start"])}
    return max(kept, key=lambda name: (margin(kept[name]), kept[name]["sharded"]["diff"])) if kept else None


def recipe_values(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE` overrides as {key: value}, applied in order (a later value for a key wins)."""
    return dict(item.split("=", 1) for item in items)


def study_overrides(candidate: dict, part: list[str]) -> list[str]:
    """What `study_vasd_config` must add to the part's `vasd_config` overrides (`part`) for `make study-vasd` to train
    this candidate as it was trained: its base without the part's overrides (an earlier study choice it ran on top
    of), then its `--set` values, one item per key, the last value winning."""
    base = candidate["base"]
    extra = base[len(part) :] if base[: len(part)] == part else base
    return [f"{k}={v}" for k, v in recipe_values([*extra, *candidate["set"]]).items()]


def settled(candidate: dict, keys: set[str]) -> dict[str, str]:
    """A candidate's recipe values after its base and `--set` values apply in order, without `keys` (the ones some
    candidate sets): what candidates compared by the rule must share."""
    values = recipe_values([*candidate["base"], *candidate["set"]])
    return {k: v for k, v in values.items() if k not in keys}


def read_candidate(folder: Path) -> dict:
    """A dev results folder's summary, checked: scored on dev, with at least one `--set` value."""
    path = folder / "summary.json"
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise repro.StepError(f"{path}: cannot read a study-vasd summary ({exc})") from exc
    if s.get("side") != "dev":
        raise repro.StepError(f"{path}: scored on {s.get('side', 'test')} tasks; a choice reads dev tasks only "
                              "(study_vasd.py --side dev)")  # fmt: skip
    if not s.get("set"):
        raise repro.StepError(
            f"{path}: no --set values, so nothing to choose (a candidate is study_vasd.py --set ...)"
        )
    return {"set": s["set"], "task": s["task"], "base": s["configuration"]["overrides"], "seeds": s["seeds"],
            "steps": s["steps"], "dev_tasks": s["test_tasks"], "start": s["start"],
            "last_vs_start": {v: {k: s["last_vs_start"][v][k] for k in ("diff", "low", "high")}
                              for v in ("full", "concat", "sharded")}}  # fmt: skip


def line(name: str, c: dict) -> str:
    d = c["last_vs_start"]
    cells = "; ".join(f"{v.upper()} {study.interval_text(d[v])}" for v in d)
    return f"{name} ({', '.join(c['set'])}): {cells} -> {'qualifies' if qualifies(d) else 'does not qualify'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="dev results folders (one per candidate)")
    parser.add_argument("--record", action="store_true", help="write the choice to reproduce/dev_choices.json")
    args = parser.parse_args(argv)
    try:
        candidates = {folder.name: read_candidate(folder) for folder in args.folders}
        varied = {key for c in candidates.values() for key in recipe_values(c["set"])}
        alike = {(c["task"], tuple(sorted(settled(c, varied).items())), tuple(c["seeds"]), c["steps"], c["dev_tasks"])
                 for c in candidates.values()}  # fmt: skip
        if len(alike) > 1:
            raise repro.StepError(f"the candidates differ in task, base configuration, seeds, steps or dev tasks "
                                  f"({alike}); compare runs that differ only in their --set values")  # fmt: skip
    except repro.StepError as err:
        print(f"error: study-vasd-choose: {err}", file=sys.stderr)
        return 1
    for name, c in candidates.items():
        print(line(name, c))
    chosen = choose(candidates)
    print(f"chosen: {chosen}" if chosen else "chosen: none qualifies; study-vasd keeps the part's configuration")
    if args.record:
        data = json.loads(repro.DEV_CHOICES.read_text(encoding="utf-8"))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repro.ROOT, capture_output=True,
                                text=True).stdout.strip()  # fmt: skip
        part = data.get("vasd_config", {}).get("overrides", [])
        data["study_vasd_config"] = {
            "commit": commit, "rule": RULE, "task": next(iter(candidates.values()))["task"], "chosen": chosen,
            "overrides": study_overrides(candidates[chosen], part) if chosen else [], "candidates": candidates,
        }  # fmt: skip
        repro.DEV_CHOICES.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"recorded study_vasd_config in {repro.DEV_CHOICES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
