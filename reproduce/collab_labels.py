"""The collab part's blind labels: this run's (`fic review PROBE_FOLDER --sample 30`) or the committed ones of
`labels/followup/collab`, the calibrated rates and paired differences they give, and the targets read off them; and
the readers' generic floor: their labels of foil turns (`fic review ... --foil-share S`: a model's turn shown after
another context's conversation), this run's `foil_labels.jsonl` or the committed `labels/followup/collab_foils`, and
what `fic.reader_floor` reads off real and foil labels together (`reader_figures`)."""

from __future__ import annotations

import json
from pathlib import Path

import repro
from collab_settings import DATASETS, SETTINGS

COMMITTED_LABELS = repro.ROOT / "labels" / "followup" / "collab"
# Foil labels in a folder of their own, so the scripts that read every labels/followup/collab/*.jsonl never see them.
COMMITTED_FOILS = repro.ROOT / "labels" / "followup" / "collab_foils"
# Where the committed labels that attach to this run are written in a probe folder (never over the run's own files).
COMMITTED_COPY, COMMITTED_FOIL_COPY = "labels_committed.jsonl", "foil_labels_committed.jsonl"
# A quarter of each model's turns in the session are foils (10 beside 30 real ones: `fic.eval.review.foils`). Not in
# settings/collab.json: it decides which turns are labelled, not a turn, and a new key there would refuse to resume a
# part folder made before it.
FOIL_SHARE = 0.25
NOT_MEASURED = (
    "The readers' floor is not measured yet: no foil labels (`fic review OUT/collab/probe_* --sample 30 --seed 0 "
    f"--foil-share {FOIL_SHARE:g}` mixes them into the blind session; committed as "
    "labels/followup/collab_foils/MODEL.jsonl)."
)


def review_command(folder: Path) -> str:
    return f"fic review {folder} --sample 30 --seed {SETTINGS['seed']}"


def foil_review_command(folder: Path) -> str:
    return f"{review_command(folder)} --foil-share {FOIL_SHARE:g}"


def calibrated_rates(out: Path, models: list[str], committed: Path | None = None,
                     label_maps: dict | None = None, label_rows: dict | None = None) -> dict:  # fmt: skip
    """Per model: the calibrated (PPI++) rate per dataset and overall from `probe_MODEL/labels.jsonl` (written by
    `fic review ... --sample 30`), else from the committed `labels/followup/collab/MODEL.jsonl` (blind labels of an
    earlier run's turns: a label attaches only where its turn's text hashes the same in this run, and at least half
    of them must; `committed_labels`), or the command to write them; labels are never made up here. The rates are
    the `calibrated` cells of the summary `fic rates PROBE_FOLDER --labels FILE` writes
    (`fic.followup_summary.summarize`, items inside the judge's fit left out), computed here without rewriting the
    probe's summary.json. `label_maps`, when given, receives each labelled model's `{row key: genuine}` (for
    `calibrated_differences`), `label_rows` its label rows (for `reader_figures`)."""
    committed = COMMITTED_LABELS if committed is None else committed
    from fic.eval.rates import LABELS_FILE, overlap_items, read_labels
    from fic.followup_summary import row_key, summarize

    rerun = f"rm {out / 'section.json'}; python reproduce/run.py --parts collab --out {out.parent}"
    result = {}
    for name in models:
        folder = out / f"probe_{name}"
        found = attach(folder, LABELS_FILE, committed / f"{name}.jsonl", COMMITTED_COPY, read_labels, "labelled")
        entry = {"folder": str(folder), "command": review_command(folder), "then": rerun, **found["entry"]}
        if found["error"]:
            result[name] = {**entry, "status": found["error"], "n_labels": 0}
            continue
        labels, changed, rows, meta = found["labels"], found["changed"], found["rows"], found["meta"]
        label_map = {row_key(r): bool(r["genuine"]) for r in labels}
        if label_maps is not None:
            label_maps[name] = label_map
        if label_rows is not None:
            label_rows[name] = labels
        summary = summarize(rows, labels=labels, excluded=overlap_items(meta))
        by_dataset = {d: (summary["by_dataset"].get(d) or {}).get("calibrated") for d in DATASETS}
        status = f"{len(labels)} of {len(labels) + len(changed)} labels attach" + (
            f" ({len(changed)} labelled turn(s) differ in this run, left out: {', '.join(changed)})" if changed else ""
        )
        result[name] = {**entry, "status": status, "n_labels": len(labels), "left_out": len(changed),
                        "left_out_keys": changed,
                        "labelled_rate": sum(label_map.values()) / len(label_map) if label_map else None,
                        "overall": summary["overall"]["calibrated"], "by_dataset": by_dataset}  # fmt: skip
    return result


