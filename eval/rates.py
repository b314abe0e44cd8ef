"""`fic rates RUN [--labels FILE]`: a probe folder's summary and report recomputed from its files, without a model.

`RUN/samples.jsonl` holds every judged turn and `RUN/probe_meta.json` the run's settings, task accuracy and judge
overlap, so the summary (`fic.followup_summary.summarize`) can be recomputed at any time: after labelling a sample of
the turns with `fic review RUN --sample N` (which writes `RUN/labels.jsonl`), `fic rates RUN` adds the calibrated
(prediction-powered) estimate and the judge's agreement with those labels to `summary.json` and `report.html`.

The readers' own figures (`summary["readers"]`, `fic.reader_floor`) come beside them: their genuine rate on the real
turns, on the foil turns `fic review --foil-share S` mixed in (`RUN/foil_labels.jsonl`, or `--foil-labels FILE`:
their floor), and the floor-subtracted reading, each with context-free requests counted genuine and not counted (the
second unknown, and said to be, for labels made before the `context_free` flag).

Bad input is one line: a folder without samples, labels naming turns the run does not have, labels of another run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from pathlib import Path

from fic.errors import FicError
from fic.followup_summary import row_key, summarize
from fic.jsonl import first_of_each, load_done, write_json
from fic.judges.validity import judge_validity, validity_of
from fic.reader_floor import LabelRowError, check_flag, reader_lines, reader_readings

from .probe_plots import write_plots
from .report import calibrated_text, probe_report

logger = logging.getLogger(__name__)

LABELS_FILE = "labels.jsonl"
FOIL_LABELS_FILE = "foil_labels.jsonl"  # labels of the foil turns of a `fic review --foil-share` session
META_FILE = "probe_meta.json"


class RatesError(FicError, ValueError):
    """A folder or labels file `fic rates` cannot use; the message says why."""


def turn_sha(text: str) -> str:
    """12 hex digits of sha256 of a generated turn: a label carries it, so labels never attach to other text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def read_labels(path: Path, rows: list[dict], run_id: str | None, run_dir: Path | None = None,
                foils: bool = False) -> list[dict]:  # fmt: skip
    """The rows of a labels file, checked against the run: every label names a turn of `rows`, from this run.
    `run_dir`: the run's folder, named in the hint of an error (default: the labels file's folder). Foil rows
    (`foil: true`, `fic review --foil-share`) are left out; `foils=True` returns them instead (`read_foil_labels`)."""
    return _read_labels(path, rows, run_id, run_dir)[1 if foils else 0]


def read_foil_labels(path: Path, rows: list[dict], run_id: str | None, run_dir: Path | None = None) -> list[dict]:
    """The foil labels of a `foil_labels.jsonl` (every row a foil: the turn's key fields, `context_item_id` an item
    of the same dataset in the run), checked against the run as `read_labels` checks labels."""
    real, foils = _read_labels(path, rows, run_id, run_dir)
    if real:
        raise RatesError(f"{path}: {len(real)} rows are not foil labels (no `foil: true`); labels of real turns "
                         f"belong in {LABELS_FILE}")  # fmt: skip
    return foils


