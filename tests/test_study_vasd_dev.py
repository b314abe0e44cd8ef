"""The VASD dev check's file-only tools: `reproduce/study_vasd_choose.py` (the rule that picks the configuration
`make study-vasd` trains from dev results folders, and what it records) and `reproduce/study_vasd_kinds.py` (which
kinds of arithmetic items a run lost and gained against the start model). Made-up summaries and episodes; no model."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402


def _dev_summary(
    folder: Path,
    set_: list[str],
    full: float,
    concat: float,
    sharded: float,
    side: str = "dev",
    base: tuple[str, ...] = ("learning_rate=1e-3",),
) -> Path:
    """A dev results folder whose last-minus-start lower ends are `full`, `concat`, `sharded` (diff = low + 0.05)."""
    last = {v: {"diff": low + 0.05, "low": low, "high": low + 0.1} for v, low in
            (("full", full), ("concat", concat), ("sharded", sharded))}  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "side": side, "set": set_, "task": "arithmetic-1-update", "seeds": [0, 1, 2], "steps": 60, "test_tasks": 100,
        "configuration": {"overrides": list(base)}, "start": {"p_full": 0.7}, "last_vs_start": last}))  # fmt: skip
    return folder


def test_the_dev_check_chooses_by_the_written_rule_and_the_study_trains_the_choice(tmp_path, monkeypatch, capsys):
    """study_vasd_choose: lower ends of FULL and CONCAT >= -5 points and SHARDED's > 0 qualify; of those, the widest
    single-turn margin (the worse lower end of FULL and CONCAT) is chosen, not the highest SHARDED and not a wider
    margin that fails SHARDED's test; it is recorded as study_vasd_config, and study_vasd applies it last."""
    import study_vasd
    import study_vasd_choose

    dev = tmp_path / "dev"
    folders = [_dev_summary(dev / "lr3e-4", ["learning_rate=3e-4"], -0.04, -0.02, 0.30),
               _dev_summary(dev / "mix0.8", ["single_turn_mix=0.8"], -0.05, -0.01, 0.35),
               _dev_summary(dev / "lr3e-3", ["learning_rate=3e-3"], -0.06, 0.0, 0.60),
               _dev_summary(dev / "lr1e-5", ["learning_rate=1e-5"], 0.0, 0.01, -0.01)]  # fmt: skip
    choices = tmp_path / "dev_choices.json"
    choices.write_text(json.dumps({"commit": "abc1234", "vasd_config": {
        "task": "arithmetic-1-update", "start_model": "sft", "chosen": "lora-r16-lr1e-3", "overrides": ["learning_rate=1e-3"]}}))  # fmt: skip
    monkeypatch.setattr(repro, "DEV_CHOICES", choices)
    assert study_vasd.configuration()["overrides"] == ["learning_rate=1e-3"]
    assert study_vasd_choose.main([*map(str, folders), "--record"]) == 0
    out = capsys.readouterr().out
    assert "lr3e-3 (learning_rate=3e-3): FULL -1.0 [-6.0, +4.0]" in out and "-> does not qualify" in out
    assert "chosen: lr3e-4" in out
    record = json.loads(choices.read_text())["study_vasd_config"]
    assert record["chosen"] == "lr3e-4" and record["overrides"] == ["learning_rate=3e-4"]
    assert set(record["candidates"]) == {"lr3e-4", "mix0.8", "lr3e-3", "lr1e-5"}
    config = study_vasd.configuration()
    assert (
        config["overrides"] == ["learning_rate=1e-3", "learning_rate=3e-4"] and "study_vasd_config" in config["source"]
    )
    # none qualifying: nothing is added
    assert study_vasd_choose.main([str(folders[2]), "--record"]) == 0
    assert "none qualifies" in capsys.readouterr().out
    assert study_vasd.configuration()["overrides"] == ["learning_rate=1e-3"]


def test_the_dev_check_breaks_a_margin_tie_by_sharded():
    import study_vasd_choose

    def last(full, concat, sharded):
        return {"last_vs_start": {"full": {"low": full}, "concat": {"low": concat},
                                  "sharded": {"low": sharded - 0.1, "diff": sharded}}}  # fmt: skip

    assert study_vasd_choose.choose({"a": last(-0.03, 0.0, 0.4), "b": last(0.0, -0.03, 0.5)}) == "b"
    assert study_vasd_choose.choose({"a": last(-0.03, 0.0, 0.4), "b": last(-0.06, 0.0, 0.9)}) == "a"