def calibrated_differences(rows: dict[str, list[dict]], label_maps: dict[str, dict]) -> dict:
    """Per labelled trained model: the calibrated (PPI++) difference from the base model on the same held-out
    contexts, paired by context, pooled and per dataset (`fic.followup_summary.compare_calibrated`), with the fields
    summary.json keeps; "not estimable" where fewer than 10 contexts hold labels (HealthBench has 9)."""
    from fic.followup_summary import compare_calibrated

    if "base" not in label_maps:
        return {}
    keep = ("diff", "low", "high", "p", "n_items", "detectable", "note", "reading")
    out = {}
    for name, labels in label_maps.items():
        if name == "base":
            continue
        both = compare_calibrated(rows["base"], rows[name], label_maps["base"], labels)
        out[name] = {"overall": {k: both["overall"].get(k) for k in keep} if both["overall"] else None,
                     "by_dataset": {d: {k: c.get(k) for k in keep} for d, c in both["by_dataset"].items() if c}}  # fmt: skip
    return out


def floor_rise(estimates: dict, name: str, dataset: str = "overall") -> float | None:
    """The model's generic floor minus the base model's (the judge's share of context-free turns), pooled or per
    dataset: what part of a judged gain any answer would earn."""

    def floor(k: str) -> float | None:
        return ((estimates[k].get(dataset) or {}).get("generic_floor") or {}).get("rate")

    mine, base = floor(name), floor("base")
    return None if mine is None or base is None else mine - base


def calibrated_target(name: str, what: str, cal: dict, rise: float | None, at_least: float) -> repro.Target:
    """A target read off the calibrated paired difference from base (pooled): its lower end minus the model's rise in
    generic floor must reach `at_least` (never a point estimate)."""
    entry = (cal.get(name) or {}).get("overall") or {}
    low = entry.get("low")
    rise_text = "n/a" if rise is None else f"{100 * rise:+.1f}"
    measured = (
        f"calibrated {entry.get('reading', 'not labelled')}; generic floor {rise_text} points vs base; "
        f"lower end minus floor rise: {'n/a' if low is None or rise is None else f'{100 * (low - rise):+.1f}'}"
    )
    met = low is not None and rise is not None and low - rise >= at_least
    target = f"lower end of the calibrated difference minus the generic-floor rise >= {100 * at_least:+.0f} points"
    return repro.Target(what, target, measured, met)


def attach(folder: Path, own: str, committed: Path, copy_name: str, read, what: str) -> dict:
    """A probe folder's labels of one kind: its own file `own` (written by `fic review`), else the committed file
    attached by turn hash into `copy_name` (`committed_labels`), read with `read` (`read_labels` / `read_foil_labels`).
    Returns {entry (where they came from), labels, changed (keys left out), rows, meta, error}: `error` is "no labels
    yet" or why the labels are not usable (more than half of `what` turns differ: labels of another run)."""
    from fic.eval.rates import META_FILE, RatesError

    entry, path, changed = {}, folder / own, []
    rows = repro.read_jsonl(folder / "samples.jsonl")
    if not path.is_file() and committed.is_file():
        entry["committed"] = str(committed)
        path, changed = committed_labels(committed, rows, folder, copy_name)
    found = {"entry": entry, "labels": None, "changed": changed, "rows": rows, "meta": {}, "error": None}
    if not path.is_file():
        return {**found, "error": "no labels yet"}
    entry["labels"] = str(path)
    meta = repro.read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
    try:
        labels = read(path, rows, meta.get("run_id"), folder)
        if len(changed) > len(labels):
            raise RatesError(f"{len(changed)} of {len(changed) + len(labels)} {what} turns differ in this run: "
                             "labels of another run")  # fmt: skip
    except RatesError as err:
        return {**found, "meta": meta, "error": f"labels not usable: {err}"}
    return {**found, "labels": labels, "meta": meta}


def committed_labels(path: Path, rows: list[dict], folder: Path,
                     name: str = COMMITTED_COPY) -> tuple[Path, list[str]]:  # fmt: skip
    """The committed labels of `path` whose turn's text hashes the same in this run's `rows`, written to
    `folder/name` (`labels_committed.jsonl`; foil labels: `foil_labels_committed.jsonl`), and the keys of those left
    out. A rerun on CPU reproduces nearly every turn, but a sampled token can change in a few (float order); those
    labels describe another text and are not used. A label that attaches by its hash loses the `run_id` of the run it
    was made on (each run draws its own; the hash is the check); a line that is not a label is kept, so that
    `read_labels` names it."""
    from fic.eval.rates import turn_sha
    from fic.followup_summary import row_key

    texts = {row_key(r): turn_sha(r["user_turn"]) for r in rows}
    kept, changed = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            label = json.loads(line)
            now, then = texts.get(row_key(label)), label.get("turn_sha")
        except (ValueError, KeyError, TypeError, AttributeError):
            now = then = None
        if now is not None and then is not None and now != then:
            changed.append("|".join(map(str, row_key(label))))
        elif now is not None and now == then and "run_id" in label:
            kept.append(json.dumps({k: v for k, v in label.items() if k != "run_id"}, ensure_ascii=False))
        elif line.strip():
            kept.append(line)
    out = folder / name
    out.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return out, changed


