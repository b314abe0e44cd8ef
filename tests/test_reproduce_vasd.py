"""The VASD part of `make reproduce` without models: its choices, tables and summary.json entries from made-up
`fic lic` runs (summaries written by `fic.eval.lic.summarize`, as `fic lic` writes them) and stand-in training runs
(`fic lic` and the VASD trainer are tested in test_lic.py and test_vasd*.py). Checks that no test task feeds a choice
(start model, task, the training configuration's dev grid), that the choices follow their rules from the dev
numbers, the keys `test` / `ablation` with `{diff, low, high, p}`, the seed aggregation, and that the control differs
from VASD only in its loss. The grid inside the run (SCALE=gpu, `CHOOSE_IN_RUN`) and the recorded choice of SCALE=cpu
(reproduce/dev_choices.json `vasd_config`) are both run. Differences and recovery come from the two-level bootstrap
over seeds and tasks (`fic.bootstrap`, tested in test_bootstrap.py)."""

import hashlib
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402

GRID = repro.load_settings("vasd")["vasd"]["grid"]
CHOSEN = "lora-r16-lr3e-4"  # kept, and the highest P_sharded among the kept configurations below
ERODES = "lora-r16-lr1e-3"  # the highest P_sharded of all, but it erodes FULL beyond the 5-point margin
# P per view of each made-up model: (full, concat, sharded); by task family where it matters.
RATES = {
    "base": {"sum-of-two": (0.25, 0.0, 0.0), "*": (0.0, 0.0, 0.0)},
    "sft": {"arithmetic-1-update": (0.8, 0.8, 0.2), "arithmetic-2-updates": (0.6, 0.6, 0.2)},
    f"grid-{ERODES}": {"*": (0.6, 0.6, 0.75)},
    f"grid-{CHOSEN}": {"*": (0.8, 0.8, 0.6)},
    "grid": {"*": (0.8, 0.8, 0.4)},  # every other configuration of the grid
    "vasd": {"*": (0.8, 0.8, 0.6)},
    "self_sft": {"*": (0.8, 0.8, 0.35)},
}
SEED_SHIFT = {0: 0.0, 1: 0.05, 2: 0.1, 3: 0.02, 4: 0.07}  # VASD's P_sharded per seed


def _u(task_id: str, salt: str = "") -> float:
    return int(hashlib.sha256(f"{salt}|{task_id}".encode()).hexdigest()[:12], 16) / 16**12


def _p(model: str, task_id: str, mode: str) -> float:
    name = Path(model).name
    seed = 0
    if model == "smollm2":
        key = "base"
    elif name == "sft" or name.startswith("grid-"):
        key = name if name in RATES else ("grid" if name.startswith("grid-") else name)
    else:
        key, seed = name.rsplit("-seed", 1)[0], int(name.rsplit("-seed", 1)[1])
    family = task_id.split("|")[0]
    table = RATES[key]
    p = (table.get(family) or table["*"])[("full", "concat", "sharded").index(mode)]
    if key in ("vasd", f"grid-{CHOSEN}") and mode == "sharded":
        p += SEED_SHIFT[seed]
    return p


def _import_part(monkeypatch, scale: str = "cpu"):
    """reproduce/vasd.py imported afresh at `scale`; the modules imported before the test are back afterwards."""
    monkeypatch.setenv("SCALE", scale)
    for name in ("vasd", "vasd_report", "vasd_settings"):
        monkeypatch.setitem(sys.modules, name, None)  # records what to restore
        del sys.modules[name]
    import vasd as part

    return part


def recorded_entry(**changes) -> dict:
    """A `vasd_config` record as an earlier run writes it into reproduce/dev_choices.json."""
    numbers = {name: {"p_full": 0.8, "p_concat": 0.8, "p_sharded": 0.4, "n": 40} for name in GRID}
    entry = {"task": "arithmetic-1-update", "start_model": "sft", "grid": GRID, "chosen": CHOSEN,
             "overrides": GRID[CHOSEN], "kept": list(GRID), "seed": 0, "numbers": numbers,
             "before": {"p_full": 0.8, "p_concat": 0.8, "p_sharded": 0.2, "n": 40},
             "rule": "highest dev P_sharded among configurations keeping ..."}  # fmt: skip
    return {**entry, **changes, "recorded": {"commit": "abc1234", "file": "reproduce/dev_choices.json"}}


