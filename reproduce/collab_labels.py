"""The collab part's blind labels: this run's (`fic review PROBE_FOLDER --sample 30`) or the committed ones of
`labels/followup/collab`, the calibrated rates and paired differences they give, and the targets read off them."""

from __future__ import annotations

import json
from pathlib import Path

import repro
from collab_settings import DATASETS, SETTINGS

COMMITTED_LABELS = repro.ROOT / "labels" / "followup" / "collab"


def review_command(folder: Path) -> str:
    return f"fic review {folder} --sample 30 --seed {SETTINGS['seed']}"


def calibrated_rates(out: Path, models: list[str], committed: Path | None = None,
                     label_maps: dict | None = None) -> dict:  # fmt: skip
    """Per model: the calibrated (PPI++) rate per dataset and overall from `probe_MODEL/labels.jsonl` (written by
    `fic review ... --sample 30`), else from the committed `labels/followup/collab/MODEL.jsonl` (blind labels of an
    earlier run's turns: a label attaches only where its turn's text hashes the same in this run, and at least half
    of them must; `committed_labels`), or the command to write them; labels are never made up here. The rates are
    the `calibrated` cells of the summary `fic rates PROBE_FOLDER --labels FILE` writes
    (`fic.followup_summary.summarize`, items inside the judge's fit left out), computed here without rewriting the
    probe's summary.json. `label_maps`, when given, receives each labelled model's `{row key: genuine}` (for
    `calibrated_differences`)."""
    committed = COMMITTED_LABELS if committed is None else committed
    from fic.eval.rates import LABELS_FILE, META_FILE, RatesError, overlap_items, read_labels
    from fic.followup_summary import row_key, summarize

    rerun = f"rm {out / 'section.json'}; python reproduce/run.py --parts collab --out {out.parent}"
    result = {}
    for name in models:
        folder = out / f"probe_{name}"
        entry = {"folder": str(folder), "command": review_command(folder), "then": rerun}
        labels_path, changed = folder / LABELS_FILE, []
        rows = repro.read_jsonl(folder / "samples.jsonl")
        if not labels_path.is_file() and (committed / f"{name}.jsonl").is_file():
            entry["committed"] = str(committed / f"{name}.jsonl")
            labels_path, changed = committed_labels(committed / f"{name}.jsonl", rows, folder)
        if not labels_path.is_file():
            result[name] = {**entry, "status": "no labels yet", "n_labels": 0}
            continue
        entry["labels"] = str(labels_path)
        meta = repro.read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
        try:
            labels = read_labels(labels_path, rows, meta.get("run_id"), folder)
            if len(changed) > len(labels):
                raise RatesError(f"{len(changed)} of {len(changed) + len(labels)} labelled turns differ in this run: "
                                 "labels of another run")  # fmt: skip
        except RatesError as err:
            result[name] = {**entry, "status": f"labels not usable: {err}", "n_labels": 0}
            continue
        label_map = {row_key(r): bool(r["genuine"]) for r in labels}
        if label_maps is not None:
            label_maps[name] = label_map
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


def committed_labels(path: Path, rows: list[dict], folder: Path) -> tuple[Path, list[str]]:
    """The committed labels of `path` whose turn's text hashes the same in this run's `rows`, written to
    `folder/labels_committed.jsonl`, and how many were left out. A rerun on CPU reproduces nearly every turn, but a
    sampled token can change in a few (float order); those labels describe another text and are not used. A line
    that is not a label is kept, so that `read_labels` names it."""
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
        elif line.strip():
            kept.append(line)
    out = folder / "labels_committed.jsonl"
    out.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return out, changed
