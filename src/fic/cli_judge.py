"""The `fic judge` and `fic judge-agreement` commands.

    fic judge IN.jsonl --judge KIND [--judge-base-url URL --judge-model NAME] [--contrast] --out DIR
    fic judge-agreement A.jsonl B.jsonl

`fic judge` reads lines `{"messages": [... ending with the assistant turn ...], "user_turn": "...", ...}`, keeps
every field, adds `label`, `genuine`, `confidence`, `rationale` and `judge`, and writes `DIR/judgements.jsonl`.
KIND is a key of `fic.judges.JUDGES`. A malformed line stops the run with its line number, or is skipped and counted
with `--skip-bad`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
from collections import Counter
from pathlib import Path

from tqdm.auto import tqdm

from fic import cli_args
from fic.errors import FicError
from fic.estimates import cluster_rate
from fic.judges import JUDGE_ERROR, LABELS, Case, JudgeSettings
from fic.judges.agreement import judgement_agreement
from fic.judges.provenance import prompt_hash

logger = logging.getLogger(__name__)

OUTPUT_FIELDS = ("label", "genuine", "confidence", "rationale", "judge")
JUDGED_FILE = "judgements.jsonl"  # in the --out folder


class JudgeInputError(FicError, ValueError):
    """A judgement input line that cannot be read; the message names the file, the line and the fix."""


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input", type=Path, help="JSONL with `messages` (ending with the assistant turn) and `user_turn`."
    )
    cli_args.add_out_argument(parser, help=f"output folder; the judged rows go to DIR/{JUDGED_FILE}")
    cli_args.add_judge_arguments(parser)
    parser.add_argument("--concurrency", type=int, default=8, help="LLM requests in flight.")
    parser.add_argument("--max-reasks", type=int, default=2, help="re-asks after a malformed LLM reply.")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per LLM request attempt.")
    parser.add_argument(
        "--max-retries", type=int, default=5, help="retries of a failed LLM request: 429, 5xx, timeouts."
    )
    parser.add_argument("--cache", type=Path, help="JSONL cache of LLM verdicts (by content hash); off by default.")
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.85,
        help="cascade: the learned judge's confidence from which its verdict stands (0.7 sends about a third on).",
    )
    parser.add_argument("--batch-size", type=int, default=256, help="cases judged per batch.")
    parser.add_argument(
        "--skip-bad", action="store_true", help="skip malformed input lines (counted) instead of failing."
    )
    parser.add_argument("--details", action="store_true", help="also write the judge's scores as `judge_details`.")


def add_agreement_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="first judgement JSONL (output of `fic judge` or human labels).")
    parser.add_argument("b", type=Path, help="second judgement JSONL.")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON.")


def read_cases(path: Path, skip_bad: bool = False) -> tuple[list[dict], list[Case], int]:
    """Read judgement input; returns (rows, cases, skipped). Raises JudgeInputError naming the line unless skip_bad."""
    if not path.is_file():
        raise JudgeInputError(f"input={str(path)!r} does not exist or is not a file.")
    rows, cases, skipped = [], [], 0
    for lineno, line in _lines(path):
        try:
            row = _object(line)
            if "messages" not in row or "user_turn" not in row:
                missing = [k for k in ("messages", "user_turn") if k not in row]
                raise ValueError(f"missing field(s) {missing}; each line needs `messages` and `user_turn`")
            case = Case(messages=row["messages"], user_turn=row["user_turn"])
        except ValueError as err:
            if skip_bad:
                skipped += 1
                logger.warning("%s line %d skipped: %s", path, lineno, err)
                continue
            raise JudgeInputError(f"{path} line {lineno}: {err} (or pass --skip-bad to skip such lines).") from None
        rows.append(row)
        cases.append(case)
    return rows, cases, skipped


def _lines(path: Path):
    """(line number, text) of every non-blank line of `path`."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield lineno, line


def _object(line: str) -> dict:
    """The JSON object on `line`, or ValueError saying why it is not one."""
    try:
        row = json.loads(line)
    except ValueError as err:
        raise ValueError(f"not valid JSON ({err})") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    return row


