"""The VASD part's settings (reproduce/settings/vasd.json) and the names the runner and the report share."""

from __future__ import annotations

import repro

SCALE = repro.scale()
# SCALE=gpu runs the dev grid inside the run; SCALE=cpu reads the choice recorded in reproduce/dev_choices.json
# (`vasd_config`) unless this run's task or start model differs from the recorded one.
CHOOSE_IN_RUN = repro.chooses_in_run()
SETTINGS = {"model": repro.MODEL, "scale": SCALE, **repro.load_settings("vasd", SCALE)}

ARITHMETIC: dict[str, int] = SETTINGS["candidates"]["update_steps"]  # candidate -> fic.data.synthetic update steps
CANDIDATES: tuple[str, ...] = tuple(SETTINGS["candidates"]["tasks"])
KINDS: dict[str, list[str]] = SETTINGS["vasd"]["controls"]  # the control differs from VASD only in its loss
GRID: dict[str, list[str]] = SETTINGS["vasd"]["grid"]
VIEWS = ("full", "concat", "sharded")


def seeds_of(kind: str) -> list[int]:
    """The seeds a kind is trained and tested at: VASD at `seeds`, the self-SFT control at `control_seeds`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    return list(SETTINGS["vasd"]["seeds" if kind == "vasd" else "control_seeds"])


def views(summary: dict) -> dict:
    """{p_full, p_concat, p_sharded, n} of a `fic lic` summary.json (P pooled over runs)."""
    modes = summary["modes"]
    return {**{f"p_{m}": modes[m]["P"] for m in VIEWS}, "n": modes["full"]["n_tasks"]}


def qualifies(v: dict) -> bool:
    """A setting worth distilling: competent single turn, CONCAT like FULL (so a SHARDED gap is about the turns)
    and a multi-turn gap."""
    eps = 1e-9
    return (v["p_full"] >= 0.4 - eps and abs(v["p_concat"] - v["p_full"]) <= 0.10 + eps
            and v["p_sharded"] <= 0.8 * v["p_full"] + eps)  # fmt: skip