def run_part(tmp_path, monkeypatch, in_run: bool, control_seeds=None, recorded=None):
    """The part with stand-in `fic lic` and training: the grid run in the run (`in_run`) or the recorded choice
    (`recorded`: changes to the record's keys; None: a record that applies); the control's seeds as given."""
    from fic.eval.lic import summarize

    part = _import_part(monkeypatch)
    monkeypatch.setattr(part, "CHOOSE_IN_RUN", in_run)
    if control_seeds is not None:
        monkeypatch.setitem(part.SETTINGS["vasd"], "control_seeds", list(control_seeds))
    record = recorded_entry(**(recorded or {}))
    monkeypatch.setattr(repro, "recorded_choice", lambda key: json.loads(json.dumps(record)))
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
        summary = {**summarize(rows, ["full", "concat", "sharded"]), "runs": runs, "n_tasks": len(ids)}
        (out / "summary.json").write_text(json.dumps(summary))

    def fake_train(recipe, overrides, output_dir, log):
        calls["train"].append({"recipe": recipe, "overrides": overrides, "out": Path(output_dir)})
        calls["events"].append(("train", Path(output_dir).name))
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "config.json").write_text("{}")
        (Path(output_dir) / "eval_summary.json").write_text(json.dumps({"rows": 2000, "train_loss": 0.1, "wall_s": 9}))
        return Path(output_dir)

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "train", fake_train)
    section = part.run(tmp_path)
    return part, section, calls, tmp_path


@pytest.fixture
def vasd_part(tmp_path, monkeypatch):
    """The grid inside the run (what SCALE=gpu runs)."""
    return run_part(tmp_path, monkeypatch, in_run=True)


@pytest.fixture
def vasd_cpu(tmp_path, monkeypatch):
    """SCALE=cpu: the recorded configuration."""
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
    config = dev["config"]
    assert list(config["numbers"]) == list(GRID)  # every configuration of the grid was scored on dev
    assert config["chosen"] == CHOSEN and ERODES not in config["kept"] and CHOSEN in config["kept"]
    assert config["numbers"][ERODES]["p_sharded"] > config["numbers"][CHOSEN]["p_sharded"]
    assert config["overrides"] == GRID[CHOSEN] and section.summary["test"]["config"] == CHOSEN
    # the rule by itself
    before = {"p_full": 0.8, "p_concat": 0.8, "p_sharded": 0.2}
    after = {"a": {"p_full": 0.7, "p_concat": 0.7, "p_sharded": 0.9},
             "b": {"p_full": 0.72, "p_concat": 0.8, "p_sharded": 0.5}}  # fmt: skip
    monkeypatch_grid = {"a": ["learning_rate=1"], "b": ["learning_rate=2"]}
    part.GRID.clear()
    part.GRID.update(monkeypatch_grid)
    try:
        assert part.choose_config(before, after, 0.05)["chosen"] == "b"  # none kept: smallest worst drop
        assert part.choose_config(before, after, 0.2)["chosen"] == "a"  # both kept: highest P_sharded
        tie = {"a": after["b"], "b": after["b"]}
        assert part.choose_config(before, tie, 0.2)["chosen"] == "a"  # ties: grid order
    finally:
        part.GRID.clear()
        part.GRID.update(GRID)


