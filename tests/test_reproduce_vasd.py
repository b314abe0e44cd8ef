"""The VASD part of `make reproduce` without models: its choices, tables and summary.json entries from made-up
`fic lic` episodes and stand-in training runs (`fic lic` and the VASD trainer are tested in test_lic.py and
test_vasd*.py). Checks that no test task feeds a choice (task, `single_turn_mix`), that the choices follow their rules
from the dev numbers, the keys `test` / `ablation` with `{diff, low, high, p}`, the seed aggregation, and that the
control differs from VASD only in its loss. The choice of `single_turn_mix` inside the run (SCALE=gpu, `CHOOSE_IN_RUN`)
and the recorded choice of SCALE=cpu (reproduce/dev_choices.json) are both run; the control runs at the three VASD
seeds at both scales (a control at one seed is still reported, and says its seed variance is in no interval).
Differences and recovery come from the two-level bootstrap over seeds and tasks (`fic.bootstrap`, tested in
test_bootstrap.py)."""

import hashlib
import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402

# P per view of each made-up model: (full, concat, sharded); by task family where it matters.
RATES = {
    "base": {"sum-of-two": (0.25, 0.0, 0.0), "*": (0.0, 0.0, 0.0)},
    "sft": {"arithmetic-1-update": (0.8, 0.8, 0.2), "arithmetic-2-updates": (0.6, 0.6, 0.2)},
    "vasd-mix0.3": {"*": (0.6, 0.6, 0.75)},  # erodes the single-turn views beyond the 5-point margin
    "vasd-mix0.5": {"*": (0.8, 0.8, 0.6)},
    "self_sft-mix0.5": {"*": (0.8, 0.8, 0.35)},
}
SEED_SHIFT = {0: 0.0, 1: 0.05, 2: 0.1}  # VASD's P_sharded per seed: 0.60, 0.65, 0.70


def _u(task_id: str, salt: str = "") -> float:
    return int(hashlib.sha256(f"{salt}|{task_id}".encode()).hexdigest()[:12], 16) / 16**12


def _p(model: str, task_id: str, mode: str) -> float:
    name = Path(model).name
    if model == "smollm2":
        key, seed = "base", None
    elif name == "sft":
        key, seed = "sft", None
    else:
        key, seed = name.rsplit("-seed", 1)[0], int(name.rsplit("-seed", 1)[1])
    family = task_id.split("|")[0]
    table = RATES[key]
    p = (table.get(family) or table["*"])[("full", "concat", "sharded").index(mode)]
    if key.startswith("vasd") and mode == "sharded":
        p += SEED_SHIFT[seed]
    return p


def _import_part(monkeypatch, scale: str = "cpu"):
    """reproduce/vasd.py imported afresh at `scale`; the module imported before the test is back afterwards."""
    monkeypatch.setenv("SCALE", scale)
    monkeypatch.setitem(sys.modules, "vasd", None)  # records what to restore
    del sys.modules["vasd"]
    monkeypatch.delitem(sys.modules, "vasd_report", raising=False)  # its `from vasd import` binds the new module
    import vasd as part

    return part


