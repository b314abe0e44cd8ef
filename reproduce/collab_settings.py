"""The collab part's settings and the names its runner (`collab.py`), report (`collab_report.py`) and labels
(`collab_labels.py`) share.

`SETTINGS` is `reproduce/settings/collab.json` (`repro.load_settings`) plus what is computed at import: the model and
judge names, the judges' versions and the recipes' hashes, so that a part folder made with another judge or other
recipe values is refused rather than resumed.
"""

from __future__ import annotations

import hashlib

import repro

SCALE = repro.scale()
# SCALE=gpu chooses the SFT learning rate and steps and RL's learning rate on dev inside the run; SCALE=cpu reads the
# choices recorded in reproduce/dev_choices.json (`collab_sft`, `collab_rl`).
CHOOSE_IN_RUN = repro.chooses_in_run()

SETTINGS = repro.part_settings("collab")
# The judge of the training signals: the judge-filtered arm's filter and follow-up RL's reward (the recipes name it
# too), contrastive; the probes judge plainly with `repro.JUDGE`.
SETTINGS["training_judge"]["version"] = repro.judge_version(SETTINGS["training_judge"]["kind"])
SETTINGS["recipe_sha256"] = {
    name: hashlib.sha256((repro.ROOT / "recipes" / f"{name}.yaml").read_bytes()).hexdigest()[:16]
    for name in (SETTINGS["sft_recipe"], SETTINGS["rl_recipe"])
}

ARMS = tuple(SETTINGS["arms"])
TRAINING_JUDGE = SETTINGS["training_judge"]["kind"]
DATASETS = ("healthbench", "mt_bench")
NAMES = {
    "base": "SmolLM2 (base)", "real": "SFT: real follow-ups", "template_unfiltered": "SFT: template, unfiltered",
    "template_filtered": "SFT: template, judge-filtered", "rl": "follow-up RL",
}  # fmt: skip


def point_key(point: dict) -> tuple:
    """A grid point's identity: its learning rate and (SFT) steps; a chosen RL point also carries its model path."""
    return point["learning_rate"], point.get("max_steps")
