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
TRAINED = (*ARMS, "rl")  # the models trained once per seed of `seeds`; the base model is one model
TRAINING_JUDGE = SETTINGS["training_judge"]["kind"]
# The held-out contexts: their rates pool into "overall", the figure the targets and the blind labels read.
DATASETS = ("healthbench", "mt_bench")
# IFBench items outside the judge's fit, probed like the held-out contexts in folders of their own (`ifbench_RUN`),
# reported as a third dataset with its own rows and never pooled into "overall".
IFBENCH = "ifbench"
REPORTED = (*DATASETS, IFBENCH)
# The seed whose turns the blind labels (and foil labels) were made on: its folders keep the one-seed names.
LABELLED_SEED = 0
NAMES = {
    "base": "SmolLM2 (base)", "real": "SFT: real follow-ups", "template_unfiltered": "SFT: template, unfiltered",
    "template_filtered": "SFT: template, judge-filtered", "rl": "follow-up RL",
}  # fmt: skip


def seeds() -> list[int]:
    """The training seeds of every trained model (`seeds` in the settings), checked: distinct integers >= 0 that
    include `LABELLED_SEED`, whose folders keep the one-seed names (so a one-seed run resumes as seed 0)."""
    value = SETTINGS["seeds"]
    if (not isinstance(value, list) or not value or len(set(value)) != len(value)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
            or LABELLED_SEED not in value):  # fmt: skip
        raise repro.StepError(f"collab: settings seeds={value!r}: expected distinct integers >= 0 that include "
                              f"{LABELLED_SEED} (the labelled seed), e.g. [0, 1, 2], in {repro.SETTINGS_DIR / 'collab.json'}")  # fmt: skip
    return [LABELLED_SEED, *sorted(s for s in value if s != LABELLED_SEED)]


def use_seeds(value: list[int]) -> None:
    """Train at these seeds (distinct integers >= 0) instead of the settings' (`make study-collab`'s one change to the
    part); a part folder made with other seeds is then refused, the seeds being part of `SETTINGS`."""
    if LABELLED_SEED not in value:
        raise repro.StepError(f"seeds {','.join(map(str, value))}: include {LABELLED_SEED}, the seed the blind labels "
                              "were made on (its folders keep the one-seed names)")  # fmt: skip
    SETTINGS["seeds"] = list(value)


def run_name(model: str, seed: int | None = None) -> str:
    """A model's name at one training seed, as its folders spell it (`sft_NAME`, `probe_NAME`, `ifbench_NAME`):
    `real` at the labelled seed and for the seed-free base model, `real_seed1` at seed 1."""
    return model if seed is None or seed == LABELLED_SEED or model == "base" else f"{model}_seed{seed}"


def seed_overrides(seed: int) -> list[str]:
    """The training seed as a recipe override; none at seed 0, the recipes' own `seed: 0`, so the labelled seed's
    models are trained with exactly the one-seed run's overrides (and resume in its folders)."""
    return [] if seed == 0 else [f"seed={seed}"]


# Seconds per unit on the 2-core machine, one process at a time (reproduce/results/README.md, "How the collab part is
# set up"): training wall_s of the arms at 8 steps and of RL at 4 (summary.json collab, 2026-12-06, model load
# included), `--plan` ~6 s; a probe loads in ~15 s, then per item the base model's greedy 128-token answer and per
# user turn generation with both judgements (reproduce/probe.py TIMINGS); the split, judging the template candidates
# (0.3 min) and the summary (0.8 min for a summary pass).
TIMINGS = {
    "fixed": 10 + 18 + 48, "plan": 6, "probe_load": 15,
    "train": {"real": 238.6, "template_unfiltered": 127.6, "template_filtered": 125.8, "rl": 126.9},
    "answer": {"healthbench": 2.93, "mt_bench": 1.33, "ifbench": 0.93},
    "turn": {"healthbench": 1.11, "mt_bench": 0.73, "ifbench": 0.433},
}  # fmt: skip
HEALTHBENCH_HELDOUT = 9  # every multi-turn item of oss_eval_first30


def estimated_minutes(settings: dict | None = None) -> float:
    """Wall time of the part as SCALE=cpu runs it (the recorded dev choices: no grid, one RL run per seed) on 2 CPU
    cores, from `TIMINGS`: the base model's held-out and IFBench probes once, and per seed each trained model's
    training, held-out probe and IFBench probe (after the base model's answers: turns only). The run of 2026-12-06
    (one seed, no IFBench) took 20.5 min where this prices 22.3."""
    s = settings or SETTINGS
    turns = s["probe"]["samples"] * len(s["probe"]["temperatures"])
    items = {"healthbench": HEALTHBENCH_HELDOUT,
             "mt_bench": s["heldout"]["mt_bench_per_category"] * len(s["heldout"]["mt_bench_categories"]),
             "ifbench": s["ifbench"]["limit"]}  # fmt: skip
    t = TIMINGS

    def probe(datasets: tuple[str, ...], answers: bool) -> float:
        return t["probe_load"] + sum(items[d] * (t["answer"][d] * answers + turns * t["turn"][d]) for d in datasets)

    base = probe(DATASETS, True) + probe((IFBENCH,), True)
    per_seed = sum(t["plan"] + t["train"][k] + probe(DATASETS, False) + probe((IFBENCH,), False) for k in TRAINED)
    return (t["fixed"] + base + len(s["seeds"]) * per_seed) / 60


def point_key(point: dict) -> tuple:
    """A grid point's identity: its learning rate and (SFT) steps; a chosen RL point also carries its model path."""
    return point["learning_rate"], point.get("max_steps")