def test_training_runs_and_the_control_differ_only_in_the_loss(vasd_part):
    part, section, calls, out = vasd_part
    runs = {c["out"].name: c["overrides"] for c in calls["train"]}
    seeds = part.seeds_of("vasd")
    # the grid at the grid seed; VASD at the grid seed is the chosen configuration's grid model, not trained again
    assert set(runs) == {"sft", *(f"grid-{n}" for n in GRID), *(f"vasd-seed{s}" for s in seeds if s != 0),
                         *(f"self_sft-seed{s}" for s in part.seeds_of("self_sft"))}  # fmt: skip
    assert runs["sft"][0].startswith("train_datasets=[conversations:")
    assert next(c["recipe"] for c in calls["train"] if c["out"].name == "sft") == "reproduce_vasd_sft"
    for seed in seeds:
        vasd = runs[f"grid-{CHOSEN}" if seed == 0 else f"vasd-seed{seed}"]
        control = runs[f"self_sft-seed{seed}"]
        assert control == [*vasd, "mode=sequence", "temperature=0.0"]
        assert f"seed={seed}" in vasd and "synthetic_task_steps=1" in vasd
        assert vasd[-len(GRID[CHOSEN]) :] == GRID[CHOSEN]
        assert any(o.startswith("model_name_or_path=") and o.endswith("/sft") for o in vasd)
    train = section.summary["vasd_train"]
    assert train["rows_trained"] == train["steps"] * train["batch_size"] and train["rows_available"] == 2000
    assert len(train["runs"]) == len(seeds) + len(part.seeds_of("self_sft"))


def test_the_sft_data_are_single_turn_conversations(tmp_path, monkeypatch):
    part = _import_part(monkeypatch)
    path = part.sft_conversations(tmp_path / "sft.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= part.SETTINGS["sft"]["tasks"] and len({r["id"] for r in rows}) == len(rows)
    assert all([m["role"] for m in r["messages"]] == ["user", "assistant"] for r in rows)
    assert all(re.fullmatch(r"The answer is -?\d+\.", r["messages"][1]["content"]) for r in rows)
    prompts = {r["messages"][0]["content"] for r in rows}
    held_out = {
        i[1] for name in part.ARITHMETIC for side in ("dev", "test") for i in part.family_tasks(name, side, 60)
    }
    assert held_out and not held_out & prompts  # no dev or test task is trained on


def test_summary_keys_intervals_and_seed_aggregation(vasd_part):
    part, section, calls, out = vasd_part
    s = section.summary
    test, ablation = s["test"], s["ablation"]
    n_seeds = len(part.seeds_of("vasd"))
    diff_keys = {"diff", "low", "high", "p"}
    for d in [test["sharded_gain"], test["recovery"]["remaining_gap"], test["kept"]["full"], test["kept"]["concat"],
              *ablation["vasd_minus_self_sft"].values(), *ablation["self_sft_minus_before"].values()]:  # fmt: skip
        assert diff_keys <= set(d) and d["low"] <= d["diff"] <= d["high"]
    # made-up rates: the test tasks' shares are near the RATES, and the differences point the right way
    assert test["sharded_gain"]["detectable"] and test["sharded_gain"]["diff"] > 0.3
    assert ablation["vasd_minus_self_sft"]["sharded"]["low"] > 0
    assert s["targets_met"]["distillation beats self-SFT"] is True
    assert test["kept"]["full"]["diff"] == 0.0 and test["kept"]["full"]["kept"] is True  # same tasks right
    from fic.metrics import recovery_target

    rec, b, after = test["recovery"], s["before"], test["vasd"]["pooled"]["sharded"]["rate"]
    gap = b["p_full"] - b["p_sharded"]
    assert rec["estimate"] == pytest.approx((after - b["p_sharded"]) / gap) == s["recovery"]
    assert rec["low"] <= rec["estimate"] <= rec["high"] and rec["n_seeds"] == n_seeds and rec["n_undefined"] == 0
    assert rec["reason"] is None and "gap closed" in rec["definition"]
    assert rec["target"] == pytest.approx(recovery_target(b["p_full"], b["p_sharded"], 0.92))
    assert rec["met"] is (rec["low"] >= rec["target"]) and s["targets_met"]["recovery"] is rec["met"]
    assert not rec["met"]
    assert test["sharded_gain"]["n_seeds"] == ablation["vasd_minus_self_sft"]["sharded"]["n_seeds"] == n_seeds
    assert test["before_checks"]["gap"]["n_seeds"] == 1
    assert all(d[view]["n_seeds"] == 1 for d in test["vasd"]["per_seed_differences"] for view in part.VIEWS)
    assert test["vasd"]["pooled"]["sharded"]["interval"] == "seeds and tasks resampled"
    # seeds: per-seed numbers (read from each run's `fic lic` summary), their mean and sd
    per_seed = test["vasd"]["per_seed"]
    assert [r["seed"] for r in per_seed] == part.seeds_of("vasd")
    sharded = [r["p_sharded"] for r in per_seed]
    for seed, p in zip(part.seeds_of("vasd"), sharded):
        name = f"grid-{CHOSEN}" if seed == 0 else f"vasd-seed{seed}"
        assert p == json.loads((out / "test" / f"vasd-seed{seed}" / "summary.json").read_text())["p_sharded"]
        assert name
    assert sharded[0] < sharded[1] < sharded[2]  # the made-up seed shift
    spread = test["vasd"]["spread"]["p_sharded"]
    assert spread["mean"] == pytest.approx(statistics.fmean(sharded))
    assert spread["sd"] == pytest.approx(statistics.stdev(sharded))
    assert (spread["min"], spread["max"], spread["n_seeds"]) == (min(sharded), max(sharded), n_seeds)
    assert s["after"]["p_sharded"] == pytest.approx(statistics.fmean(sharded))
    assert per_seed[1]["recovery"] == pytest.approx((sharded[1] - b["p_sharded"]) / gap)
    pooled = test["vasd"]["pooled"]["sharded"]
    assert pooled["n_items"] == test["n"] and pooled["n"] == n_seeds * test["n"]  # seeds of a task: one cluster
    assert len(test["vasd"]["per_seed_differences"]) == n_seeds
    # Lost-in-Conversation metrics are `fic lic`'s own (its summary's modes), not recomputed
    lic = json.loads((out / "test_sampled" / "before" / "summary.json").read_text())["modes"]
    assert s["lic"]["before"] == lic
    captions = [t.caption for t in section.tables]
    assert captions[0].startswith("P per view, greedy") and any(c.startswith("Lost-in-Conversation") for c in captions)
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)
    json.dumps(section.to_json())  # summary.json can hold it


