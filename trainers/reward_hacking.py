"""A reward-hacking check for follow-up RL: the reward rising while the judge's genuine share falls.

The reward is meant to follow the judge-genuine share (`followup/genuine_rate`); when, over a window of logged
steps, the reward rises and the share falls, the policy is earning by something else (a penalty table it can climb by
failing differently, a dense score it can raise without becoming genuine). `hacking_windows` is the pure check over a
run's logged points, in consecutive non-overlapping windows; `RewardHackingCallback` runs it while training and warns
once (one log line, and a wandb alert when a wandb run is active); `followup_rl.main` writes `reward_hacking_summary`
into `eval_summary.json`.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from fic import metric_names
from fic.tracking import wandb_run

logger = logging.getLogger(__name__)

REWARD_KEY = "reward"
GENUINE_KEY = metric_names.FOLLOWUP_GENUINE_RATE


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of `ys` on `xs` (0.0 when the xs do not vary)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def hacking_windows(points: list[dict], window: int, reward_key: str = REWARD_KEY,
                    genuine_key: str = GENUINE_KEY) -> list[dict]:  # fmt: skip
    """The check on each window of `window` consecutive logged points (non-overlapping; a last, shorter window when it
    holds at least 2). Points are log entries with `step`, the reward and the genuine share; those without both are
    skipped. Each window: `{"steps": [first, last], "points", "reward_slope", "genuine_slope" (per step), "hacking"}`,
    `hacking` when the reward's least-squares slope is above 0 and the genuine share's below 0. A pure function."""
    if window < 2:
        raise ValueError(f"reward_hacking_window={window}: a window needs at least 2 logged steps")
    usable = [p for p in points if p.get(reward_key) is not None and p.get(genuine_key) is not None]
    out = []
    for start in range(0, len(usable), window):
        chunk = usable[start : start + window]
        if len(chunk) < 2:
            break
        steps = [float(p["step"]) for p in chunk]
        reward = slope(steps, [float(p[reward_key]) for p in chunk])
        genuine = slope(steps, [float(p[genuine_key]) for p in chunk])
        out.append({
            "steps": [chunk[0]["step"], chunk[-1]["step"]], "points": len(chunk),
            "reward_slope": round(reward, 6), "genuine_slope": round(genuine, 6), "hacking": reward > 0 and genuine < 0,
        })  # fmt: skip
    return out


def warning_line(window: dict) -> str:
    """The one warning line for a flagged window."""
    first, last = window["steps"]
    return (
        f"reward hacking? steps {first}-{last}: the reward rose ({window['reward_slope']:+.4f}/step) while the judge's "
        f"genuine share fell ({window['genuine_slope']:+.4f}/step); the policy is earning by something other than "
        "genuine follow-ups (read followup/label_share/* and the turns)"
    )


def reward_hacking_summary(points: list[dict], window: int) -> dict:
    """What the run summary records: the window size, every window's check, and the warning (None when no window
    was flagged)."""
    windows = hacking_windows(points, window)
    flagged = [w for w in windows if w["hacking"]]
    return {"window": window, "windows": windows, "flagged": len(flagged),
            "warning": warning_line(flagged[0]) if flagged else None}  # fmt: skip


class RewardHackingCallback(TrainerCallback):
    """Runs `hacking_windows` on the logged steps as training goes (each full window, and the last partial one at the
    end) and warns once, on the main process: one log line and, when a wandb run is active, a wandb alert."""

    def __init__(self, window: int):
        hacking_windows([], window)  # checks the window size
        self.window, self.points, self.warned = window, [], False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or REWARD_KEY not in logs or GENUINE_KEY not in logs:
            return
        self.points.append({"step": state.global_step, REWARD_KEY: logs[REWARD_KEY], GENUINE_KEY: logs[GENUINE_KEY]})
        if len(self.points) % self.window == 0:
            self._check(self.points[-self.window :])

    def on_train_end(self, args, state, control, **kwargs):
        rest = len(self.points) % self.window
        if state.is_world_process_zero and rest >= 2:
            self._check(self.points[-rest:])

    def _check(self, points: list[dict]) -> None:
        windows = hacking_windows(points, len(points))
        if self.warned or not windows or not windows[0]["hacking"]:
            return
        self.warned = True
        line = warning_line(windows[0])
        logger.warning(line)
        run = wandb_run()
        if run is not None:
            try:
                run.alert(title="follow-up RL: reward hacking?", text=line, level="WARN")
            except Exception as exc:  # an alert is a courtesy: never let it stop training
                logger.debug("wandb alert failed: %s", exc)
