"""The `fic` command. It only dispatches: each subcommand lives in its own module, imported when it is used.

A command module exposes `add_arguments(parser)` and `run(args) -> int` (or other names given in `OTHER_COMMANDS`).
Input mistakes (fic's user errors) print one line and exit non-zero instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from fic.errors import FicError
from fic.evaluations import EVALUATIONS

# name: (module, add-arguments function, run function, one-line help); the evaluations come from the registry
# `fic.evaluations` (`commands()`), each a `fic NAME` command.
OTHER_COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "judge": ("fic.cli_judge", "add_judge_arguments", "run_judge", "label generated user turns in a JSONL"),
    "judge-agreement": (
        "fic.cli_judge", "add_agreement_arguments", "run_agreement", "Cohen's kappa between two judgement files",
    ),
    "bag": ("fic.eval.clarify.bag", "add_arguments", "run", "Belief-Augmented Generation on ambiguous QA"),
    "build-followups": (
        "fic.cli_followups", "add_arguments", "run", "rejection-sample genuine user follow-ups into an SFT set",
    ),
    "eval-checkpoints": ("fic.eval.checkpoints", "add_arguments", "run", "evaluate every checkpoint of a run"),
    "review": ("fic.eval.review.server", "add_arguments", "run", "blind manual-review web app for judge validation"),
    "rates": ("fic.eval.rates", "add_arguments", "run", "recompute a probe folder's rates, with its labels"),
    "sources": ("fic.data.sources", "add_arguments", "run", "dataset names, their hub copies and local schemas"),
}  # fmt: skip


def commands() -> dict[str, tuple[str, str, str, str]]:
    """Every `fic` command: the registered evaluations (`fic.evaluations`) first, then the other commands."""
    evaluations = {e.name: (e.module, "add_arguments", "run", e.help) for e in EVALUATIONS.values()}
    return {**evaluations, **OTHER_COMMANDS}


def _usage() -> str:
    table = commands()
    width = max(map(len, table))
    lines = [f"  {name:<{width}}  {spec[3]}" for name, spec in table.items()]
    return (
        "usage: fic COMMAND [options] | fic --version\n\ncommands:\n" + "\n".join(lines)
        + "\n\n`fic COMMAND -h` for options; `python train.py recipe=NAME --help-keys` for a recipe's keys."
    )  # fmt: skip


def _version() -> str:
    # startup: importlib.metadata (~20 ms) and fic.cli_args (~15 ms, fic.judges) stay out of `fic -h`
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fic")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"fic {_version()}")
        return 0
    name, rest = argv[0], argv[1:]
    table = commands()
    if name not in table:
        print(f"error: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, add_name, run_name, help_text = table[name]
    module = importlib.import_module(module_name)
    from fic.cli_args import HelpFormatter, check_arguments

    parser = argparse.ArgumentParser(prog=f"fic {name}", description=help_text, formatter_class=HelpFormatter)
    getattr(module, add_name)(parser)
    args = parser.parse_args(rest)
    check_arguments(parser, args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(getattr(module, run_name)(args) or 0)
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
