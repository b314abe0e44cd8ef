"""The VASD part of `make reproduce` without models: its choices, tables and summary.json entries from made-up
`fic lic` episodes and stand-in training runs (`fic lic` and the VASD trainer are tested in test_lic.py and
test_vasd*.py). Checks that no test task feeds a choice (task, `single_turn_mix`), that the choices follow their rules
from the dev numbers, the keys `test` / `ablation` with `{diff, low, high, p}`, the seed aggregation, and that the
control differs from VASD only in its loss."""

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


@pytest.fixture
def vasd_part(tmp_path, monkeypatch):
    sys.modules.pop("vasd", None)
    import vasd as part

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


def test_no_test_task_feeds_a_choice(vasd_part):
    part, section, calls, out = vasd_part
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
    for d in [test["sharded_gain"], test["recovery"]["difference"], test["kept"]["full"], test["kept"]["concat"],
              *ablation["vasd_minus_self_sft"].values(), *ablation["self_sft_minus_before"].values()]:  # fmt: skip
        assert diff_keys <= set(d) and d["low"] <= d["diff"] <= d["high"]
    # made-up rates: the test tasks' shares are near the RATES, and the differences point the right way
    assert test["sharded_gain"]["detectable"] and test["sharded_gain"]["diff"] > 0.3
    assert ablation["vasd_minus_self_sft"]["sharded"]["low"] > 0
    assert s["targets_met"]["distillation beats self-SFT"] is True
    assert test["kept"]["full"]["diff"] == 0.0 and test["kept"]["full"]["kept"] is True  # same tasks right
    ratio = test["recovery"]["ratio"]
    assert ratio["low"] <= ratio["ratio"] <= ratio["high"]
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
    assert per_seed[1]["recovery"] == pytest.approx(sharded[1] / s["before"]["p_full"])
    pooled = test["vasd"]["pooled"]["sharded"]
    assert pooled["n_items"] == test["n"] and pooled["n"] == 3 * test["n"]  # seeds of a task are one cluster
    assert len(test["vasd"]["per_seed_differences"]) == 3
    # the report: captions the crosswalk names, every row filled
    captions = [t.caption for t in section.tables]
    assert captions[0].startswith("P per view, greedy") and any(c.startswith("Lost-in-Conversation") for c in captions)
    assert all(len(row) == len(t.columns) for t in section.tables for row in t.rows)
    json.dumps(section.to_json())  # summary.json can hold it


def test_sizes_fit_the_time_budget():
    sys.modules.pop("vasd", None)
    import vasd as part

    assert part.estimated_seconds() <= 26 * 60
    assert part.SEEDS == (0, 1, 2) and len(part.MIXES) >= 2
