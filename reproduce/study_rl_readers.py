"""The RL study's blind labels: the base model's held-out turns and each seed's last checkpoint's, read in one pooled
blind session with foils (`fic review BASE SEED0 SEED1 ... --sample 30 --seed 0 --foil-share 0.25 --readers 2`, on
copies under shuffled names), committed as `labels/followup/study_rl/MODEL.jsonl` (real turns) and
`labels/followup/study_rl_foils/MODEL.jsonl` (foils), MODEL being `base` or `seedN`.

The labels attach to this run's turns by turn hash, as the collab part's do (`collab_labels`: a label whose turn's text
differs here is left out and named; more than half differing refuses the file), through a folder of links
(`OUT/readers/probe_MODEL` -> the probe folder). Read off them: each model's calibrated rate (PPI++ with the training
judge's verdicts), the readers' genuine rate, floor and floor-subtracted reading, and per seed the readers' gain over
the base model, its floor rise and the gain minus that rise (`collab_labels.reader_figures`, Holm-adjusted over the
seeds); and the seeds pooled: the same three figures of the last checkpoints against the base model, with an interval
that resamples contexts and seeds together (`fic.reader_floor.seeded_reader_difference`). Without labels, the command
that makes them.
"""

from __future__ import annotations

from pathlib import Path

import repro
import study
from collab_labels import FOIL_SHARE, calibrated_rates, foil_labels, reader_figures

LABELS = repro.ROOT / "labels" / "followup" / "study_rl"
FOILS = repro.ROOT / "labels" / "followup" / "study_rl_foils"
SAMPLE = 30
# What the summary keeps of a model's calibrated entry (not the machine's paths or the collab part's rerun line).
KEEP = ("status", "n_labels", "left_out", "left_out_keys", "labelled_rate", "overall", "by_dataset")


def folders(out: Path, seeds: list[int], last: int) -> dict[str, Path]:
    """The probe folder of each labelled model: `base` (step 0) and `seedN` (the seed's last checkpoint)."""
    found = {"base": out / "probe_base"}
    for seed in seeds:
        found[f"seed{seed}"] = out / "train" / f"seed{seed}" / f"checkpoint-{last}" / "eval" / "probe"
    return found


def review_command(probes: dict[str, Path]) -> str:
    """The pooled blind session (run it on copies under shuffled names, so no folder name tells the model)."""
    return (f"fic review {' '.join(str(p) for p in probes.values())} --sample {SAMPLE} --seed 0 --foil-share "
            f"{FOIL_SHARE:g} --readers 2 --reader rK")  # fmt: skip


def _linked(out: Path, probes: dict[str, Path]) -> Path:
    """`OUT/readers/probe_MODEL` -> each probe folder, the layout `collab_labels` reads."""
    root = out / "readers"
    root.mkdir(parents=True, exist_ok=True)
    for name, folder in probes.items():
        link = root / f"probe_{name}"
        if link.is_symlink() and link.resolve() != folder.resolve():
            link.unlink()
        if not link.exists():
            link.symlink_to(folder.resolve(), target_is_directory=True)
    return root


def _rel(path: Path) -> str:
    return str(path.relative_to(repro.ROOT)) if path.is_relative_to(repro.ROOT) else str(path)


def pooled(base: tuple[list, list], arms: dict[int, tuple[list, list]]) -> dict:
    """Per reading (`counted`, `not_counted`): `fic.reader_floor.seeded_reader_difference` of the seeds' (real, foil)
    label rows against the base model's, or "unknown" where a genuine label carries no context_free flag."""
    from fic.reader_floor import READINGS, flag_state, seeded_reader_difference

    rows = [*base[0], *base[1], *(r for real, foils in arms.values() for r in (*real, *foils))]
    return {reading: ("unknown" if reading == "not_counted" and not flag_state(rows)["known"] else
                      seeded_reader_difference(*base, {s: a[0] for s, a in arms.items()},
                                               {s: a[1] for s, a in arms.items()}, reading))
            for reading in READINGS}  # fmt: skip


