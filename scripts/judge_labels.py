#!/usr/bin/env python
"""Build the blind review folders for labelling probe samples, and collect the labels into labels/followup/.

    python scripts/judge_labels.py pool PROBE_DIR [PROBE_DIR ...] --model NAME --out outputs/label_review
    python scripts/judge_labels.py collect outputs/label_review --out labels/followup

`pool` merges the probe folders' samples.jsonl, drops every judge field (label, genuine, confidence, rationale,
judge, generic_genuine) so not even the files an annotator could open hold a verdict, assigns each *item* (dataset,
item_id) to train / dev / test (per dataset, by a fixed hash order: half train, a fifth dev, the rest test; all
samples of an item share its split), and writes three `fic review` folders: `A` and `B` (the items split in two
halves, each labelled by one annotator; a half may be split further, by item, into `A1`, `A2`, ... for more
annotators) and `double` (100 samples drawn from both halves, labelled again by a third annotator who never sees the
first labels). `collect` joins the annotations back (`fic review` writes them into `FOLDER/review/annotations.json`)
and writes `labels.jsonl` (one row per sample: identity, messages, user_turn, split, label, genuine, annotator,
reader) and `double.jsonl` (the second labels), then prints the double-labelling kappa. `annotator` is who labelled,
`reader` the reader id of the `fic review` plan (`r1` for a folder with one reader).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

JUDGE_FIELDS = ("label", "genuine", "confidence", "rationale", "judge", "extra", "correct", "generic_genuine")
SPLITS = (("train", 0.5), ("dev", 0.2), ("test", 0.3))


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def item_splits(rows: list[dict]) -> dict[tuple[str, str], str]:
    """(dataset, item_id) -> split, per dataset in a fixed hash order."""
    by_dataset: dict[str, set[str]] = {}
    for row in rows:
        by_dataset.setdefault(row["dataset"], set()).add(str(row["item_id"]))
    splits = {}
    for dataset, items in by_dataset.items():
        ordered = sorted(items, key=lambda item: _hash(f"{dataset}:{item}"))
        n_train, n_dev = round(len(ordered) * SPLITS[0][1]), round(len(ordered) * SPLITS[1][1])
        for i, item in enumerate(ordered):
            splits[(dataset, item)] = "train" if i < n_train else "dev" if i < n_train + n_dev else "test"
    return splits


def _write(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "samples.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def pool(args) -> int:
    rows = []
    for probe_dir in args.probe_dirs:
        for line in open(Path(probe_dir) / "samples.jsonl", encoding="utf-8"):
            row = {k: v for k, v in json.loads(line).items() if k not in JUDGE_FIELDS}
            rows.append({"model": args.model, **row})
    splits = item_splits(rows)
    for row in rows:
        row["split"] = splits[(row["dataset"], str(row["item_id"]))]
    items = sorted({(r["dataset"], str(r["item_id"])) for r in rows}, key=lambda k: _hash(f"half:{k}"))
    half = set(items[::2])
    first = [r for r in rows if (r["dataset"], str(r["item_id"])) in half]
    second = [r for r in rows if (r["dataset"], str(r["item_id"])) not in half]
    rng = random.Random(args.seed)
    double = rng.sample(first, min(50, len(first))) + rng.sample(second, min(50, len(second)))
    out = Path(args.out)
    _write(out / "A", first)
    _write(out / "B", second)
    _write(out / "double", double)
    counts = {s: sum(r["split"] == s for r in rows) for s, _ in SPLITS}
    print(f"{len(rows)} samples, {len(items)} items; A {len(first)}, B {len(second)}, double {len(double)}; {counts}")
    return 0


def _annotated(folder: Path) -> list[dict]:
    """The folder's samples with their annotations, in file order (only annotated ones)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from fic.eval.review.store import annotated_rows

    # read only: the folder's review plan (seed, sample, readers) is left as it is
    return [{**row, **{k: note[k] for k in ("label", "genuine", "annotator", "reader")}}
            for row, note in annotated_rows(folder)]  # fmt: skip


def _identity(row: dict) -> str:
    return json.dumps([row.get(k) for k in ("model", "dataset", "item_id", "temperature", "perturbation",
                                            "sample")], default=str)  # fmt: skip


def collect(args) -> int:
    from fic.metrics import agreement, cohen_kappa

    review = Path(args.review_dir)
    primary = [row for folder in sorted(review.iterdir()) if folder.is_dir() and folder.name != "double"
               for row in _annotated(folder)]  # fmt: skip
    second = _annotated(review / "double")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("labels.jsonl", primary), ("double.jsonl", second)):
        with open(out / name, "w", encoding="utf-8") as f:
            for row in sorted(rows, key=_identity):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    first_by_id = {_identity(r): r for r in primary}
    pairs = [(first_by_id[_identity(r)], r) for r in second if _identity(r) in first_by_id]
    report = {"labelled": len(primary), "double_labelled": len(pairs)}
    if pairs:
        a, b = zip(*pairs)
        report["binary_kappa"] = cohen_kappa([x["genuine"] for x in a], [x["genuine"] for x in b])
        report["binary_agreement"] = agreement([x["genuine"] for x in a], [x["genuine"] for x in b])
        report["label_kappa"] = cohen_kappa([x["label"] for x in a], [x["label"] for x in b])
        report["label_agreement"] = agreement([x["label"] for x in a], [x["label"] for x in b])
    (out / "double_agreement.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pool", help="build the blind review folders")
    p.add_argument("probe_dirs", nargs="+")
    p.add_argument(
        "--model", required=True, help="the model that wrote the samples (kept out of the annotators' view)"
    )
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("collect", help="join the annotations into labels/followup/")
    c.add_argument("review_dir")
    c.add_argument("--out", default="labels/followup")
    args = parser.parse_args(argv)
    return pool(args) if args.command == "pool" else collect(args)


if __name__ == "__main__":
    sys.exit(main())