def run_part(tmp_path, monkeypatch, in_run: bool, control_seeds=None, recorded=None):
    """The part with stand-in `fic lic` and training: the mix chosen in the run (`in_run`) or recorded; the control's
    seeds as given (default: the SCALE=cpu setting); `recorded` changes the recorded `vasd_mix` entry's keys."""
    part = _import_part(monkeypatch)
    monkeypatch.setattr(part, "CHOOSE_IN_RUN", in_run)
    if control_seeds is not None:
        monkeypatch.setitem(part.SETTINGS["vasd"], "control_seeds", list(control_seeds))
    if recorded is not None:
        real = repro.recorded_choice
        monkeypatch.setattr(repro, "recorded_choice", lambda key: {**real(key), **recorded})
    calls = {"lic": [], "train": [], "events": []}

    def fake_fic(args, log):
        assert args[0] == "lic"
        model, out = args[args.index("--model") + 1], Path(args[args.index("--out") + 1])
        data = Path(args[args.index("--data") + 1].split(":", 1)[1])
        limit = int(args[args.index("--limit") + 1])
        runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 1
        ids = [row["task_id"] for row in json.loads(data.read_text())][:limit]
        calls["lic"].append({"model": model, "out": out, "ids": ids})
        calls["events"].append(("lic", out.relative_to(tmp_path).parts[0]))
        rows = [{"task_id": t, "mode": m, "run": r, "correct": _u(t, str(r) if runs > 1 else "") < _p(model, t, m)}
                for m in ("full", "concat", "sharded") for r in range(runs) for t in ids]  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (out / "summary.json").write_text("{}")

    def fake_train(recipe, overrides, output_dir, log):
        calls["train"].append({"recipe": recipe, "overrides": overrides, "out": Path(output_dir)})
        calls["events"].append(("train", Path(output_dir).name))
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "config.json").write_text("{}")
        (Path(output_dir) / "eval_summary.json").write_text(json.dumps({"rows": 2000, "train_loss": 0.1, "wall_s": 9}))
        return Path(output_dir)

    def fake_run(cmd, log, what):
        assert cmd[-2] == "sft"
        Path(cmd[-1]).mkdir(parents=True, exist_ok=True)
        (Path(cmd[-1]) / "config.json").write_text("{}")

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "train", fake_train)
    monkeypatch.setattr(repro, "_run", fake_run)
    section = part.run(tmp_path)
    return part, section, calls, tmp_path


@pytest.fixture
def vasd_part(tmp_path, monkeypatch):
    """The in-run choice, with the control at three seeds (what SCALE=gpu runs)."""
    return run_part(tmp_path, monkeypatch, in_run=True, control_seeds=(0, 1, 2))


@pytest.fixture
def vasd_cpu(tmp_path, monkeypatch):
    """SCALE=cpu: the recorded mix, the control at the three seeds."""
    return run_part(tmp_path, monkeypatch, in_run=False)


@pytest.mark.parametrize("fixture", ["vasd_part", "vasd_cpu"])
def test_no_test_task_feeds_a_choice(fixture, request):
    part, section, calls, out = request.getfixturevalue(fixture)
    test_calls = [c for c in calls["lic"] if c["out"].relative_to(out).parts[0] in ("test", "test_sampled")]
    dev_calls = [c for c in calls["lic"] if c["out"].relative_to(out).parts[0] == "dev"]
    assert len(test_calls) + len(dev_calls) == len(calls["lic"])
    test_ids = {t for c in test_calls for t in c["ids"]}
    dev_ids = {t for c in dev_calls for t in c["ids"]}
    assert test_ids and dev_ids and not test_ids & dev_ids
    # the test tasks are scored after every choice and every training run
    events = calls["events"]
    first_test = min(i for i, e in enumerate(events) if e[0] == "lic" and e[1].startswith("test"))
    assert all(e[0] == "lic" and e[1].startswith("test") for e in events[first_test:])
    split = section.summary["split"]
    assert split["overlap"] == 0 and split["test_tasks_read_by_choices"] == 0
    assert split["test_tasks"] == part.SETTINGS["eval"]["test_n"] == len(test_ids)
    # the split itself: disjoint for every candidate, and stable in n (a larger n only adds tasks)
    for name in part.CANDIDATES:
        dev = [i[0] for i in part.family_tasks(name, "dev", 60)]
        test = [i[0] for i in part.family_tasks(name, "test", 60)]
        assert not set(dev) & set(test) and len(set(dev)) == len(set(test)) == 60
        assert [i[0] for i in part.family_tasks(name, "test", 30)] == test[:30]


