#!/usr/bin/env python
"""`make study-collab`: the reproduce collab part at several training seeds on SmolLM2-135M-Instruct.

    python reproduce/study_collab.py [--seeds 0,1,2] [--out outputs/studies/collab] [--results reproduce/studies/collab]

`make reproduce` trains every collab arm and follow-up RL at one seed (SCALE=cpu: 3 seeds take ~70 min, which does not
fit its 90 minutes beside the other parts). This runs the same part (`reproduce/collab.py`, the same settings, data,
recorded dev choices and probes) with only its training seeds changed: every SFT arm and follow-up RL trained and
probed once per seed, each trained arm's rate and paired difference from the base model pooled over the seeds with an
interval that resamples seeds and held-out contexts together (`reproduce/collab_seeds.py`), beside each seed's own
figures. Seed 0 is the seed of the blind labels (`labels/followup/collab/`): its calibrated and readers' figures
read them as the part does.

What it writes to the results folder: the part's `summary.json`, `report.md` and `report.html` (the collab section
alone, with its minutes). Resumable: the part resumes its own steps in `--out`, which is refused when it was made
with other settings (other seeds included; delete it or name another).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import collab_settings  # noqa: E402
import repro  # noqa: E402
import study  # noqa: E402

NAME = "collab"
DEFAULT_SEEDS = "0,1,2"


def parse_flags(argv: list[str] | None) -> argparse.Namespace:
    parser = study.FlagParser(prog="study-collab", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help="comma-separated training seeds (must include 0)")
    parser.add_argument("--out", default=str(study.WORK / NAME), help="work folder (models, probes, logs)")
    parser.add_argument(
        "--results", default=str(study.RESULTS / NAME), help="results folder (summary.json, report.md)"
    )
    args = parser.parse_args(argv)
    args.seeds = study.parse_seeds(args.seeds)
    return args


def main(argv: list[str] | None = None) -> int:
    """0 when the part finished, 1 on a failed step, 2 on a bad flag."""
    import run
    from report import write_report

    from fic.errors import FicError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args = parse_flags(argv)
        collab_settings.use_seeds(args.seeds)
    except (study.FlagError, repro.StepError) as err:
        print(f"error: study-collab: {err}", file=sys.stderr)
        return 2
    out, results = Path(args.out).resolve(), Path(args.results).resolve()
    minutes = collab_settings.estimated_minutes()
    print(f"[study-collab] seeds {', '.join(map(str, args.seeds))}: estimated {minutes:.0f} min on 2 CPU cores "
          "(reproduce/collab_settings.py TIMINGS)", file=sys.stderr, flush=True)  # fmt: skip
    try:
        with study.StudyLock(out, NAME):
            record = run.run_part(NAME, out, redo=False)
            # the part's own report, alone: no other part is missing from a study, and the crosswalk is make reproduce's
            summary = {**run.summarize(out, {NAME: record}), "crosswalk": [], "parts_missing": [],
                       "seeds": args.seeds, "estimated_minutes": round(minutes, 1)}  # fmt: skip
            # committed results name the work folder as outputs/studies/collab, not as this machine's path
            summary, record = study.shown_paths(summary, out, args.out), study.shown_paths(record, out, args.out)
            write_report(results, summary, {NAME: record})
    except FicError as err:
        print(f"error: study-collab: {err}", file=sys.stderr)
        return 1
    print(f"[study-collab] wrote {results / 'summary.json'}, report.md and report.html ({record['minutes']:.1f} min)",
          file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
