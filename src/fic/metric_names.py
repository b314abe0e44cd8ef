"""Every flat metric name fic writes (wandb, `metrics.json`, comparison tables) is built here, and only here.

Names are slash-namespaced as in TRL: `<evaluation>/<quantity>`, with the cell after `@` where there is one
(`probe/gsm8k/genuine_rate@t0.7`). Code that reads metrics back builds the same name and looks it up; nothing parses
a name apart again. One idea has one spelling: the Lost-in-Conversation score of the sharded view is `p_sharded` in
every summary and `lic/p_sharded` as a flat metric.
"""

from __future__ import annotations

LIC_MODES = ("full", "concat", "sharded")
LIC_SCORES = ("P", "A90", "U90_10")  # averaged performance, aptitude, unreliability: fic.metrics.lic_scores' keys

PROBE_JUDGE_ERROR_RATE = "probe/judge_error_rate"
# P_sharded / P_full of one evaluated model. Not a recovery: recovery (fic.metrics.recovery) is the share of the
# multi-turn gap a training run closed, and needs the scores before and after it.
LIC_SHARDED_OVER_FULL = "lic/sharded_over_full"
REGRET_MEAN = "regret/mean_regret"
REGRET_VALUE = "regret/value"
FOLLOWUP_GENUINE_RATE = "followup/genuine_rate"  # follow-up RL: share of judged completions that are genuine
FOLLOWUP_JUDGE_ERROR_RATE = "followup/judge_error_rate"
# follow-up RL: share of judged completions the reward judge calls genuine after another item's answer too (contrast)
REWARD_GENERIC_FLOOR = "reward/generic_floor"


def followup_label_share(label: str) -> str:
    """`followup/label_share/<label>`: follow-up RL, the share of a step's judged completions given that label."""
    return f"followup/label_share/{label}"


def temperature_key(temperature: float) -> str:
    """`t0.0`, `t0.3`, `t1.0`: a sampling temperature as it appears in metric names and summary keys."""
    return f"t{float(temperature)!r}"


def probe_genuine(dataset: str, temperature: float | str, perturbation: str = "none") -> str:
    """`probe/<dataset>/genuine_rate@t<T>`; a control adds its name: `probe/<dataset>/<control>/genuine_rate@t<T>`.

    `temperature` is a number or its `temperature_key` (the probe summary's keys).
    """
    key = temperature if isinstance(temperature, str) else temperature_key(temperature)
    control = "" if perturbation == "none" else f"{perturbation}/"
    return f"probe/{dataset}/{control}genuine_rate@{key}"


def probe_accuracy(dataset: str) -> str:
    """`probe/<dataset>/accuracy`: task accuracy of the assistant responses the probe conditioned on."""
    return f"probe/{dataset}/accuracy"


def probe_corrected(dataset: str) -> str:
    """`probe/<dataset>/corrected_rate`: the judge-corrected genuine rate pooled over the dataset's turns."""
    return f"probe/{dataset}/corrected_rate"


def probe_generic_floor(dataset: str) -> str:
    """`probe/<dataset>/generic_floor`: share still judged genuine after the context swap (pooled)."""
    return f"probe/{dataset}/generic_floor"


def probe_pct_changed(perturbation: str) -> str:
    """`probe/<control>/pct_changed`: share of user turns that a control changed (same seed)."""
    return f"probe/{perturbation}/pct_changed"


def lic_score(score: str, mode: str) -> str:
    """`lic/p_sharded`, `lic/a90_full`, `lic/u90_10_concat`: a Lost-in-Conversation score (`P`, `A90`, `U90_10`)
    of one view (`full`, `concat`, `sharded`)."""
    if score not in LIC_SCORES:
        raise ValueError(f"LiC score {score!r} is unknown; valid: {', '.join(LIC_SCORES)}")
    return f"lic/{score.lower()}_{mode}"


def regret_metric(quantity: str) -> str:
    """`regret/<quantity>` for the clarification evaluation's other figures (`regret/resolution_rate`, ...)."""
    return f"regret/{quantity}"