def test_choices_follow_their_rules_from_dev_numbers(vasd_part):
    part, section, calls, out = vasd_part
    dev = section.summary["dev"]
    assert dev["start"]["sft"] is True and dev["start"]["qualified"] == []  # the base model qualifies nowhere
    assert dev["start"]["numbers"]["arithmetic-1-update"]["p_full"] == 0.0
    task = dev["task"]
    assert task["chosen"] == "arithmetic-1-update" and task["qualified"]  # gap 0.6 vs 0.4
    assert set(task["numbers"]) == set(part.ARITHMETIC)
    assert task["numbers"]["arithmetic-1-update"]["n"] == part.SETTINGS["candidates"]["dev_n"]
    mix = dev["mix"]
    assert mix["chosen"] == 0.5 and mix["kept"] == [0.5]  # 0.3 has the higher P_sharded but erodes FULL
    assert mix["numbers"]["0.3"]["p_sharded"] > mix["numbers"]["0.5"]["p_sharded"]
    assert mix["numbers"]["0.3"]["p_full"] < mix["before"]["p_full"] - part.SETTINGS["vasd"]["keep_margin"]
    assert section.summary["test"]["single_turn_mix"] == 0.5
    # the rules by themselves
    before = {"p_full": 0.8, "p_concat": 0.8, "p_sharded": 0.2}
    after = {0.3: {"p_full": 0.7, "p_concat": 0.7, "p_sharded": 0.9}, 0.5: {"p_full": 0.72, "p_concat": 0.8,
             "p_sharded": 0.5}}  # fmt: skip
    assert part.choose_mix(before, after, 0.05)["chosen"] == 0.5  # none kept: smallest worst drop (8 vs 10 points)
    assert part.choose_mix(before, after, 0.2)["chosen"] == 0.3  # both kept: highest P_sharded


def test_training_runs_and_the_control_differ_only_in_the_loss(vasd_part):
    part, section, calls, out = vasd_part
    runs = {c["out"].name: c["overrides"] for c in calls["train"]}
    assert set(runs) == {"vasd-mix0.3-seed0", "vasd-mix0.5-seed0", "vasd-mix0.5-seed1", "vasd-mix0.5-seed2",
                         "self_sft-mix0.5-seed0", "self_sft-mix0.5-seed1", "self_sft-mix0.5-seed2"}  # fmt: skip
    for seed in part.SEEDS:
        vasd, control = runs[f"vasd-mix0.5-seed{seed}"], runs[f"self_sft-mix0.5-seed{seed}"]
        assert control == [*vasd, "mode=sequence", "temperature=0.0"]
        assert f"seed={seed}" in vasd and "single_turn_mix=0.5" in vasd and "synthetic_task_steps=1" in vasd
        assert any(o.startswith("model_name_or_path=") and o.endswith("/sft") for o in vasd)
    train = section.summary["vasd_train"]
    assert train["rows_trained"] == train["steps"] * train["batch_size"] and train["rows_available"] == 2000
    assert len(train["runs"]) == 7


