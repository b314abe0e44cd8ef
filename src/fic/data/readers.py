"""Raw rows from local files or the Hugging Face hub, each paired with a location used in error messages.

Local formats: `.jsonl` (one JSON object a line; "row N" is the 1-based line number, blank lines skipped but
counted), `.json` (a list of objects, or a dict holding that list under a source-specific key; "row N" is the 1-based
position in the list), `.parquet` and `.csv` (hub exports; "row N" is the 1-based data row). Hub loading goes through
`datasets.load_dataset`, or `huggingface_hub.hf_hub_download` for sources whose hub repo holds one plain file, and
turns every failure (offline, not cached, gated, missing) into a :class:`DataError` that names the hub id and says
how to point at a local copy instead.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from huggingface_hub import constants

from .records import DataError

logger = logging.getLogger(__name__)

Row = tuple[str, Any]  # (location, raw row)


def read_local(path: str | Path, formats: tuple[str, ...], json_key: str | None = None) -> Iterator[Row]:
    """Yield `(location, row)` pairs from a local file.

    Args:
        path (`str` or `Path`): The file.
        formats (`tuple[str, ...]`): Accepted suffixes, e.g. `(".jsonl", ".json")`.
        json_key (`str`, *optional*): For `.json` files shaped as a dict, the key that holds the list of rows.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"local file '{path}' does not exist (or is not a file); check the path after 'NAME:'")
    suffix = path.suffix.lower()
    if suffix not in formats:
        raise DataError(f"'{path.name}': unsupported file type {suffix!r}; this source reads {', '.join(formats)}")
    if suffix == ".jsonl":
        yield from _read_jsonl(path)
    elif suffix == ".json":
        yield from _read_json(path, json_key)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq  # pyarrow, datasets, httpx: heavy (0.1-1 s), fic.data stays cheap to import

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield f"{path.name} row {i}", row
    elif suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            for i, row in enumerate(csv.DictReader(handle), start=1):
                yield f"{path.name} row {i}", row


def _read_jsonl(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path.name} row {lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _read_json(path: Path, json_key: str | None) -> Iterator[Row]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path.name}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, dict) and json_key is not None and isinstance(data.get(json_key), list):
        data = data[json_key]
    if not isinstance(data, list):
        shape = f"a list, or a dict with a '{json_key}' list" if json_key else "a list of objects"
        raise DataError(f"{path.name}: expected {shape} at the top level, got {type(data).__name__}")
    for i, row in enumerate(data, start=1):
        yield f"{path.name} row {i}", row


def hub_error(name: str, hub_id: str, exc: BaseException, formats: tuple[str, ...]) -> DataError:
    """The error raised when a source cannot be loaded from the hub: which id failed, why, and the local fallback."""
    origin = hub_id if hub_id.startswith(("http://", "https://")) else f"the Hugging Face hub ({hub_id})"
    return DataError(
        f"could not load source '{name}' from {origin}: {type(exc).__name__}: "
        f"{str(exc).rstrip('. ')}. "
        f"If you are offline, the dataset is not cached, or it is gated (accept its terms on the hub and log in), "
        f"download it and point at a local copy with '{name}:PATH' (a {'/'.join(formats)} file)."
    )


def read_hub(
    name: str,
    repo_id: str,
    *,
    config: str | None,
    split: str,
    formats: tuple[str, ...],
    filename: str | None = None,
    json_key: str | None = None,
    limit: int | None = None,
) -> Iterator[Row]:
    """Yield `(location, row)` pairs from a hub dataset.

    Args:
        name (`str`): Source name (for messages).
        repo_id (`str`): Hub dataset id, or an `http(s)://` URL of a JSON/JSONL file (downloaded once into
            `$FIC_CACHE/downloads`, default `~/.cache/fic/downloads`; never fetched in offline mode).
        config (`str`, *optional*): Dataset configuration name.
        split (`str`): Split to load.
        formats (`tuple[str, ...]`): Local formats of this source (named in the error message).
        filename (`str`, *optional*): If set, download this single file of the dataset repo and read it as a local file
            instead of going through `datasets` (for repos whose files do not share one schema).
        json_key (`str`, *optional*): See :func:`read_local`.
        limit (`int`, *optional*): Load only the first rows of the split, when `datasets` can slice it.
    """
    is_url = repo_id.startswith(("http://", "https://"))
    label = repo_id + "".join(f", {part}" for part in (config, split) if part and not (filename or is_url))
    try:
        if is_url:
            local = download(repo_id)
            filename = local.name
        elif filename is not None:
            from huggingface_hub import hf_hub_download

            local = hf_hub_download(repo_id, filename, repo_type="dataset")
        else:
            import datasets

            sliced = f"{split}[:{limit}]" if limit is not None and "[" not in split else split
            dataset = datasets.load_dataset(repo_id, config, split=sliced)
    except Exception as exc:  # the hub stack raises many unrelated types: report them all the same way
        raise hub_error(name, label, exc, formats) from exc
    if filename is not None:
        yield from read_local(local, (Path(filename).suffix,), json_key)
        return
    logger.info("loaded %s from the hub (%s): %d rows", name, label, len(dataset))
    for i, row in enumerate(dataset, start=1):
        yield f"{label} row {i}", row


def offline() -> bool:
    """Whether the Hugging Face offline switches are on (read now, so a test can set them)."""
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("HF_DATASETS_OFFLINE"))
    if any(flag and flag.upper() in ("1", "ON", "YES", "TRUE") for flag in flags):
        return True
    return bool(constants.HF_HUB_OFFLINE)


def download(url: str) -> Path:
    """Download `url` once into the fic cache and return the local path (offline: the cached copy or an error)."""
    cache = Path(os.environ.get("FIC_CACHE", Path.home() / ".cache" / "fic")).expanduser() / "downloads"
    target = cache / url.rstrip("/").rsplit("/", 1)[-1]
    if target.is_file():
        return target
    if offline():
        raise ConnectionError(f"offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and {target} is not cached")
    import httpx

    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
        response.raise_for_status()
        with partial.open("wb") as handle:
            for chunk in response.iter_bytes():
                handle.write(chunk)
    partial.replace(target)
    logger.info("downloaded %s to %s", url, target)
    return target
