"""Shared pieces of the study commands (`make study-vasd`, `make study-rl`): flags, the lock, progress lines, minutes
and the results folder.

A study is a module `reproduce/study_<method>.py` with `NAME`, `SETTINGS` (its `reproduce/settings/study_<method>.json`,
read by `repro.load_settings`), `settings_key(flags)` (what decides a run folder's content), `estimated_seconds(settings,
flags)`, `run(out, flags, progress) -> summary`, `report(summary) -> Markdown` and `plot(summary, path)`. `main` parses `--seeds`, `--steps`, `--every` (defaults from the settings' `defaults`, budgeted
to about two hours on 2 CPU cores), refuses a bad flag in one line, takes the study's lock (one process at a time per
work folder), refuses a work folder made with other settings (`fic.jsonl.check_settings`), runs the study and writes
`summary.json`, `report.md` and `curve.png` into the results folder (`reproduce/studies/<method>/`), with the wall
minutes of every pass over the work folder added up (`elapsed.json`). Every command runs as its own process through
`repro.train` / `repro.fic`, one at a time; a rerun skips what is finished (trained seeds, scored checkpoints).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import sys
import time
from pathlib import Path

import repro

RESULTS = repro.ROOT / "reproduce" / "studies"
WORK = repro.ROOT / "outputs" / "studies"
GPU_NOTE = (
    "**What a GPU would change.** The CPU budget fixes the model (SmolLM2-135M-Instruct, fp32), the step count and "
    "the evaluation sizes. On a GPU the same command would run the recipes' real subjects (Qwen3.5-2B or Llama-3.2-3B "
    "as in `fic_llama3b` / `followup_rl_qwen2b`, bf16), hundreds to thousands of steps instead of tens, vLLM "
    "generation for the rollouts (`use_vllm`, colocate or `trl vllm-serve`) and for the checkpoint evaluations "
    "(`fic eval-checkpoints --backend vllm`), and the `SCALE=gpu` evaluation sizes (more held-out items and samples "
    "per point), so each point's interval narrows and a curve that is flat here could be told from one that moves "
    "slowly."
)


class FlagError(ValueError):
    """A bad command-line flag; `main` prints it as one line."""


class FlagParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the usage block and exit; one line is enough
        raise FlagError(message)


def parse_seeds(text: str) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2]: distinct integers >= 0, at least one."""
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items or not all(s.isdigit() for s in items):
        raise FlagError(f"--seeds {text!r}: expected comma-separated integers >= 0, e.g. --seeds 0,1,2")
    seeds = [int(s) for s in items]
    if len(set(seeds)) != len(seeds):
        raise FlagError(f"--seeds {text!r}: a seed is named twice")
    return seeds


def check_steps(steps: int, every: int) -> None:
    """`--steps` and `--every` positive, and `--steps` a multiple of `--every` (the last checkpoint is the end)."""
    if steps < 1:
        raise FlagError(f"--steps {steps}: expected a number of training steps >= 1")
    if every < 1 or every > steps:
        raise FlagError(f"--every {every}: expected 1 <= --every <= --steps ({steps})")
    if steps % every:
        raise FlagError(f"--steps {steps} is not a multiple of --every {every}: the last checkpoint must be the end "
                        f"of training (e.g. --steps {steps - steps % every or every} --every {every})")  # fmt: skip