def figures(out: Path, seeds: list[int], last: int, labels: Path | None = None, foils: Path | None = None) -> dict:
    """The readers' figures of the base model and each seed's last checkpoint (see the module docstring):
    `{"labels", "foils", "calibrated": {model: ...}, "readers": reader_figures, "pooled": {reading: ...} (`pooled`)
    or None, "note"}`; `note` names the models without labels and the command that makes them."""
    labels, foils = labels or LABELS, foils or FOILS
    probes = folders(out, seeds, last)
    root = _linked(out, probes)
    models = list(probes)
    label_rows: dict[str, list[dict]] = {}
    calibrated = calibrated_rates(root, models, committed=labels, label_rows=label_rows)
    rows = {name: repro.read_jsonl(folder / "samples.jsonl") for name, folder in probes.items()}
    readers = reader_figures(root, models, label_rows, rows, committed_foils=foils)
    for entry in readers["models"].values():
        entry["foil_labels"] = {k: v for k, v in entry["foil_labels"].items() if k in KEEP}
    _, foil_rows = foil_labels(root, models, foils)
    missing = [k for k in models if k not in label_rows or k not in foil_rows]
    together, note = None, ""
    if missing:
        note = f"no blind labels (real and foil) yet for {', '.join(missing)}: {review_command(probes)}"
    else:
        together = pooled((label_rows["base"], foil_rows["base"]),
                          {s: (label_rows[f"seed{s}"], foil_rows[f"seed{s}"]) for s in seeds})  # fmt: skip
    return {"labels": _rel(labels), "foils": _rel(foils),
            "calibrated": {k: {x: v[x] for x in KEEP if x in v} for k, v in calibrated.items()},
            "readers": readers, "pooled": together, "note": note}  # fmt: skip


def _cell(cell: dict | None) -> str:
    """A rate `12.5 [5.0, 20.1] n=30` or a difference `+12.5 [+2.0, +23.1] (p 0.04)`, percent; n/a or the note."""
    if not cell:
        return "n/a"
    if "diff" in cell:
        p = cell.get("p_holm", cell.get("p"))
        return study.interval_text(cell) + ("" if cell["diff"] is None or p is None else f" (p {p:.2f})")
    return repro.rate_cell(cell)


def report_lines(figs: dict) -> list[str]:
    """The Markdown of the blind labels: per model the readers' rate, floor and the calibrated rate; per seed and
    pooled the gain over the base model, the floor rise and the gain minus the rise (context-free requests counted
    as genuine, the guideline's label)."""
    lines = ["## Blind labels of the last checkpoints", ""]
    if figs["note"]:
        lines += [figs["note"], ""]
    models = figs["readers"]["models"]
    lines += [f"Real labels: `{figs['labels']}/MODEL.jsonl`; foils (the readers' floor): `{figs['foils']}/MODEL.jsonl`.",
              "", "| model | labels | readers' genuine % [95%] | readers' floor % [95%] | calibrated % [95%] |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, cal in figs["calibrated"].items():
        counted = models[name].get("counted") or {}
        lines.append(f"| {name} | {cal['status']}; {models[name]['foil_labels']['status']} | "
                     f"{_cell(counted.get('genuine'))} | {_cell(counted.get('floor'))} | "
                     f"{repro.interval_cell(cal.get('overall'))} |")  # fmt: skip
    rows = [
        (name, d["counted"]) for name, d in figs["readers"]["differences"].items() if isinstance(d["counted"], dict)
    ]
    if figs["pooled"] and isinstance(figs["pooled"]["counted"], dict):
        rows.append((f"seeds pooled ({figs['pooled']['counted']['n_seeds']}, seeds and items resampled)",
                     figs["pooled"]["counted"]))  # fmt: skip
    if rows:
        lines += ["", "Against the base model, percentage points (per seed: items resampled, p Holm-adjusted over the "
                  "seeds; pooled: items and seeds resampled):", "",
                  "| last checkpoint | readers' gain | floor rise | gain minus floor rise |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {name} | {_cell(d['gain'])} | {_cell(d['floor_rise'])} | {_cell(d['floor_subtracted_gain'])} |"
                  for name, d in rows]  # fmt: skip
    return [*lines, ""]
