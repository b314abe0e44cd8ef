#!/usr/bin/env python
"""Write tests/data/ from the shared data folder: the few rows the tests read, verbatim, in the files' own formats.

    python tests/data/make_test_data.py [--source ../shared/data]   # rewrite tests/data
    python tests/data/make_test_data.py --check                     # tests/data is what this would write

JSONL rows are copied byte for byte; a JSON file's subset is written with the serialization the full file has (each
`FORMAT` entry reproduces its whole source file exactly, which `write` checks). The selection rules are in `PICK`;
tests/data/SOURCE.md says where each file comes from and under which license.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_SOURCE = Path(os.environ.get("FIC_SHARED_DATA", ROOT.parent / "shared" / "data"))

# json.dumps keywords that reproduce each JSON file byte for byte; JSONL lines are copied unchanged.
FORMAT = {
    "ambigqa/dev_light.json": {"ensure_ascii": True},
    "lost_in_conversation/sample_5_per_task.json": {"ensure_ascii": True, "indent": 2},
    "lost_in_conversation/sharded_translation.json": {"ensure_ascii": True, "indent": 4},
    "products_dummyjson/products.json": {"ensure_ascii": False, "indent": 2},
}
LICENSES = {
    "ambigqa": ["LICENSE"],
    "gsm8k": ["LICENSE"],
    "healthbench": ["LICENSE"],
    "ifbench": ["LICENSE-code-Apache-2.0"],
    "ifeval": ["LICENSE-Apache-2.0"],
    "lost_in_conversation": ["LICENSE-github-MIT"],
    "mt_bench": ["LICENSE"],
    "products_dummyjson": ["LICENSE"],
}
CHAT_TEMPLATES = "chat_templates"  # copied whole: ten small template files and special_tokens.json


def _first(n: int):
    return lambda rows: list(range(min(n, len(rows))))


def _gsm8k_test(rows: list[dict]) -> list[int]:
    """The first 50 rows and the first row whose final answer has a thousands separator ("#### 2,125")."""
    comma = next(i for i, r in enumerate(rows) if "," in r["answer"].rsplit("####", 1)[1])
    return sorted({*range(50), comma})


def _ifbench(rows: list[dict]) -> list[int]:
    """The first 10 rows and the first row with two instructions."""
    two = next(i for i, r in enumerate(rows) if len(r["instruction_id_list"]) == 2)
    return sorted({*range(10), two})


def _healthbench(rows: list[dict]) -> list[int]:
    """The 12 shortest single-turn rows (the collab part's dev split draws 10) and the 3 shortest multi-turn ones."""
    size = lambda i: (len(json.dumps(rows[i])), i)  # noqa: E731
    single = sorted((i for i, r in enumerate(rows) if len(r["prompt"]) == 1), key=size)[:12]
    multi = sorted((i for i, r in enumerate(rows) if len(r["prompt"]) > 1), key=size)[:3]
    return sorted(single + multi)


def _ambigqa(rows: list[dict]) -> list[int]:
    """The first 40 questions and the St. Louis Cardinals one (three disambiguations)."""
    cardinals = next(i for i, r in enumerate(rows) if r["question"].startswith("Why did the st louis cardinals"))
    return sorted({*range(40), cardinals})


def _lic_sample(rows: list[dict]) -> list[int]:
    """The shortest record of each task."""
    best: dict[str, int] = {}
    for i, r in enumerate(rows):
        if r["task"] not in best or len(json.dumps(r)) < len(json.dumps(rows[best[r["task"]]])):
            best[r["task"]] = i
    return sorted(best.values())


def _lic_translation(rows: list[dict]) -> list[int]:
    """The first document and those whose last shard is empty (the reader drops it)."""
    empty = [i for i, r in enumerate(rows) if not r["shards"][-1]["shard"].strip()]
    return sorted({0, *empty})


def _products(rows: list[dict]) -> list[int]:
    """The first 20 products: beauty, fragrances, furniture (brands) and groceries (no brand), 5 each."""
    return list(range(20))


PICK = {
    "gsm8k/test.jsonl": _gsm8k_test,
    "gsm8k/train.jsonl": _first(64),
    "ifeval/input_data.jsonl": _first(5),
    "ifbench/IFBench_test.jsonl": _ifbench,
    "mt_bench/question.jsonl": _first(80),  # all: the collab part's held-out, dev and training splits need them
    "mt_bench/reference_answer_gpt-4.jsonl": _first(30),  # all: the real arm needs more than 20 conversations
    "healthbench/oss_eval_first30.jsonl": _healthbench,
    "ambigqa/dev_light.json": _ambigqa,
    "lost_in_conversation/sample_5_per_task.json": _lic_sample,
    "lost_in_conversation/sharded_translation.json": _lic_translation,
    "products_dummyjson/products.json": _products,
}


def subset(source: Path, relative: str) -> tuple[bytes, list[int]]:
    """The bytes of `relative`'s subset and the 0-based row indices it keeps."""
    raw = (source / relative).read_text(encoding="utf-8")
    if relative in FORMAT:
        rows = json.loads(raw)
        if json.dumps(rows, **FORMAT[relative]) != raw:
            raise SystemExit(f"{relative}: FORMAT[{relative!r}] no longer reproduces the file; update it")
        keep = PICK[relative](rows)
        return json.dumps([rows[i] for i in keep], **FORMAT[relative]).encode(), keep
    lines = raw.split("\n")
    ends_with_newline = lines[-1] == ""
    lines = lines[:-1] if ends_with_newline else lines
    keep = PICK[relative]([json.loads(line) for line in lines])
    text = "\n".join(lines[i] for i in keep) + ("\n" if ends_with_newline else "")
    return text.encode(), keep


def planned(source: Path) -> dict[str, bytes]:
    """Every file of tests/data (relative path -> bytes) but SOURCE.md and this script."""
    files = {}
    for relative in PICK:
        files[relative], _ = subset(source, relative)
    for folder, names in LICENSES.items():
        for name in names:
            files[f"{folder}/{name}"] = (source / folder / name).read_bytes()
    for path in sorted((source / CHAT_TEMPLATES).iterdir()):
        if path.suffix in (".jinja", ".json"):
            files[f"{CHAT_TEMPLATES}/{path.name}"] = path.read_bytes()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the shared data folder")
    parser.add_argument("--check", action="store_true", help="compare tests/data with what would be written")
    args = parser.parse_args(argv)
    if not args.source.is_dir() or args.source.resolve() == HERE:
        print(f"error: no shared data folder at {args.source}; pass --source", file=sys.stderr)
        return 2
    files = planned(args.source)
    if args.check:
        differ = [r for r, data in files.items() if not (HERE / r).is_file() or (HERE / r).read_bytes() != data]
        for relative in differ:
            print(f"differs: tests/data/{relative}", file=sys.stderr)
        return 1 if differ else 0
    for folder in {r.split("/")[0] for r in files}:
        shutil.rmtree(HERE / folder, ignore_errors=True)
    for relative, data in files.items():
        (HERE / relative).parent.mkdir(parents=True, exist_ok=True)
        (HERE / relative).write_bytes(data)
    for relative in PICK:
        data, keep = files[relative], subset(args.source, relative)[1]
        rows = f"{len(keep)} rows: {_ranges(keep)}"
        print(f"| {relative} | {rows} | {len(data)} | `{hashlib.sha256(data).hexdigest()[:16]}` |")
    return 0


def _ranges(indices: list[int]) -> str:
    """`[0, 1, 2, 5]` -> "0-2, 5" (0-based row numbers)."""
    out, start = [], None
    for k, i in enumerate(indices):
        start = i if start is None else start
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            out.append(f"{start}" if start == i else f"{start}-{i}")
            start = None
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
