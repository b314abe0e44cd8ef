"""Append-only JSONL files that survive a crash: every evaluation writes its samples through here.

A run appends whole lines and flushes them, so a kill leaves at most one partial last line. `load_done` reads what
a previous run finished, detects that partial line, cuts it off (it will be redone) and returns the complete rows;
a rerun skips their keys, so an interrupted and resumed run writes exactly the rows of an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)


def load_done(path: str | Path) -> list[dict]:
    """Complete rows of `path` (empty if absent). A partial or corrupt trailing line is removed from the file."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    rows, good_end = [], 0
    for line in data.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("no newline")
            rows.append(json.loads(line))
        except ValueError:
            logger.warning("%s: dropping a partial line left by an interrupted run (it will be redone)", path)
            break
        good_end += len(line)
    if good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return rows


def append_rows(path: str | Path, rows: Iterable[dict]) -> None:
    """Append `rows` as JSON lines and flush them to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json(path: str | Path, obj) -> None:
    """Write `obj` as indented JSON atomically (temp file + rename), so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False))
    os.replace(tmp, path)