def test_summary_keys_intervals_and_seed_aggregation(vasd_part):
    part, section, calls, out = vasd_part
    s = section.summary
    test, ablation = s["test"], s["ablation"]
    diff_keys = {"diff", "low", "high", "p"}
    for d in [test["sharded_gain"], test["recovery"]["remaining_gap"], test["kept"]["full"], test["kept"]["concat"],
              *ablation["vasd_minus_self_sft"].values(), *ablation["self_sft_minus_before"].values()]:  # fmt: skip
        assert diff_keys <= set(d) and d["low"] <= d["diff"] <= d["high"]
    # made-up rates: the test tasks' shares are near the RATES, and the differences point the right way
    assert test["sharded_gain"]["detectable"] and test["sharded_gain"]["diff"] > 0.3
    assert ablation["vasd_minus_self_sft"]["sharded"]["low"] > 0
    assert s["targets_met"]["distillation beats self-SFT"] is True
    assert test["kept"]["full"]["diff"] == 0.0 and test["kept"]["full"]["kept"] is True  # same tasks right
    # recovery: the share of the gap closed (fic.metrics.recovery), pooled, with the seeds-and-tasks interval; the
    # paper's ratio target read at the before scores (fic.metrics.recovery_target)
    from fic.metrics import recovery_target

    rec, b, after = test["recovery"], s["before"], test["vasd"]["pooled"]["sharded"]["rate"]
    gap = b["p_full"] - b["p_sharded"]
    assert rec["estimate"] == pytest.approx((after - b["p_sharded"]) / gap) == s["recovery"]
    assert rec["low"] <= rec["estimate"] <= rec["high"] and rec["n_seeds"] == 3 and rec["n_undefined"] == 0
    assert rec["reason"] is None and "gap closed" in rec["definition"]
    assert rec["target"] == pytest.approx(recovery_target(b["p_full"], b["p_sharded"], 0.92))
    assert rec["target"] == pytest.approx((0.92 * b["p_full"] - b["p_sharded"]) / gap)
    assert rec["met"] is (rec["low"] >= rec["target"]) and s["targets_met"]["recovery"] is rec["met"]
    assert not rec["met"]  # made-up rates: about 0.65 of the way from 0.2 to 0.8, target about 0.89
    # every difference of a trained arm resamples its seeds; the start model's own are over tasks
    assert test["sharded_gain"]["n_seeds"] == ablation["vasd_minus_self_sft"]["sharded"]["n_seeds"] == 3
    assert test["before_checks"]["gap"]["n_seeds"] == 1
    assert all(d[view]["n_seeds"] == 1 for d in test["vasd"]["per_seed_differences"] for view in part.VIEWS)
    assert test["vasd"]["pooled"]["sharded"]["interval"] == "seeds and tasks resampled"
    # seeds: per-seed numbers, their mean and sd, and the legacy `after` = the mean of the seeds
    per_seed = test["vasd"]["per_seed"]
    assert [r["seed"] for r in per_seed] == list(part.SEEDS)
    sharded = [r["p_sharded"] for r in per_seed]
    assert sharded[0] < sharded[1] < sharded[2]  # the made-up seed shift
    spread = test["vasd"]["spread"]["p_sharded"]
    assert spread["mean"] == pytest.approx(statistics.fmean(sharded))
    assert spread["sd"] == pytest.approx(statistics.stdev(sharded))
    assert (spread["min"], spread["max"], spread["n_seeds"]) == (min(sharded), max(sharded), 3)
    assert s["after"]["p_sharded"] == pytest.approx(statistics.fmean(sharded))
    assert per_seed[1]["recovery"] == pytest.approx((sharded[1] - b["p_sharded"]) / gap)
    pooled = test["vasd"]["pooled"]["sharded"]
    assert pooled["n_items"] == test["n"] and pooled["n"] == 3 * test["n"]  # seeds of a task are one cluster
    assert len(test["vasd"]["per_seed_differences"]) == 3
    # the report: captions the crosswalk names, every row filled
    captions = [t.caption for t in section.tables]
    assert captions[0].startswith("P per view, greedy") and any(c.startswith("Lost-in-Conversation") for c in captions)
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)
    json.dumps(section.to_json())  # summary.json can hold it


