"""The collab part's held-out MT-Bench items, importable without loading a judge: `scripts/train_judge_classifier.py`
keeps them out of the judge's fit, and the fit must be possible when the shipped classifier is stale. The draw's
sizes and seed are `heldout` and `seed` of `reproduce/settings/collab.json`."""

from __future__ import annotations

import random

import repro

_SETTINGS = repro.load_settings("collab", "cpu")  # the held-out draw is the same at every SCALE
HELDOUT_MTB_CATEGORIES = tuple(_SETTINGS["heldout"]["mt_bench_categories"])  # no GPT-4 references there
PER_CATEGORY = _SETTINGS["heldout"]["mt_bench_per_category"]
SEED = _SETTINGS["seed"]  # the collab part's seed


def mt_bench_heldout_ids(questions: list[dict]) -> set[int]:
    """The held-out MT-Bench question ids: `PER_CATEGORY` per category of `HELDOUT_MTB_CATEGORIES`, drawn with
    `SEED`."""
    rng = random.Random(SEED)
    held_ids = set()
    for category in HELDOUT_MTB_CATEGORIES:
        ids = sorted(r["question_id"] for r in questions if r["category"] == category)
        held_ids |= set(rng.sample(ids, PER_CATEGORY))
    return held_ids
