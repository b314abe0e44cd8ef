"""Resumable JSONL output for the clarification evaluations.

A run appends one JSON line per finished unit (episode, item), flushed and fsynced, keyed by `key`. Rerunning with
the same output folder reads the lines back and skips the keys already there. A crash can leave a torn last line
(no newline, or not valid JSON): it is cut off and its unit is redone. A damaged line anywhere else is an error,
since it cannot come from an interrupted append. The run's settings are stored in `config.json`; a rerun with other
settings into the same folder is refused rather than mixed in.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


def read_done(path: str | Path) -> dict[str, dict]:
    """Records already in `path` by key (first one wins); cuts a torn last line off the file."""
    path = Path(path)
    if not path.exists():
        return {}
    data = path.read_bytes()
    lines = data.split(b"\n")
    # After the last "\n" there is either nothing (clean end) or a torn write.
    complete, tail = lines[:-1], lines[-1]
    done: dict[str, dict] = {}
    good_end = 0
    offset = 0
    for i, raw in enumerate(complete):
        offset += len(raw) + 1
        if not raw.strip():
            good_end = offset
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            if i == len(complete) - 1 and not tail:
                logger.warning("%s: last line is damaged (%s); it will be redone", path, err)
                break
            raise ValueError(
                f"{path} line {i + 1} is not valid JSON ({err}) and is not the last line, so it is not a torn "
                "write from a crash; fix or delete that line, or use a new --out folder."
            ) from err
        if not isinstance(record, dict) or "key" not in record:
            raise ValueError(f"{path} line {i + 1} has no 'key'; it was not written by this command. Use a new --out.")
        if record["key"] in done:
            logger.warning("%s: duplicate key %r on line %d ignored", path, record["key"], i + 1)
        else:
            done[record["key"]] = record
        good_end = offset
    if tail:
        logger.warning("%s: last line was cut off by a crash; it will be redone", path)
    if good_end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return done


def append_record(path: str | Path, record: dict) -> None:
    """Append one record as a JSON line and make it durable before returning."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def check_config(out_dir: str | Path, config: dict) -> None:
    """Store `config` in OUT/config.json, or check that the stored one matches it."""
    path = Path(out_dir) / "config.json"
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        diff = {k: (stored.get(k), v) for k, v in config.items() if stored.get(k) != v}
        if diff:
            shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise ValueError(
                f"--out {out_dir} holds a run with other settings ({shown}); rerun with the same settings to resume, "
                "or pass a new --out folder."
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_json(path: str | Path, data: dict) -> None:
    """Write `data` as indented JSON atomically (temp file + rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