def foil_labels(out: Path, models: list[str], committed: Path | None = None) -> tuple[dict, dict]:
    """Per model, the readers' labels of its foil turns, found as `calibrated_rates` finds the real ones: the probe
    folder's `foil_labels.jsonl` (`fic review ... --foil-share S`), else the committed
    `labels/followup/collab_foils/MODEL.jsonl` attached by turn hash (`committed_labels`, into
    `foil_labels_committed.jsonl`; refused when more than half differ). Returns (`{model: {status, n_foils,
    left_out, left_out_keys, command, ...}}`, `{model: foil label rows}` of the models whose labels are usable); the
    status says how many attached and names those that did not."""
    committed = COMMITTED_FOILS if committed is None else committed
    from fic.eval.rates import FOIL_LABELS_FILE, read_foil_labels

    status, found = {}, {}
    for name in models:
        folder = out / f"probe_{name}"
        got = attach(folder, FOIL_LABELS_FILE, committed / f"{name}.jsonl", COMMITTED_FOIL_COPY, read_foil_labels,
                     "labelled foil")  # fmt: skip
        entry = {"command": foil_review_command(folder), **got["entry"]}
        if got["error"]:
            text = (
                "no foil labels"
                if got["error"] == "no labels yet"
                else got["error"].replace("labels", "foil labels", 1)
            )
            status[name] = {**entry, "status": text, "n_foils": 0}
            continue
        foils, changed = got["labels"], got["changed"]
        text = f"{len(foils)} of {len(foils) + len(changed)} foil labels attach" + (
            f" ({len(changed)} labelled turn(s) differ in this run, left out: {', '.join(changed)})" if changed else ""
        )
        status[name] = {**entry, "status": text, "n_foils": len(foils), "left_out": len(changed),
                        "left_out_keys": changed}  # fmt: skip
        found[name] = foils
    return status, found


UNKNOWN = "unknown"
STATISTICS = ("gain", "floor_rise", "floor_subtracted_gain")


def _no_number(cell: dict | None, keys: tuple[str, ...]) -> dict | None:
    """A not-estimable cell without the point figures `fic.reader_floor` keeps beside its note (under
    `fic.estimates.MIN_CLUSTERS` items no number is reported, not even in summary.json)."""
    if cell is None or cell.get("note", "") == "":
        return cell
    return {**cell, **dict.fromkeys(keys)}


def _model_reading(entry: dict | None) -> dict | None:
    if entry is None:
        return None
    return {"genuine": entry["real"], "floor": entry["floor"],
            "floor_subtracted": _no_number(entry["floor_subtracted"], ("rate_real", "rate_foil"))}  # fmt: skip


def _difference(base_real, base_foils, arm_real, arm_foils, reading: str) -> dict | str:
    """`fic.reader_floor.reader_difference` under `reading`, each statistic with `detectable` (its interval excludes
    0) and `reading` (its text, or the note), as `fic.followup_summary.with_holm` reads them; "unknown" when the
    labels carry no context_free flag; no rates under 10 items."""
    from fic.followup_summary import reading as diff_reading
    from fic.reader_floor import flag_state, reader_difference

    if reading == "not_counted" and not flag_state([*base_real, *base_foils, *arm_real, *arm_foils])["known"]:
        return UNKNOWN
    out = reader_difference(base_real, base_foils, arm_real, arm_foils, reading, seed=SETTINGS["seed"])
    for stat in STATISTICS:
        cell = {**out[stat], "note": out["note"]}
        cell["detectable"] = cell["diff"] is not None and (cell["low"] > 0 or cell["high"] < 0)
        out[stat] = {**cell, "reading": diff_reading(cell)}
    if out["note"]:
        out["rates"] = dict.fromkeys(out["rates"])
    return out


