"""Resumable evaluation output: append-only JSONL rows that survive a crash, and the settings they were written with.

Every evaluation (probe, lic, regret, bag, the checkpoint callback) writes through here. A run appends whole lines
and flushes them, so a kill leaves at most one damaged line, and only at the end. `load_done` reads what a previous
run finished: a damaged *last* line (cut short, or not JSON) is dropped with one warning, cut off the file and
redone; a damaged line *before* the last cannot come from an interrupted append, so it is a `ResumeError` naming the
file and line, and nothing is cut. A rerun skips the finished keys, so an interrupted and resumed run writes exactly
the rows of an uninterrupted one. `check_settings` keeps the run's settings beside its rows (`OUT/settings.json`) and
refuses a rerun into the same folder with other settings, naming the keys that differ, rather than mixing two runs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from fic.errors import FicError

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

logger = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"


class ResumeError(FicError, ValueError):
    """An output folder that cannot be resumed: a damaged line before the last, or a run with other settings."""


class BusyError(FicError, RuntimeError):
    """An output file that another living process is writing now."""


def writer_lock(path: str | Path, shared: bool = False):
    """Hold the writer's lock of `path` until the returned file is closed (or the process ends, however it ends).

    The lock is an `flock` on a hidden `.NAME.lock` beside `path`. `shared`: the processes of one launch each hold it
    shared (and the lock of their own part exclusively), so another run into the same folder, of one process or of
    many, is refused while they live. Raises `BusyError` naming the lock file. Where `flock` does not exist (Windows)
    or the filesystem refuses it, nothing is locked (with a warning in the second case) and None is returned.
    """
    if fcntl is None:
        return None
    path = Path(path)
    lock = path.parent / f".{path.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock, "a")  # noqa: SIM115 - held open for as long as the lock is held
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise BusyError(
            f"{path}: another process is writing it now (`fuser -v {lock}` names it); two runs into one output folder "
            "would each append the same rows. Let that run end or stop it, then rerun this command: it resumes."
        ) from None
    except OSError as err:  # a filesystem without locks (some network mounts): write unlocked, and say so
        handle.close()
        logger.warning("%s: cannot be locked (%s); a second run into this folder would not be refused", path, err)
        return None
    return handle


def first_of_each(rows: list[dict], key: Callable[[dict], object]) -> list[dict]:
    """`rows` without those whose `key` an earlier row already has (what two runs writing one file at once leave)."""
    seen, kept = set(), []
    for row in rows:
        k = key(row)
        if k not in seen:
            seen.add(k)
            kept.append(row)
    return kept


def load_done(path: str | Path) -> list[dict]:
    """Complete rows of `path` (empty if absent); a damaged last line is dropped (and cut off the file) with a warning.

    Raises `ResumeError` for a damaged line before the last one. Blank lines are skipped.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # after the last newline: nothing, or a line cut short by a kill
    rows, good_end, offset = [], 0, 0
    for i, raw in enumerate(complete):
        offset += len(raw) + 1
        if raw.strip():
            try:
                row = json.loads(raw)
            except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                if i == len(complete) - 1 and not tail:
                    logger.warning(
                        "%s: line %d is damaged (an interrupted write); dropped, it will be redone", path, i + 1
                    )
                    break
                raise ResumeError(_damaged(path, i + 1, f"not valid JSON ({err})")) from None
            if not isinstance(row, dict):
                raise ResumeError(_damaged(path, i + 1, "not a JSON object"))
            rows.append(row)
        good_end = offset
    if tail:
        logger.warning(
            "%s: line %d was cut short by an interrupted write; dropped, it will be redone", path, len(lines)
        )
    if good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return rows


def _damaged(path: Path, line: int, what: str) -> str:
    return (
        f"{path} line {line} is {what} and is not the last line, so no interrupted run wrote it: the file was changed "
        "or damaged otherwise. Fix or delete that line (a deleted row is redone), or write to a new output folder."
    )


def load_keyed(path: str | Path, key: str = "key") -> dict[str, dict]:
    """`load_done` rows by their `key` field (the first row of a key wins); a row without it is a `ResumeError`."""
    done: dict[str, dict] = {}
    for i, row in enumerate(load_done(path)):
        if key not in row:
            raise ResumeError(
                f"{path}: row {i + 1} has no {key!r}; it was not written by this command. Pass a new --out."
            )
        if row[key] in done:
            logger.warning("%s: duplicate %s %r in row %d ignored", path, key, row[key], i + 1)
        else:
            done[row[key]] = row
    return done


def append_rows(path: str | Path, rows: Iterable[dict]) -> None:
    """Append `rows` as JSON lines and flush them to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_rows(path: str | Path, rows: Iterable[dict]) -> None:
    """Write `rows` as JSON lines atomically (temp file + rename), replacing the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # own name: two processes may write one file
    tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: str | Path, obj) -> None:
    """Write `obj` as indented JSON atomically (temp file + rename), so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # own name: two processes may write one file
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False))
    os.replace(tmp, path)


def check_settings(out_dir: str | Path, settings: dict) -> None:
    """Store `settings` in OUT/settings.json, or, when a run already left one there, check that it is the same.

    `settings` holds what decides the content of a row (model, seeds, token limits, judge, ...), not what only
    selects which rows are made (limits, dataset lists), so a rerun may extend a run but never mix two. Raises
    `ResumeError` naming the keys that differ.
    """
    path = Path(out_dir) / SETTINGS_FILE
    settings = json.loads(json.dumps(settings))  # the stored form: tuples as lists, keys as strings
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        diff = {k: (stored.get(k), settings.get(k)) for k in sorted(set(stored) | set(settings))
                if stored.get(k) != settings.get(k)}  # fmt: skip
        if diff:
            shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise ResumeError(
                f"--out {out_dir} holds a run with other settings ({shown}); rerun with the same settings to resume, "
                "or pass a new --out folder."
            )
        return
    write_json(path, settings)