def _read_labels(path: Path, rows: list[dict], run_id: str | None,
                 run_dir: Path | None = None) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """(labels of real turns, labels of foil turns) of a labels file, each checked against the run."""
    keys = {row_key(r): r for r in rows}
    items = {(r["dataset"], str(r["item_id"])) for r in rows}
    relabel = f"label this run's turns with `fic review {run_dir or path.parent} --sample N`"
    labels, first_line = [], {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            label = json.loads(line)
            key = row_key(label)
            genuine = label["genuine"]
        except (ValueError, KeyError, TypeError) as err:
            raise RatesError(f"{path} line {n}: not a label row ({err}); fic review writes dataset, item_id, "
                             "temperature, perturbation, sample, genuine, label") from None  # fmt: skip
        if not isinstance(genuine, bool):
            raise RatesError(f"{path} line {n}: genuine must be true or false, got {genuine!r}")
        try:
            check_flag(label)
        except LabelRowError as err:
            raise RatesError(f"{path} line {n}: {err}") from None
        foil = label.get("foil") is True
        if foil and (label["dataset"], str(label.get("context_item_id"))) not in items:
            raise RatesError(f"{path} line {n}: a foil label whose context_item_id {label.get('context_item_id')!r} "
                             f"is no item of {label['dataset']} in this run; {relabel}")  # fmt: skip
        if run_id and label.get("run_id") not in (None, run_id):
            raise RatesError(f"{path} line {n}: labels of another run (run_id {label['run_id']}, this run "
                             f"{run_id}); {relabel}")  # fmt: skip
        if key in keys and label.get("turn_sha") not in (None, turn_sha(keys[key]["user_turn"])):
            raise RatesError(f"{path} line {n}: the labelled turn's text differs from this run's turn {key}: labels "
                             f"of another run; {relabel}")  # fmt: skip
        seen = (foil, key)
        if seen in first_line:
            raise RatesError(f"{path} line {n}: turn {key} is labelled twice{' as a foil' if foil else ''} (first on "
                             f"line {first_line[seen]}); keep one label per turn (two readers' labels of one turn "
                             "belong in separate files)")  # fmt: skip
        first_line[seen] = n
        labels.append((key, label))
    missing = [key for key, _ in labels if key not in keys]
    if missing:
        raise RatesError(f"{path}: {len(missing)} of {len(labels)} labels name turns this run does not have, e.g. "
                         f"{missing[0]}; was the file written for another folder?")  # fmt: skip
    return ([label for _, label in labels if label.get("foil") is not True],
            [label for _, label in labels if label.get("foil") is True])  # fmt: skip


def overlap_items(meta: dict) -> set[tuple[str, str]]:
    """`(dataset, item_id)` of the items inside the judge's fit, from a probe folder's `probe_meta.json`."""
    return {tuple(item.split(":", 1)) for item in (meta.get("judge_overlap") or {}).get("items", [])}


def write_rates(run_dir: str | Path, judge=None, labels: str | Path | None = None, report: bool = True,
                empty_ok: bool = False, foil_labels: str | Path | None = None) -> dict:  # fmt: skip
    """Recompute `RUN/summary.json` (and the plots and `report.html`) from the folder's files; return the summary.

    `judge`: the judge object that made the verdicts (its measured error rates give the corrected rates); without
    one, the judge named in the run's settings is looked up by version in `fic.judges.validity`. `empty_ok`: a probe
    whose every item was skipped writes an empty summary instead of failing. `foil_labels`: the labels of the foil
    turns (default: `RUN/foil_labels.jsonl` when present; foil rows inside the labels file count too)."""
    run_dir = Path(run_dir)
    samples = run_dir / "samples.jsonl"
    if not samples.is_file() and not empty_ok:
        raise RatesError(f"{samples} not found; `fic rates` reads a folder written by `fic probe`")
    rows = load_done(samples) if samples.is_file() else []
    if not rows and not empty_ok:
        raise RatesError(f"{samples} holds no samples; run `fic probe` into {run_dir} first")
    repeats = len(rows) - len(first_of_each(rows, row_key))
    if repeats:
        raise RatesError(
            f"{samples}: {repeats} rows repeat an earlier row's (dataset, item, temperature, perturbation, sample), so "
            f"every rate would count them twice (two runs wrote into {run_dir} at once). Rerun the same `fic probe` "
            "command into it: it keeps the first row of each and rewrites the summary."
        )
    meta_path = run_dir / META_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    validity = judge_validity(judge) if judge is not None else validity_of(meta.get("judge_validity") or {})
    labels_path = Path(labels) if labels else run_dir / LABELS_FILE
    if labels and not labels_path.is_file():
        raise RatesError(f"--labels {labels_path}: no such file")
    label_rows, foil_rows = _read_labels(labels_path, rows, meta.get("run_id"), run_dir) if labels_path.is_file() \
        else ([], [])  # fmt: skip
    foil_path = Path(foil_labels) if foil_labels else run_dir / FOIL_LABELS_FILE
    if foil_labels and not foil_path.is_file():
        raise RatesError(f"--foil-labels {foil_path}: no such file")
    if foil_path.is_file():
        more = read_foil_labels(foil_path, rows, meta.get("run_id"), run_dir)
        twice = {row_key(f) for f in foil_rows} & {row_key(f) for f in more}
        if twice:
            raise RatesError(f"{foil_path}: turn {sorted(twice)[0]} is labelled as a foil there and in {labels_path}; "
                             "keep one foil label per turn")  # fmt: skip
        foil_rows += more
    overlap = meta.get("judge_overlap") or {}
    excluded = overlap_items(meta)
    summary = summarize(rows, meta.get("accuracy"), validity=validity, labels=label_rows, excluded=excluded)
    summary.update(settings=meta.get("settings"), skipped_items=meta.get("skipped_items"), judge_validity=validity,
                   judge_overlap=overlap)  # fmt: skip
    summary["readers"] = reader_readings(label_rows, foil_rows, rows) if label_rows or foil_rows else None
    if validity is not None and "errors" in validity:  # the error rates used are under each estimate's `judge`
        summary["judge_validity"] = {k: v for k, v in validity.items() if k != "errors"}
    write_json(run_dir / "summary.json", summary)
    if report:
        write_plots(summary, run_dir)
        probe_report(summary, rows, run_dir / "report.html")
    return summary


def estimate_lines(summary: dict) -> list[str]:
    """One line per dataset and overall: raw, corrected, calibrated and generic floor, as `fic probe` prints them."""

    def cell(c: dict | None) -> str:
        return "-" if not c else f"{c['rate']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"

    lines = []
    for name, est in [*summary["by_dataset"].items(), ("overall", summary["overall"])]:
        raw = est["raw"]
        lines.append(
            f"{name:>14}: raw {cell(raw)} n={raw['n']} items={raw['n_items']} | corrected {cell(est['corrected'])}"
            f" | calibrated {calibrated_text(est)} | generic floor {cell(est.get('generic_floor'))}"
        )
    if summary.get("readers"):
        lines += reader_lines(summary["readers"])
    lines.append(f"note: {summary['assumption']}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a `fic probe` output folder (holds samples.jsonl)")
    parser.add_argument("--labels", help=f"labels of this run's turns (default: RUN/{LABELS_FILE} when present)")
    parser.add_argument("--foil-labels", metavar="FILE",
                        help=f"labels of the foil turns of `fic review --foil-share` (default: RUN/{FOIL_LABELS_FILE} "
                        "when present): the readers' generic floor")  # fmt: skip
    parser.add_argument("--no-report", action="store_true", help="write summary.json only (no plots, no HTML)")


def run(args: argparse.Namespace) -> int:
    summary = write_rates(args.run_dir, labels=args.labels, report=not args.no_report,
                          foil_labels=getattr(args, "foil_labels", None))  # fmt: skip
    for line in estimate_lines(summary):
        print(line)
    print(f"wrote {Path(args.run_dir) / 'summary.json'}")
    return 0
