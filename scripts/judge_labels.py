#!/usr/bin/env python
"""Build the blind review folders for labelling probe samples, and collect the labels into labels/followup/.

    python scripts/judge_labels.py pool PROBE_DIR [PROBE_DIR ...] --model NAME --out outputs/label_review
    python scripts/judge_labels.py collect outputs/label_review --out labels/followup
    python scripts/judge_labels.py add PROBE_DIR=MODEL [PROBE_DIR=MODEL ...] [--double DIR=MODEL ...]

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

`add` appends the labelled turns of probe folders (each labelled in `fic review`, one or several readers) to
`--out` (`trained_fit.jsonl`: the trained models' turns the `strict` judge is fitted on) under the model name given,
on new items only (an item that already has a label there or in `--labels` is refused: its split is fixed), 3 in 10
items to dev and the rest to train by a hash of the item; `--double` folders hold a second, independent reader's
labels of some of the same turns, written to `--double-out` with their agreement.
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


def _named(spec: str) -> tuple[Path, str]:
    folder, sep, model = spec.rpartition("=")
    if not sep or not folder or not model:
        raise SystemExit(f"{spec!r}: name each folder's model as DIR=MODEL")
    return Path(folder), model


def _named_offset(spec: str) -> tuple[str, int]:
    dataset, sep, offset = spec.partition("=")
    if not sep or not offset.isdigit():
        raise SystemExit(f"{spec!r}: give an item offset as DATASET=N")
    return dataset, int(offset)


def _offset(row: dict, offsets: dict[str, int]) -> dict:
    """A row whose positional item id counts from line `offsets[dataset]` of the full file (a probe of a slice of it)."""
    if row["dataset"] in offsets:
        row["item_id"] = str(int(row["item_id"]) + offsets[row["dataset"]])
    return row


def _fit_split(row: dict, dev_share: float = 0.3) -> str:
    return "dev" if int(_hash(f"{row['dataset']}/{row['item_id']}")[:8], 16) / 16**8 < dev_share else "train"


def add(args) -> int:
    from fic.metrics import agreement, cohen_kappa

    out = Path(args.out)
    existing = [json.loads(line) for path in {*map(Path, args.labels), out} if path.is_file()
                for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]  # fmt: skip
    taken = {(r["dataset"], str(r["item_id"])) for r in existing}
    offsets = dict(_named_offset(spec) for spec in args.item_offset)
    new = []
    for spec in args.probe_dirs:
        folder, model = _named(spec)
        for row in _annotated(folder):
            clean = {k: v for k, v in row.items() if k not in ("confidence", "rationale", "judge", "extra", "correct",
                                                                "generic_genuine", "turn_sha")}  # fmt: skip
            new.append(_offset({**clean, "model": model}, offsets))
    for row in new:
        row["split"] = _fit_split(row)
    clash = sorted({(r["dataset"], str(r["item_id"])) for r in new} & taken)
    if clash:
        raise SystemExit(f"{len(clash)} items already have labels (e.g. {clash[0]}); add turns of new items only, so "
                         "every item keeps one split")  # fmt: skip
    with open(out, "a", encoding="utf-8") as f:
        for row in sorted(new, key=_identity):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = {"added": len(new), "genuine": sum(r["genuine"] for r in new),
              "splits": {s: sum(r["split"] == s for r in new) for s in ("train", "dev")}}  # fmt: skip
    if args.double:
        first = {(r["model"], r["dataset"], str(r["item_id"]), r["user_turn"]): r for r in new}
        second = [_offset({**row, "model": model}, offsets) for spec in args.double
                  for folder, model in [_named(spec)] for row in _annotated(folder)]  # fmt: skip
        with open(args.double_out, "w", encoding="utf-8") as f:
            for row in sorted(second, key=_identity):
                f.write(json.dumps({k: row[k] for k in ("model", "dataset", "item_id", "temperature", "sample",
                                                        "user_turn", "label", "genuine", "annotator", "reader")},
                                   ensure_ascii=False) + "\n")  # fmt: skip
        pairs = [(first[k], r) for r in second if (k := (r["model"], r["dataset"], str(r["item_id"]),
                                                         r["user_turn"])) in first]  # fmt: skip
        a, b = [x["genuine"] for x, _ in pairs], [y["genuine"] for _, y in pairs]
        report["double"] = {"pairs": len(pairs), "binary_kappa": round(cohen_kappa(a, b), 4),
                            "binary_agreement": round(agreement(a, b), 4)}  # fmt: skip
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
    a = sub.add_parser("add", help="append labelled probe folders (new items) to a labels file, train / dev")
    a.add_argument("probe_dirs", nargs="+", metavar="DIR=MODEL")
    a.add_argument("--out", default="labels/followup/trained_fit.jsonl", help="the labels file to append to")
    a.add_argument("--labels", nargs="*", default=["labels/followup/labels.jsonl"],
                   help="other labels files whose items may not be added again")  # fmt: skip
    a.add_argument("--double", nargs="*", default=[], metavar="DIR=MODEL", help="a second reader's folders")
    a.add_argument("--double-out", default="labels/followup/fit_pool_double.jsonl")
    a.add_argument("--item-offset", nargs="*", default=[], metavar="DATASET=N",
                   help="the folders probed a slice of DATASET's file from line N (0-based): item ids count from N")  # fmt: skip
    args = parser.parse_args(argv)
    return {"pool": pool, "collect": collect, "add": add}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