def test_cpu_reads_the_recorded_mix_and_trains_no_other_mix(vasd_cpu):
    """SCALE=cpu: no VASD at another mix and no dev scoring of a VASD model; the recorded choice is used and said."""
    part, section, calls, out = vasd_cpu
    recorded = repro.recorded_choice("vasd_mix")
    assert part.CHOOSE_IN_RUN is False and recorded["task"] == "arithmetic-1-update" and recorded["chosen"] == 0.5
    dev_outs = {
        c["out"].relative_to(out).as_posix() for c in calls["lic"] if c["out"].relative_to(out).parts[0] == "dev"
    }
    assert dev_outs == {"dev/candidates-base", "dev/candidates-start"}  # no dev scoring of a mix
    names = [c["out"].name for c in calls["train"]]
    assert not [n for n in names if "mix0.3" in n] and all("mix0.5" in n for n in names)
    mix = section.summary["dev"]["mix"]
    assert mix["recorded"] == {"commit": "7eebd76", "file": "reproduce/dev_choices.json"}
    assert mix["chosen"] == 0.5 and mix["kept"] == [] and mix["numbers"] == recorded["numbers"]
    assert "recorded_not_used" not in mix
    assert section.summary["test"]["single_turn_mix"] == 0.5
    table = next(t for t in section.tables if t.caption.startswith("Choices on the dev split (2)"))
    assert "7eebd76" in table.caption and "reproduce/dev_choices.json" in table.caption
    assert [r[-1] for r in table.rows].count("yes") == 1 and table.rows[-1][0] == "0.5"
    assert "made by the run at 7eebd76" in " ".join(section.text)


def test_cpu_control_at_the_three_vasd_seeds_paired_by_seed(vasd_cpu, tmp_path, monkeypatch):
    part, section, calls, out = vasd_cpu
    assert part.seeds_of("vasd") == part.seeds_of("self_sft") == [0, 1, 2]
    trained = sorted(c["out"].name for c in calls["train"])
    assert trained == [f"{kind}-mix0.5-seed{seed}" for kind in ("self_sft", "vasd") for seed in (0, 1, 2)]
    tested = sorted(c["out"].name for c in calls["lic"] if c["out"].relative_to(out).parts[0] == "test")
    assert tested == ["before", *[f"{kind}-seed{seed}" for kind in ("self_sft", "vasd") for seed in (0, 1, 2)]]
    s = section.summary
    assert s["test"]["n"] == part.SETTINGS["eval"]["test_n"] == 60
    control = s["ablation"]["self_sft"]
    assert s["ablation"]["seeds"] == [0, 1, 2] and [r["seed"] for r in control["per_seed"]] == [0, 1, 2]
    assert control["spread"]["p_sharded"]["n_seeds"] == 3 and control["pooled"]["sharded"]["n"] == 3 * s["test"]["n"]
    ablation = s["ablation"]["vasd_minus_self_sft"]["sharded"]
    assert ablation["n_items"] == s["test"]["n"] and ablation["n_seeds"] == 3
    assert s["ablation"]["self_sft_recovery"]["n_seeds"] == 3
    assert s["targets_met"]["distillation beats self-SFT"] is True
    main = section.tables[0]
    assert "3 seeds each" in main.caption and "resampling seeds and tasks" in main.caption
    assert all(row[4] != "n/a (1 seed)" and row[-1] != "n/a (1 seed)" for row in main.rows)
    assert "by seed between VASD and the control" in section.tables[1].caption
    assert "self-SFT seeds 0, 1, 2" in section.about["seeds"] and "VASD seeds 0, 1, 2" in section.about["seeds"]
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)
    json.dumps(section.to_json())
    # VASD seed 0 at the chosen mix is trained by the same call as the in-run choice's dev model
    _, _, in_run_calls, in_run_out = run_part(tmp_path / "in_run", monkeypatch, in_run=True)
    overrides = lambda cs, root: next(  # noqa: E731
        [o.replace(str(root), "ROOT") for o in c["overrides"]] for c in cs if c["out"].name == "vasd-mix0.5-seed0"
    )
    assert overrides(calls["train"], out) == overrides(in_run_calls["train"], in_run_out)


