"""The reward-hacking check (fic.trainers.reward_hacking) on synthetic logged series: no model."""

import logging
from types import SimpleNamespace

import pytest

from fic.trainers.reward_hacking import RewardHackingCallback, hacking_windows, reward_hacking_summary

G = "followup/genuine_rate"


def series(rewards, genuine, start=1):
    return [{"step": start + i, "reward": r, G: g} for i, (r, g) in enumerate(zip(rewards, genuine))]


# The measured case of issue 45: reward -0.438 -> -0.266 over 4 steps while the genuine share fell 0.062 -> 0.
HACKED = series([-0.438, -0.35, -0.30, -0.266], [0.062, 0.031, 0.0, 0.0])
HONEST = series([0.1, 0.2, 0.25, 0.4], [0.1, 0.2, 0.2, 0.35], start=5)


def test_each_non_overlapping_window_is_checked():
    windows = hacking_windows(HACKED + HONEST, window=4)
    assert [w["steps"] for w in windows] == [[1, 4], [5, 8]]
    assert [w["hacking"] for w in windows] == [True, False]
    assert windows[0]["reward_slope"] > 0 > windows[0]["genuine_slope"]


def test_a_last_short_window_counts_from_two_points_and_gaps_are_skipped():
    points = HONEST + [{"step": 9, "reward": 0.5}] + series([0.5, 0.6], [0.3, 0.1], start=10)
    windows = hacking_windows(points, window=4)
    assert [(w["steps"], w["points"], w["hacking"]) for w in windows] == [([5, 8], 4, False), ([10, 11], 2, True)]
    assert hacking_windows(HONEST + series([0.9], [0.0], start=9), window=4)[-1]["steps"] == [5, 8]


def test_falling_together_or_flat_is_not_hacking():
    assert not hacking_windows(series([0.4, 0.3, 0.2], [0.3, 0.2, 0.1]), 3)[0]["hacking"]
    assert not hacking_windows(series([0.1, 0.2, 0.3], [0.0, 0.0, 0.0]), 3)[0]["hacking"]  # genuine flat at 0


def test_summary_says_so():
    summary = reward_hacking_summary(HACKED + HONEST, 4)
    assert summary["window"] == 4 and summary["flagged"] == 1 and len(summary["windows"]) == 2
    assert summary["warning"].startswith("reward hacking? steps 1-4: the reward rose")
    assert reward_hacking_summary(HONEST, 4)["warning"] is None
    with pytest.raises(ValueError, match="reward_hacking_window=1: a window needs at least 2 logged steps"):
        hacking_windows(HONEST, 1)


def _run(callback, points):
    args, control = SimpleNamespace(), SimpleNamespace()
    for p in points:
        state = SimpleNamespace(global_step=p["step"], is_world_process_zero=True)
        callback.on_log(args, state, control, logs={"reward": p["reward"], G: p[G], "loss": 0.1})
        callback.on_log(args, state, control, logs={"train_runtime": 1.0})  # the end-of-training log: no reward
    callback.on_train_end(args, SimpleNamespace(is_world_process_zero=True), control)


def test_callback_warns_once(caplog):
    with caplog.at_level(logging.WARNING, logger="fic.trainers.reward_hacking"):
        _run(RewardHackingCallback(window=2), HACKED + HACKED)
    lines = [r.getMessage() for r in caplog.records if "reward hacking?" in r.getMessage()]
    assert lines == ["reward hacking? steps 1-2: the reward rose (+0.0880/step) while the judge's genuine share fell "
                     "(-0.0310/step); the policy is earning by something other than genuine follow-ups (read "
                     "followup/label_share/* and the turns)"]  # fmt: skip


def test_callback_checks_the_last_short_window_at_the_end(caplog):
    with caplog.at_level(logging.WARNING, logger="fic.trainers.reward_hacking"):
        _run(RewardHackingCallback(window=10), HACKED)
    assert sum("steps 1-4" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fic.trainers.reward_hacking"):
        _run(RewardHackingCallback(window=10), HONEST)
    assert not caplog.records


def test_callback_alerts_an_active_wandb_run_and_survives_a_failing_alert(monkeypatch):
    from fic.trainers import reward_hacking

    alerts = []
    run = SimpleNamespace(alert=lambda **kw: alerts.append(kw))
    monkeypatch.setattr(reward_hacking, "wandb_run", lambda: run)
    _run(RewardHackingCallback(window=4), HACKED)
    assert [a["level"] for a in alerts] == ["WARN"] and alerts[0]["text"].startswith("reward hacking? steps 1-4")

    def broken(**kw):
        raise RuntimeError("offline")

    monkeypatch.setattr(reward_hacking, "wandb_run", lambda: SimpleNamespace(alert=broken))
    _run(RewardHackingCallback(window=4), HACKED)  # no exception