def reader_figures(out: Path, models: list[str], label_rows: dict[str, list[dict]],
                   rows: dict[str, list[dict]], committed_foils: Path | None = None) -> dict:  # fmt: skip
    """The readers' figures of every model and every trained model against the base model (`fic.reader_floor`), from
    the real labels `calibrated_rates` attached (`label_rows`) and the foil labels `foil_labels` attaches.

    Returns `{"measured": any foil labels attached, "note": NOT_MEASURED or "", "models": {model: {"foil_labels":
    foil_labels' status, "n_real", "n_foils", "context_free": the flag's state, "counted" / "not_counted": {"genuine",
    "floor", "floor_subtracted"} ("unknown" where a genuine label carries no flag), "not_counted_note",
    "judge_floor_same_turns", "annotators": {real, foils, same} where both exist}}, "differences": {model: {"counted" /
    "not_counted": reader_difference with each statistic (gain, floor_rise, floor_subtracted_gain) Holm-adjusted over
    the trained models, or "unknown"}}}`.
    A model's readings need its real labels; a difference needs real and foil labels of the model and the base model.
    Every figure is not estimable (None, a note) under 10 labelled items."""
    from fic.followup_summary import with_holm
    from fic.reader_floor import READINGS, reader_readings

    status, foils = foil_labels(out, models, committed_foils)
    per_model = {}
    for name in models:
        real, mine = label_rows.get(name) or [], foils.get(name) or []
        entry = {"foil_labels": status[name], "n_real": len(real), "n_foils": len(mine)}
        if real and mine:  # the floor is the same readers' only if the same annotators labelled both
            who = {"real": sorted({str(r.get("annotator")) for r in real}),
                   "foils": sorted({str(r.get("annotator")) for r in mine})}  # fmt: skip
            entry["annotators"] = {**who, "same": who["real"] == who["foils"]}
        if real:
            r = reader_readings(real, mine, rows[name], seed=SETTINGS["seed"])
            entry.update({"context_free": r["context_free"], "counted": _model_reading(r["counted"]),
                          "not_counted": _model_reading(r["not_counted"]) or UNKNOWN,
                          "not_counted_note": r["not_counted_note"],
                          "judge_floor_same_turns": r["judge_floor_same_turns"]})  # fmt: skip
        per_model[name] = entry
    complete = [k for k in models if label_rows.get(k) and foils.get(k)]
    differences = {}
    if "base" in complete:
        base = (label_rows["base"], foils["base"])
        differences = {k: {reading: _difference(*base, label_rows[k], foils[k], reading) for reading in READINGS}
                       for k in complete if k != "base"}  # fmt: skip
    for reading in READINGS:
        for stat in STATISTICS:
            family = {k: d[reading][stat] for k, d in differences.items() if isinstance(d[reading], dict)}
            for k, cell in with_holm(family).items():
                differences[k][reading][stat] = cell
    measured = bool(foils)
    return {"measured": measured, "note": "" if measured else NOT_MEASURED, "models": per_model,
            "differences": differences}  # fmt: skip


def floor_subtracted_target(name: str, what: str, readers: dict, at_least: float) -> repro.Target:
    """A target read off the readers' floor-subtracted gain over the base model (their gain minus the rise of their
    floor, `reader_figures`): its lower end must reach `at_least` in every reading the labels allow (context-free
    requests counted genuine, and not counted where the labels carry the flag), and the difference must be detectable
    after Holm's adjustment over the trained models where it has one (the reading the table states); never a point
    estimate."""
    entry = (readers.get("differences") or {}).get(name) or {}
    parts, lows, holm = [], [], []
    for reading, words in (("counted", "context-free counted"), ("not_counted", "not counted")):
        d = entry.get(reading)
        if not isinstance(d, dict):
            parts.append(f"{words}: unknown (no context_free flag)" if d == UNKNOWN else f"{words}: not labelled")
            continue
        cell = d["floor_subtracted_gain"]
        parts.append(f"{words}: {cell['reading']}")
        lows.append(cell["low"])
        holm.append(cell.get("detectable_holm", True))
    met = (isinstance(entry.get("counted"), dict) and all(low is not None and low >= at_least for low in lows)
           and all(holm))  # fmt: skip
    target = f"lower end of the readers' gain minus their floor rise >= {100 * at_least:+.0f} points"
    return repro.Target(what, target, "readers' gain minus floor rise, " + "; ".join(parts), met)


def gain_target(name: str, what: str, readers: dict, cal: dict, rise: float | None, at_least: float) -> repro.Target:
    """The target of a trained model's gain over the base model: read off the readers' floor-subtracted gain
    (`floor_subtracted_target`) where the readers labelled foil turns of both models, else off the calibrated
    difference less the judge's generic-floor rise (`calibrated_target`)."""
    if name in (readers.get("differences") or {}):
        return floor_subtracted_target(name, what, readers, at_least)
    return calibrated_target(name, what, cal, rise, at_least)