def test_a_control_at_one_seed_is_seed_free_and_says_so(tmp_path, monkeypatch):
    """A control trained at one seed (a setting, no longer the default): VASD - self-SFT pairs VASD's seeds per task
    with its one run, and the report says its seed variance is in no interval."""
    part, section, calls, out = run_part(tmp_path, monkeypatch, in_run=False, control_seeds=(0,))
    s = section.summary
    control = s["ablation"]["self_sft"]
    assert s["ablation"]["seeds"] == [0] and control["spread"]["p_sharded"]["sd"] == 0.0
    assert control["pooled"]["sharded"]["n"] == s["test"]["n"]  # one run per task
    assert s["ablation"]["vasd_minus_self_sft"]["sharded"]["n_seeds"] == 3  # VASD's seeds resampled, the control fixed
    main = section.tables[0]
    assert "VASD at 3 seeds, the control at seed 0" in main.caption
    assert [row[-1] for row in main.rows] == ["n/a (1 seed)"] * 3
    assert "control's seed 0" in section.tables[1].caption
    assert "seed variance is in none of the intervals" in " ".join(section.text)
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)


@pytest.mark.parametrize("recorded", [{"task": "arithmetic-2-updates"}, {"start_model": "base"}])
def test_cpu_chooses_the_mix_in_the_run_when_the_record_is_for_another_task(tmp_path, monkeypatch, capsys, recorded):
    part, section, calls, out = run_part(tmp_path, monkeypatch, in_run=False, recorded=recorded)
    assert "warning: vasd: the recorded single_turn_mix does not apply" in capsys.readouterr().err
    names = {c["out"].name for c in calls["train"]}
    assert {"vasd-mix0.3-seed0", "vasd-mix0.5-seed0"} <= names  # both mixes trained for the dev choice
    assert any(c["out"].name == "vasd-mix0.3-seed0" and c["out"].parent.name == "dev" for c in calls["lic"])
    mix = section.summary["dev"]["mix"]
    assert "recorded" not in mix and mix["kept"] == [0.5]  # the in-run choice from the made-up dev numbers
    assert list(recorded)[0] in mix["recorded_not_used"]
    assert "was chosen inside this run" in " ".join(section.text)
    assert part.seeds_of("self_sft") == [0, 1, 2]  # the control's seeds stay as at SCALE=cpu


def test_scale_sets_the_sizes(monkeypatch):
    cpu = _import_part(monkeypatch, "cpu")
    assert cpu.CHOOSE_IN_RUN is False and cpu.SETTINGS["eval"]["test_n"] == 60
    assert cpu.seeds_of("self_sft") == cpu.seeds_of("vasd") == [0, 1, 2]
    gpu = _import_part(monkeypatch, "gpu")
    assert gpu.CHOOSE_IN_RUN is True and gpu.SETTINGS["eval"]["test_n"] == 80
    assert gpu.seeds_of("self_sft") == gpu.seeds_of("vasd") == [0, 1, 2]
    with pytest.raises(ValueError):
        gpu.seeds_of("sft")


def test_sizes_fit_the_time_budget(monkeypatch):
    part = _import_part(monkeypatch, "cpu")
    t, lic = part.TIME, lambda n: part.TIME["lic_load"] + n * part.TIME["lic_task"]
    vasd, control = t["train_load"] + 8 * t["vasd_step"], t["train_load"] + 8 * t["self_sft_step"]
    # the module docstring's sums: 1105 s at SCALE=cpu (851 s before the control's seeds 1 and 2 came back: two
    # trainings and two test runs more), 1379 s with the gpu run's in-run choice and n
    assert part.estimated_seconds() == pytest.approx(851.4 + 2 * (control + lic(60))) == pytest.approx(1105.4)
    assert part.estimated_seconds() <= 20 * 60
    in_run = part.estimated_seconds(choose_in_run=True)
    assert in_run - part.estimated_seconds() == pytest.approx(vasd + 2 * lic(40))  # VASD at 0.3, dev at both
    gpu = _import_part(monkeypatch, "gpu")
    assert gpu.estimated_seconds() == pytest.approx(1379.2)
    assert gpu.estimated_seconds() - in_run == pytest.approx(7 * (lic(80) - lic(60)))  # 7 greedy test runs
    assert part.SEEDS == (0, 1, 2) and len(part.MIXES) >= 2