def test_cpu_reads_the_recorded_configuration_and_runs_no_grid(vasd_cpu):
    part, section, calls, out = vasd_cpu
    assert part.CHOOSE_IN_RUN is False
    dev_outs = {
        c["out"].relative_to(out).parts[1] for c in calls["lic"] if c["out"].relative_to(out).parts[0] == "dev"
    }
    assert dev_outs == {"candidates-base", "candidates-start"}  # no dev scoring of a grid configuration
    names = [c["out"].name for c in calls["train"]]
    assert not [n for n in names if n.startswith("grid-")]
    assert sorted(names) == sorted(["sft", *(f"vasd-seed{s}" for s in part.seeds_of("vasd")),
                                    *(f"self_sft-seed{s}" for s in part.seeds_of("self_sft"))])  # fmt: skip
    config = section.summary["dev"]["config"]
    assert config["recorded"] == {"commit": "abc1234", "file": "reproduce/dev_choices.json"}
    assert config["chosen"] == CHOSEN and "recorded_not_used" not in config
    table = next(t for t in section.tables if t.caption.startswith("Choices on the dev split (2)"))
    assert "abc1234" in table.caption and [r[-1] for r in table.rows].count("yes") == 1
    assert "chosen by the run at abc1234" in " ".join(section.text)
    tested = sorted(c["out"].name for c in calls["lic"] if c["out"].relative_to(out).parts[0] == "test")
    assert tested == sorted(["before", *(f"vasd-seed{s}" for s in part.seeds_of("vasd")),
                             *(f"self_sft-seed{s}" for s in part.seeds_of("self_sft"))])  # fmt: skip


