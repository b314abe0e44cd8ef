"""Which split a dataset spec reads, and the rule that training does not read a test split.

A spec names its split in one of three ways:

* `NAME@SPLIT` (hub): that split of the source's hub copy, e.g. `gsm8k@train`.
* `NAME:PATH` (a local file): the split its file name says (`train.jsonl`, `IFBench_test.jsonl`, `dev_light.json`);
  `None` when the name says none.
* a bare `NAME`: for training the `train` split; elsewhere the source's default hub split (`gsm8k` -> `test`).

Training on a split named `test` is an error (`check_training_split`) unless the recipe sets `train_on_test: true`.
"""

from __future__ import annotations

import re
from pathlib import Path

from .records import DataError
from .sources import get_source, load_source, parse_spec, split_spec

__all__ = ["SPLIT_WORDS", "check_training_split", "file_split", "load_training", "spec_split", "split_spec"]

SPLIT_WORDS = {"train": "train", "training": "train", "test": "test", "validation": "validation", "valid": "validation",
               "val": "validation", "dev": "validation"}  # fmt: skip


def file_split(path: str) -> str | None:
    """The split a file name says (`train.jsonl` -> train, `IFBench_test.jsonl` -> test), or None."""
    for token in reversed(re.split(r"[^a-z]+", Path(path).stem.lower())):
        if token in SPLIT_WORDS:
            return SPLIT_WORDS[token]
    return None


def spec_split(spec: str, training: bool = False) -> str | None:
    """The split `spec` reads (see the module docstring); `training` makes a bare hub name read `train`."""
    bare, split = split_spec(spec)
    if split is not None:
        return split
    name, path = parse_spec(bare)
    if path is not None:
        return file_split(path)
    source = get_source(name)
    if source.hub_file or (source.hub_id or "").startswith(("http://", "https://")):
        return None  # one file, no splits
    return "train" if training else source.hub_split


def check_training_split(field: str, spec: str, allow_test: bool = False) -> str | None:
    """The split training data `spec` reads; raises `DataError` when it is a test split and `allow_test` is False."""
    split = spec_split(spec, training=True)
    if split == "test" and not allow_test:
        raise DataError(
            f"{field}: {spec!r} reads the test split, and a model trained on it cannot be evaluated on it; train on "
            "the train split (gsm8k:PATH/train.jsonl, or NAME@train from the hub), or set `train_on_test: true` in "
            "the recipe if that is what you mean"
        )
    return split


def load_training(field: str, spec: str, limit: int | None = None, allow_test: bool = False):
    """`load_source` for training data: a bare hub name reads its train split; a test split is refused."""
    split = check_training_split(field, spec, allow_test)
    bare, explicit = split_spec(spec)
    return load_source(spec, limit=limit, split=None if explicit else (split if ":" not in bare else None))