def test_the_dev_check_compares_configurations_after_their_set_values(tmp_path, capsys):
    """A candidate run after an earlier choice was recorded (its base carries that choice) compares with one run
    before it when only the value it sets differs; a base differing in another value is refused in one line."""
    import study_vasd_choose

    before = _dev_summary(tmp_path / "lr3e-4", ["learning_rate=3e-4"], -0.04, -0.02, 0.30)
    after = _dev_summary(tmp_path / "lr1e-4", ["learning_rate=1e-4"], -0.02, -0.01, 0.25,
                         base=("learning_rate=1e-3", "learning_rate=3e-4"))  # fmt: skip
    assert study_vasd_choose.main([str(before), str(after)]) == 0
    assert "chosen: lr1e-4" in capsys.readouterr().out
    # recorded, the choice trains as it was trained: an earlier study choice in its base is kept, one value per key
    mix = _dev_summary(tmp_path / "mix0.8", ["single_turn_mix=0.8"], -0.01, -0.01, 0.25,
                       base=("learning_rate=1e-3", "learning_rate=3e-4"))  # fmt: skip
    part = ["learning_rate=1e-3"]
    assert study_vasd_choose.study_overrides(study_vasd_choose.read_candidate(mix), part) == [
        "learning_rate=3e-4", "single_turn_mix=0.8"]  # fmt: skip
    assert study_vasd_choose.study_overrides(study_vasd_choose.read_candidate(after), part) == ["learning_rate=1e-4"]
    other = _dev_summary(tmp_path / "r64", ["learning_rate=1e-4"], -0.02, -0.01, 0.25,
                         base=("learning_rate=1e-3", "lora_r=64"))  # fmt: skip
    assert study_vasd_choose.main([str(before), str(other)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differ in task, base configuration" in err[0]


def test_the_dev_check_refuses_a_folder_scored_on_test(tmp_path, capsys):
    import study_vasd_choose

    folder = _dev_summary(tmp_path / "test-run", ["learning_rate=3e-4"], 0.0, 0.0, 0.3, side="test")
    assert study_vasd_choose.main([str(folder)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scored on test tasks" in err[0] and "--side dev" in err[0]


def test_vasd_kinds_reads_where_a_single_turn_loss_lives(tmp_path, capsys):
    """study_vasd_kinds: each arithmetic item is an addition below ten, one crossing ten, or a subtraction; a run's
    correct count per kind and its items lost and gained against the start model are what the episodes say."""
    import study_vasd_kinds as kinds

    assert kinds.item_kind("Ana has 6 pens. Ana finds 7 pens. How many?", "#### 13") == "add crossing 10"
    assert kinds.item_kind("Ivy has 4 coins. Ivy buys 3 more coins. How many?", "#### 7") == "add below 10"
    assert kinds.item_kind("Mia has 9 cookies. Mia gives away 7 cookies. How many?", "#### 2") == "subtract"
    with pytest.raises(ValueError, match="not a one-update"):
        kinds.item_kind("Mia has 9 cookies. Mia gives away 7 cookies. How many?", "#### 5")
    items = [("a", "Ana has 6 pens. Ana finds 7 pens.", 13), ("b", "Ivy has 4 coins. Ivy buys 3 more coins.", 7),
             ("c", "Mia has 9 cookies. Mia gives away 7 cookies.", 2),
             ("d", "Tom has 5 cards. Tom finds 8 cards.", 13)]  # fmt: skip
    (tmp_path / "tasks.json").write_text(json.dumps([{"task_id": t, "question": q, "answer": f"#### {a}"}
                                                     for t, q, a in items]))  # fmt: skip
    verdicts = {"start": {"a": 1, "b": 1, "c": 0, "d": 1}, "seed0": {"a": 0, "b": 1, "c": 1, "d": 0}}
    for run, ok in verdicts.items():
        (tmp_path / "lic" / run).mkdir(parents=True)
        rows = [{"task_id": t, "mode": m, "correct": bool(ok[t]) if m == "full" else True}
                for t in ok for m in ("full", "concat")]  # fmt: skip
        (tmp_path / "lic" / run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert kinds.main([str(tmp_path / "lic"), str(tmp_path / "tasks.json")]) == 0
    out = capsys.readouterr().out
    assert "| start | 1/1 | 2/2 | 0/1 |" in out
    assert "| seed0 | 1/1 (-0/+0) | 0/2 (-2/+0) | 1/1 (-0/+1) |" in out
    (tmp_path / "lic" / "seed1").mkdir()
    (tmp_path / "lic" / "seed1" / "episodes.jsonl").write_text(
        json.dumps({"task_id": "z", "mode": "full", "correct": True})
    )
    assert kinds.main([str(tmp_path / "lic"), str(tmp_path / "tasks.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not all scored on the tasks" in err[0]