def build_judge(args: argparse.Namespace):
    """The judge `args` ask for; raises ValueError naming the missing option."""
    return JudgeSettings.from_args(args).build(
        threshold=args.threshold,
        concurrency=args.concurrency,
        max_reasks=args.max_reasks,
        cache=args.cache,
        timeout=getattr(args, "timeout", 60.0),
        max_retries=getattr(args, "max_retries", 5),
    )


def run_judge(args: argparse.Namespace) -> int:
    try:
        if args.batch_size < 1:
            raise ValueError(f"--batch-size={args.batch_size} must be >= 1.")
        output = Path(args.out) / JUDGED_FILE
        if output.resolve() == args.input.resolve():
            raise ValueError(f"--out {args.out} would overwrite the input {output}; write to another folder.")
        judge = build_judge(args)
        rows, cases, skipped = read_cases(args.input, args.skip_bad)
    except ValueError as err:
        print(f"fic judge: error: {err}", file=sys.stderr)
        return 2
    if any(field in row for row in rows[:1] for field in OUTPUT_FIELDS):
        logger.warning("Input rows already have judgement fields %s; they will be overwritten.", OUTPUT_FIELDS)

    streams = "progress" in inspect.signature(judge.judge).parameters
    counts: Counter = Counter()
    decisions: list[bool | None] = []
    items: list[str] = []  # each turn's item (the hash of its prompt): turns of one item are not independent
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as out, tqdm(total=len(cases), desc=f"judge ({judge.name})") as bar:
        for start in range(0, len(cases), args.batch_size):
            batch = cases[start : start + args.batch_size]
            if streams:  # the LLM judge reports each finished case itself
                verdicts = judge.judge(batch, progress=bar.update)
            else:
                verdicts = judge.judge(batch)
                bar.update(len(batch))
            for row, verdict in zip(rows[start : start + args.batch_size], verdicts):
                record = {**row, **{k: getattr(verdict, k) for k in OUTPUT_FIELDS}}
                if args.details:
                    record["judge_details"] = verdict.extra
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                counts[verdict.label] += 1
                decisions.append(verdict.genuine)
                items.append(prompt_hash(row["messages"]))

    judged = sum(counts.values())
    decided = [(bool(d), item) for d, item in zip(decisions, items) if d is not None]
    rate = cluster_rate([d for d, _ in decided], [item for _, item in decided])
    print(
        f"judged {judged} case(s) with {judge.name} -> {output}"
        + (f" ({skipped} bad line(s) skipped)" if skipped else "")
    )
    for label in LABELS:
        print(f"  {label:24s} {counts[label]:6d}")
    print(f"  {JUDGE_ERROR:24s} {counts[JUDGE_ERROR]:6d}  (excluded from rates)")
    if rate["n"]:
        print(f"genuine follow-up rate (judge verdicts, not corrected): {rate['rate']:.3f} [95% CI "
              f"{rate['low']:.3f}-{rate['high']:.3f}, clustered by item] ({counts['genuine_followup']}/{rate['n']} "
              f"decided, {rate['n_items']} items)")  # fmt: skip
    return 0


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise ValueError(f"{str(path)!r} does not exist or is not a file.")
    rows = []
    for lineno, line in _lines(path):
        try:
            rows.append(_object(line))
        except ValueError as err:
            raise ValueError(f"{path} line {lineno}: {err}.") from None
    return rows


def run_agreement(args: argparse.Namespace) -> int:
    try:
        result = judgement_agreement(_read_rows(args.a), _read_rows(args.b), names=(str(args.a), str(args.b)))
    except ValueError as err:
        print(f"fic judge-agreement: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    def fmt(x):
        return "n/a" if x is None else f"{x:.3f}"

    print(
        f"paired by {result['key']}: {result['matched']} matched ({result['unmatched_a']} only in A, {result['unmatched_b']} only in B)"
    )
    print(
        f"judge_error rows: {result['judge_errors_a']} in A, {result['judge_errors_b']} in B; "
        f"{result['excluded']} matched pair(s) excluded; {result['n']} compared"
    )
    print(f"binary (genuine): kappa {fmt(result['binary']['kappa'])}  agreement {fmt(result['binary']['agreement'])}")
    print(f"label:            kappa {fmt(result['label']['kappa'])}  agreement {fmt(result['label']['agreement'])}")
    return 0