def test_five_seeds_each_paired_by_seed(vasd_cpu):
    part, section, calls, out = vasd_cpu
    assert part.seeds_of("vasd") == part.seeds_of("self_sft") == [0, 1, 2, 3, 4]
    s = section.summary
    control = s["ablation"]["self_sft"]
    assert s["ablation"]["seeds"] == [0, 1, 2, 3, 4] and [r["seed"] for r in control["per_seed"]] == [0, 1, 2, 3, 4]
    assert control["spread"]["p_sharded"]["n_seeds"] == 5 and control["pooled"]["sharded"]["n"] == 5 * s["test"]["n"]
    ablation = s["ablation"]["vasd_minus_self_sft"]["sharded"]
    assert ablation["n_items"] == s["test"]["n"] and ablation["n_seeds"] == 5
    main = section.tables[0]
    assert "5 seeds each" in main.caption and "resampling seeds and tasks" in main.caption
    assert "by seed between VASD and the control" in section.tables[1].caption
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)


def test_a_control_at_one_seed_is_seed_free_and_says_so(tmp_path, monkeypatch):
    """A control trained at one seed (a setting, not the default): VASD - self-SFT pairs VASD's seeds per task with
    its one run, and the report says its seed variance is in no interval."""
    part, section, calls, out = run_part(tmp_path, monkeypatch, in_run=False, control_seeds=(0,))
    s = section.summary
    control = s["ablation"]["self_sft"]
    assert s["ablation"]["seeds"] == [0] and control["spread"]["p_sharded"]["sd"] == 0.0
    assert control["pooled"]["sharded"]["n"] == s["test"]["n"]
    assert s["ablation"]["vasd_minus_self_sft"]["sharded"]["n_seeds"] == 5
    main = section.tables[0]
    assert "VASD at 5 seeds, the control at seed 0" in main.caption
    assert [row[-1] for row in main.rows] == ["n/a (1 seed)"] * 3
    assert "seed variance is in none of the intervals" in " ".join(section.text)


@pytest.mark.parametrize(
    "recorded", [{"task": "arithmetic-2-updates"}, {"start_model": "base"}, {"grid": {"other": ["beta=1.0"]}}]
)
def test_cpu_runs_the_grid_when_the_record_is_for_another_setup(tmp_path, monkeypatch, capsys, recorded):
    part, section, calls, out = run_part(tmp_path, monkeypatch, in_run=False, recorded=recorded)
    assert "warning: vasd: the recorded training configuration does not apply" in capsys.readouterr().err
    names = {c["out"].name for c in calls["train"]}
    assert {f"grid-{n}" for n in GRID} <= names
    config = section.summary["dev"]["config"]
    assert "recorded" not in config and config["chosen"] == CHOSEN
    assert list(recorded)[0] in config["recorded_not_used"]
    assert "the grid ran inside this run" in " ".join(section.text)


def test_a_summary_that_is_not_fic_lic_s_is_refused_in_one_line(tmp_path, monkeypatch):
    part = _import_part(monkeypatch)
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    with pytest.raises(repro.StepError, match="not a `fic lic` summary"):
        part.lic("m", tmp_path / "x.json", out, tmp_path / "log", 1, 10)


def test_scale_sets_the_sizes(monkeypatch):
    cpu = _import_part(monkeypatch, "cpu")
    assert cpu.CHOOSE_IN_RUN is False and cpu.SETTINGS["eval"]["test_n"] == 60
    gpu = _import_part(monkeypatch, "gpu")
    assert gpu.CHOOSE_IN_RUN is True and gpu.SETTINGS["eval"]["test_n"] == 80
    with pytest.raises(ValueError):
        gpu.seeds_of("sft")


def test_sizes_fit_the_time_budget(monkeypatch):
    """The part's estimate from its measured unit times: at SCALE=cpu (the grid recorded) it leaves the other parts
    room in 90 minutes; the grid in the run adds its configurations' training and dev scoring less one VASD run."""
    part = _import_part(monkeypatch, "cpu")
    t = part.SETTINGS["seconds"]
    lic = lambda n: t["lic_load"] + n * t["lic_task"]  # noqa: E731
    vasd = t["train_load"] + 8 * t["vasd_step"]
    assert part.estimated_seconds() <= 45 * 60
    in_run = part.estimated_seconds(choose_in_run=True)
    assert in_run - part.estimated_seconds() == pytest.approx(len(GRID) * (vasd + lic(40)) - vasd)