def parse_flags(argv: list[str] | None, module) -> argparse.Namespace:
    """The study's flags (`module.add_flags(parser)` adds its own, `module.check_flags(args)` checks them), checked;
    a bad one raises `FlagError` (one line)."""
    name, d = module.NAME, module.SETTINGS["defaults"]
    parser = FlagParser(prog=f"study-{name}", description=module.__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--seeds", default=",".join(map(str, d["seeds"])), help="comma-separated training seeds")
    parser.add_argument("--steps", type=int, default=d["steps"], help="training steps per seed")
    parser.add_argument("--every", type=int, default=d["every"], help="steps between scored checkpoints")
    parser.add_argument("--out", default=str(WORK / name), help="work folder (models, evaluations, logs)")
    parser.add_argument("--results", default=str(RESULTS / name), help="results folder (summary.json, report.md, PNG)")
    if hasattr(module, "add_flags"):
        module.add_flags(parser)
    args = parser.parse_args(argv)
    args.seeds = parse_seeds(args.seeds)
    check_steps(args.steps, args.every)
    if hasattr(module, "check_flags"):
        module.check_flags(args)
    return args


def checkpoint_steps(steps: int, every: int) -> list[int]:
    return list(range(every, steps + 1, every))


class StudyLock:
    """One study process per work folder: an exclusive `flock` on `OUT/.lock`, refused (StepError, one line) while
    another process holds it; released when the process ends, however it ends."""

    def __init__(self, out: Path, name: str):
        self.path, self.name, self.fh = Path(out) / ".lock", name, None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = self.path.open("a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.seek(0)
            owner = self.fh.read().strip() or "another process"
            self.fh.close()
            raise repro.StepError(f"study-{self.name}: {owner} is already running in {self.path.parent}; wait for "
                                  "it (one study process at a time)") from None  # fmt: skip
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()}")
        self.fh.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


class Progress:
    """Progress lines on stderr: `[study-vasd 12.3/110 min] seed 1: checkpoint 40/120 ...` (elapsed this pass /
    the estimate of the whole study)."""

    def __init__(self, name: str, estimate_s: float, earlier_min: float = 0.0):
        self.name, self.estimate_min, self.start, self.earlier = name, estimate_s / 60, time.time(), earlier_min

    def minutes(self) -> float:
        return self.earlier + (time.time() - self.start) / 60

    def __call__(self, message: str) -> None:
        print(f"[study-{self.name} {self.minutes():.1f}/{self.estimate_min:.0f} min] {message}", file=sys.stderr,
              flush=True)  # fmt: skip


def earlier_minutes(out: Path) -> float:
    path = Path(out) / "elapsed.json"
    return json.loads(path.read_text(encoding="utf-8"))["minutes"] if path.exists() else 0.0


def add_minutes(out: Path, minutes: float) -> None:
    from fic.jsonl import write_json

    write_json(Path(out) / "elapsed.json", {"minutes": round(earlier_minutes(out) + minutes, 3)})


def curve_table(rows: list[dict], keys: list[tuple[str, str]]) -> str:
    """A Markdown table: one row per dict, columns `(header, key)`; floats as percent with one decimal."""

    def cell(v):
        if isinstance(v, float):
            return f"{100 * v:.1f}"
        return "" if v is None else str(v)

    head = "| " + " | ".join(h for h, _ in keys) + " |\n|" + "---|" * len(keys) + "\n"
    return head + "".join("| " + " | ".join(cell(r.get(k)) for _, k in keys) + " |\n" for r in rows)


def interval_text(d: dict | None, key: str = "diff") -> str:
    """`+12.5 [+2.0, +23.1]` points (a difference) or `n/a`."""
    if not d or d.get(key) is None:
        return "n/a"
    return f"{100 * d[key]:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def save_figure(fig, path: Path) -> None:
    """Write a study's figure (tight layout, 110 dpi) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def shown_paths(obj, out: Path, named: str):
    """`obj` (JSON-able) with the work folder `out` written as the command named it (outputs/studies/NAME), not as
    this machine's absolute path, and every other path in the checkout (a start model) relative to it."""
    root = repro.ROOT.resolve()
    shown = str(out.relative_to(root)) if out.is_relative_to(root) else named.rstrip("/")
    text = json.dumps(obj).replace(str(out), shown)
    for prefix in {f"{repro.ROOT}/", f"{root}/"}:
        text = text.replace(prefix, "")
    return json.loads(text)


def main(module, argv: list[str] | None = None) -> int:
    """Run the study `module` (see the module docstring); 0 when it finished, 1 on a failed step, 2 on a bad flag."""
    from fic.errors import FicError
    from fic.jsonl import check_settings, write_json

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args = parse_flags(argv, module)
    except FlagError as err:
        print(f"error: study-{module.NAME}: {err}", file=sys.stderr)
        return 2
    out, results = Path(args.out).resolve(), Path(args.results).resolve()
    try:
        with StudyLock(out, module.NAME):
            # Steps and checkpoints decide what a run folder holds; seeds only which folders exist (a rerun may add).
            check_settings(out, {**module.settings_key(args), "steps": args.steps, "every": args.every})
            estimate = module.estimated_seconds(module.SETTINGS, args)
            progress = Progress(module.NAME, estimate, earlier_minutes(out))
            progress(f"{len(args.seeds)} seeds x {args.steps} steps, a checkpoint every {args.every}: estimated "
                     f"{estimate / 60:.0f} min on 2 CPU cores (reproduce/settings/study_{module.NAME}.json `seconds`)")  # fmt: skip
            start = time.time()
            try:
                summary = module.run(out, args, progress)
            finally:
                add_minutes(out, (time.time() - start) / 60)
            summary = shown_paths(summary, out, args.out)
            summary["minutes"] = round(earlier_minutes(out), 2)
            summary["estimated_minutes"] = round(estimate / 60, 1)
            results.mkdir(parents=True, exist_ok=True)
            module.plot(summary, results / "curve.png")
            write_json(results / "summary.json", summary)
            (results / "report.md").write_text(module.report(summary), encoding="utf-8")
    except FicError as err:
        print(f"error: study-{module.NAME}: {err}", file=sys.stderr)
        return 1
    progress(f"wrote {results / 'summary.json'}, report.md and curve.png ({summary['minutes']:.1f} min in all)")
    return 0
