"""The collab part at several training seeds: pooled rates and differences with the seed-and-context bootstrap, paired
by context, the base model seed-free, IFBench in rows of its own, a one-seed folder extended in place, the seeds
setting checked, the hacking check and the time estimate per seed. The part runs on the made-up commands of
tests/collab_fakes.py."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reproduce"))

import collab_fakes  # noqa: E402
import repro  # noqa: E402
from collab_fakes import KEY, flip, import_part, run_part, samples, write  # noqa: E402


def _seed_of(model: str) -> int:
    tail = Path(model).name.rsplit("_seed", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0


def _verdicts(folder: Path) -> dict:
    from collab_seeds import verdicts

    return verdicts([json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()])


def test_three_seeds_pool_with_an_interval_that_widens_when_the_seeds_disagree(tmp_path, monkeypatch):
    """Every trained arm at 3 seeds (the default): its pooled rate and difference from the base model come from the
    seed-and-context bootstrap (`vasd_estimates`, the draw VASD uses), each seed's figures and their sd are reported;
    a made-up seed shift (seed 1 worse, seed 2 better) widens the pooled interval, beyond the width an interval over
    contexts alone gives the same turns."""
    from vasd_estimates import difference, seed_rate

    from fic.estimates import paired_difference

    def run(shift: float):
        monkeypatch.setattr(collab_fakes, "rate",
                            lambda model: 0.2 if model == "smollm2" else 0.5 + shift * (_seed_of(model) - 1))  # fmt: skip
        out = tmp_path / f"shift{shift}" / "collab"
        return run_part(out, monkeypatch, "cpu")

    part, agree, out, *_ = run(0.0)
    assert part.seeds() == [0, 1, 2] == agree.summary["seeds"]["trained"]
    s = agree.summary
    base = {None: _verdicts(out / "probe_base")}
    runs = {seed: _verdicts(out / f"probe_{part.run_name('real', seed)}") for seed in (0, 1, 2)}
    pooled = s["differences"]["real"]["overall"]
    direct = difference(base, runs)
    assert {k: pooled[k] for k in ("diff", "low", "high", "p", "n_items", "n_seeds")} == {
        k: direct[k] for k in ("diff", "low", "high", "p", "n_items", "n_seeds")}  # fmt: skip
    held = s["heldout"]["healthbench_contexts"] + s["heldout"]["mt_bench_contexts"]
    assert pooled["n_seeds"] == 3 and pooled["n_items"] == held and "holm_family" in pooled
    assert s["arms"]["real"]["overall"]["vs_base"] == pooled
    raw = s["estimates"]["real"]["overall"]["raw"]
    assert {k: raw[k] for k in ("rate", "low", "high", "n_seeds")} == {
        k: v for k, v in seed_rate(runs).items() if k in ("rate", "low", "high", "n_seeds")}  # fmt: skip
    assert raw["n"] == 3 * 4 * held and raw["interval"].startswith("seeds and contexts resampled")
    # HealthBench's 9 contexts: not estimable, pooled or per seed
    hb = s["differences"]["real"]["by_dataset"]["healthbench"]
    assert hb["diff"] is None and hb["reading"].startswith("not estimable") and hb["n_seeds"] == 3
    # each seed's figures, as one seed would report them, and their spread
    per_seed = s["seeds"]["models"]["real"]["per_seed"]
    assert [r["seed"] for r in per_seed] == [0, 1, 2]
    from fic.followup_summary import compare

    base_rows = [json.loads(x) for x in (out / "probe_base" / "samples.jsonl").read_text().splitlines()]
    for r in per_seed:
        rows = [json.loads(x) for x in (out / f"probe_{part.run_name('real', r['seed'])}" / "samples.jsonl")
                .read_text().splitlines()]  # fmt: skip
        assert r["vs_base"]["overall"]["diff"] == pytest.approx(compare(base_rows, rows)["overall"]["diff"])
    sd = s["seeds"]["models"]["real"]["spread"]["overall"]["vs_base"]["sd"]
    assert sd == pytest.approx(__import__("statistics").stdev(r["vs_base"]["overall"]["diff"] for r in per_seed))
    table = next(t for t in agree.tables if t.caption.startswith("Trained models at each training seed"))
    row = next(x for x in table.rows if x[0] == "SFT: real follow-ups" and x[1] == "overall")
    assert row[-1] == pooled["reading"] and len(row[2].split(" / ")) == 3 and row[3] != "n/a"
    assert next(x for x in table.rows if x[1] == "healthbench")[2].startswith("not estimable")
    assert "training seeds 0, 1, 2" in agree.about["seeds"] and any(
        t.startswith("Training seeds:") for t in agree.text
    )

    _, disagree, out2, *_ = run(0.3)
    width = {name: (sec.summary["differences"]["real"]["overall"]["high"]
                    - sec.summary["differences"]["real"]["overall"]["low"]) for name, sec in (("agree", agree),
                                                                                               ("disagree", disagree))}  # fmt: skip
    assert width["disagree"] > 1.5 * width["agree"], width
    # the same turns with the seeds taken as fixed (contexts resampled only) give a narrower interval
    runs2 = {seed: _verdicts(out2 / f"probe_{part.run_name('real', seed)}") for seed in (0, 1, 2)}
    flat = {item: [v for seed in runs2 for v in runs2[seed][item]] for item in runs2[0]}
    contexts_only = paired_difference(_verdicts(out2 / "probe_base"), flat)
    assert width["disagree"] > contexts_only["high"] - contexts_only["low"]
    spread = disagree.summary["seeds"]["models"]["real"]["spread"]["overall"]["raw"]
    assert spread["sd"] > 0.2 and spread["min"] < 0.4 < 0.6 < spread["max"]


def test_seeded_differences_are_paired_by_context(tmp_path, monkeypatch):
    """Trained models whose every seed repeats the base model's verdicts context by context: the pooled difference is 0
    with the interval [0, 0] (one draw of contexts for both), and so on IFBench."""
    original = flip
    monkeypatch.setattr(collab_fakes, "flip", lambda p, *key: original(0.3, *key[1:]))
    part, section, out, *_ = run_part(tmp_path / "collab", monkeypatch, "cpu")
    for k in ("real", "template_filtered", "rl"):
        for cell in (section.summary["differences"][k]["overall"],
                     section.summary["differences"][k]["by_dataset"]["mt_bench"],
                     section.summary["differences"][k]["by_dataset"]["ifbench"]):  # fmt: skip
            assert (cell["diff"], cell["low"], cell["high"], cell["n_seeds"]) == (0.0, 0.0, 0.0, 3), (k, cell)


@pytest.fixture
def collab_recorded(tmp_path, monkeypatch):
    """SCALE=cpu, the default: the choices read from reproduce/dev_choices.json; three seeds."""
    return run_part(tmp_path, monkeypatch, "cpu")


def test_the_base_model_is_seed_free_and_ifbench_has_its_own_rows(collab_recorded):
    """One base model (one held-out and one IFBench probe, its figures the probes' own); every model probed on
    IFBench items outside the judge's fit after the base model's answers, reported as a third dataset apart from the
    pooled held-out figures."""
    part, section, out, calls, trained, _ = collab_recorded
    s = section.summary
    base_calls = [c for c in calls if c["model"] == repro.MODEL]
    assert sorted(c["out"].name for c in base_calls) == ["ifbench_base", "probe_base"]
    assert not list(out.glob("*base_seed*")) and not [t for t in trained if "base" in t["dir"].name]
    summary = json.loads((out / "probe_base" / "summary.json").read_text())
    assert s["estimates"]["base"]["overall"]["raw"] == repro.rate_only(summary["overall"]["raw"])
    assert "n_seeds" not in s["estimates"]["base"]["overall"]["raw"] and s["seeds"]["base"].startswith("one model")
    # IFBench: one probe per model and seed, outside the judge's fit, at the held-out probe's settings
    runs = ["base", *(part.run_name(k, seed) for k in (*part.ARMS, "rl") for seed in part.seeds())]
    ifb = [c for c in calls if c["out"].name.startswith("ifbench_")]
    assert sorted(c["out"].name for c in ifb) == sorted(f"ifbench_{r}" for r in runs)
    for c in ifb:
        args = c["args"]
        assert c["datasets"] == [part.ifbench_spec()] and "--outside-judge-fit" in args
        assert args[args.index("--limit") + 1] == str(part.SETTINGS["ifbench"]["limit"])
        assert args[args.index("--samples") + 1] == str(part.SETTINGS["probe"]["samples"])
    n = s["heldout"]["ifbench_items"]
    assert n and all(len(_verdicts(out / f"ifbench_{r}")) == n for r in runs)
    # its own rows and column; never pooled into "overall" (the held-out contexts)
    held = s["heldout"]["healthbench_contexts"] + s["heldout"]["mt_bench_contexts"]
    for k in part.ARMS:
        assert s["arms"][k]["overall"]["vs_base"]["n_items"] == held
        assert s["arms"][k]["by_dataset"]["ifbench"]["vs_base"]["n_items"] == n
        assert s["arms"][k]["by_dataset"]["ifbench"]["raw"]["n"] == 3 * 4 * n
    assert all("ifbench" in s[key][k] for key in ("estimates", "generic_floor", "turn_stats") for k in runs[:1])
    assert set(s["floor_rise"]["rl"]) == {"healthbench", "mt_bench", "overall", "ifbench"}
    assert s["sft"]["ifbench"]["after"]["n_items"] == n and s["rl"]["ifbench"]["before"]["n_items"] == n
    tables = {t.caption.split(" (")[0].split(":")[0]: t for t in section.tables}
    assert section.tables[0].columns[-1] == f"IFBench ({n} items)"
    for caption in ("SFT data arms of the same budget", "Each trained model against the base model on the same "
                    "held-out contexts", "Raw rate, judge-corrected rate", "Judge labels of the held-out turns",
                    "Signs of judge gaming in the held-out turns", "Trained models at each training seed"):  # fmt: skip
        table = next(t for t in section.tables if t.caption.startswith(caption))
        assert any(row[1] == "ifbench" for row in table.rows), caption
    assert tables  # every caption is distinct enough to find
    # the labelled tables stay on the held-out contexts of seed 0
    cal = next(t for t in section.tables if t.caption.startswith("Each trained model against the base model, read"))
    assert not any(row[1] == "ifbench" for row in cal.rows) and "training seed 0" in cal.caption


def test_a_one_seed_run_resumes_as_seed_0_and_its_labelled_figures_stay(tmp_path, monkeypatch):
    """A part folder run with one seed (the figures it has always reported: the probes' summaries and `compare`) is
    extended to 3 seeds in place: only seeds 1 and 2 are trained, seed 0 keeps its folders, and everything read off
    the blind labels (calibrated rates and differences, their table, the targets) is seed 0's, unchanged; the pooled
    figures move to the seed-and-context bootstrap."""
    from fic.followup_summary import compare, with_holm

    out = tmp_path / "collab"
    part, one, _, _, trained_one, _ = run_part(out, monkeypatch, "cpu", seeds=[0])
    assert sorted(t["dir"].name for t in trained_one) == sorted([*(f"sft_{a}" for a in part.ARMS), "lr6e-05"])
    assert "models" not in one.summary["seeds"] and not any(t.caption.startswith("Trained models at each")
                                                            for t in one.tables)  # fmt: skip
    assert one.about["seeds"].endswith("(one seed)")
    rows = {k: [json.loads(x) for x in (out / f"probe_{k}" / "samples.jsonl").read_text().splitlines()]
            for k in ("base", *part.ARMS, "rl")}  # fmt: skip
    direct = with_holm({k: compare(rows["base"], rows[k])["overall"] for k in (*part.ARMS, "rl")})
    for k in (*part.ARMS, "rl"):
        assert {x: one.summary["differences"][k]["overall"][x] for x in ("diff", "low", "high", "p", "reading")} == {
            x: direct[k][x] for x in ("diff", "low", "high", "p", "reading")}  # fmt: skip
        assert "n_seeds" not in one.summary["differences"][k]["overall"]
    for model in ("base", "template_filtered", "rl"):  # blind labels of seed 0's turns
        folder = out / f"probe_{model}"
        labels = [{**{x: r[x] for x in KEY}, "genuine": bool(r["genuine"]) != (i % 4 == 0),
                   "run_id": f"run-{folder.name}"} for i, r in enumerate(samples(folder)[:30])]  # fmt: skip
        write(folder / "labels.jsonl", labels)
    _, one, *_ = run_part(out, monkeypatch, "cpu", seeds=[0])
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("sft_*/config.json")}

    _, three, _, _, trained, _ = run_part(out, monkeypatch, "cpu", seeds=[0, 1, 2])
    assert sorted(t["dir"].name for t in trained) == sorted(
        [*(f"sft_{a}_seed{s}" for a in part.ARMS for s in (1, 2)), "lr6e-05_seed1", "lr6e-05_seed2"]
    )
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # seed 0's models untouched
    for key in ("calibrated", "calibrated_differences", "readers"):
        assert three.summary[key] == one.summary[key], key
    assert three.summary["seeds"]["labelled_differences"] == one.summary["differences"]
    cal = [next(t for t in sec.tables if t.caption.startswith("Each trained model against the base model, read"))
           for sec in (one, three)]  # fmt: skip
    assert cal[0].rows == cal[1].rows
    assert [t.measured for t in three.targets[:2]] == [t.measured for t in one.targets[:2]]
    assert three.summary["differences"]["real"]["overall"]["n_seeds"] == 3
    assert three.summary["differences"]["real"]["overall"] != one.summary["differences"]["real"]["overall"]


@pytest.mark.parametrize("seeds", [[1, 2], [0, 0, 1], [], [0, -1], "0,1", [0, True]])
def test_seeds_setting_is_refused_in_one_line(tmp_path, monkeypatch, seeds):
    part = import_part(monkeypatch, "cpu")
    monkeypatch.setitem(part.SETTINGS, "seeds", seeds)
    with pytest.raises(repro.StepError, match="expected distinct integers >= 0 that include 0") as err:
        part.run(tmp_path / "collab")
    assert "\n" not in str(err.value) and not (tmp_path / "collab").exists()


def test_the_rl_hacking_check_reads_every_seed():
    sys.modules.pop("collab_report", None)
    import collab_report

    from fic.trainers.reward_hacking import reward_hacking_summary

    key = "followup/genuine_rate"
    good = reward_hacking_summary([{"step": i, "reward": 0.1 * i, key: 0.1 * i} for i in range(1, 5)], 2)
    bad = reward_hacking_summary([{"step": i, "reward": 0.1 * i, key: 0.5 - 0.05 * i} for i in range(1, 5)], 2)
    assert collab_report.hacking_target(good, {0: good, 1: good, 2: good}).met
    flagged = collab_report.hacking_target(good, {0: good, 1: bad, 2: good})
    assert (
        not flagged.met and "seed 1: 2 of 2 windows" in flagged.measured and "at every training seed" in flagged.name
    )
    assert not collab_report.hacking_target(good, {0: good, 1: None}).met


def test_the_time_estimate_prices_every_seed(monkeypatch):
    """The part's minutes on 2 cores from the measured unit times: one seed without IFBench is the measured one-seed
    run (20.5 min) within 10%; each seed adds its training and probes."""
    part = import_part(monkeypatch, "cpu")
    import collab_settings

    settings = json.loads(json.dumps(part.SETTINGS))
    three = collab_settings.estimated_minutes({**settings, "seeds": [0, 1, 2]})
    one = collab_settings.estimated_minutes({**settings, "seeds": [0]})
    # without IFBench (no items, and none of its 5 probes' model loads: base and 4 trained models)
    no_ifbench = collab_settings.estimated_minutes({**settings, "seeds": [0], "ifbench": {"limit": 0}})
    no_ifbench -= 5 * collab_settings.TIMINGS["probe_load"] / 60
    assert 20.5 <= no_ifbench <= 1.1 * 20.5
    assert 18 < (three - one) / 2 < 25  # one more seed: 3 SFT arms and RL trained, 4 models probed twice
    assert 65 < three < 75


def test_cpu_trains_one_seed_and_gpu_three(monkeypatch):
    """SCALE=cpu trains each arm at seed 0 only (three seeds take the part to about 70 min, past the 90-minute run);
    SCALE=gpu and the study commands train three."""
    assert import_part(monkeypatch, "cpu").seeds() == [0]
    assert import_part(monkeypatch, "gpu").seeds() == [0, 1, 2]


def test_study_collab_runs_the_part_at_its_seeds_into_its_own_folders(tmp_path, monkeypatch, capsys):
    """`make study-collab`: the collab part at SCALE=cpu (one seed in the settings) trained and probed at seeds 0, 1
    and 2 into the study's work folder, its section alone written to the results folder; the same folder with other
    seeds is refused in one line, as are seeds without 0 (the labelled seed), and the settings' seeds stay as they
    were."""
    part = import_part(monkeypatch, "cpu")
    assert part.seeds() == [0]
    monkeypatch.setitem(part.SETTINGS, "seeds", part.SETTINGS["seeds"])  # restored after the test
    sys.modules.pop("study_collab", None)
    import run
    import study_collab

    monkeypatch.setattr(run, "judge_about", lambda: collab_fakes.JUDGE)
    work, results = tmp_path / "work", tmp_path / "results"
    calls, trained, _ = collab_fakes.fake_commands(work / "collab", monkeypatch)
    flags = ["--out", str(work), "--results", str(results)]

    assert study_collab.main(["--seeds", "1,2", *flags]) == 2
    err = capsys.readouterr().err
    assert "include 0, the seed the blind labels were made on" in err and err.count("\n") == 1
    assert not work.exists() and part.SETTINGS["seeds"] == [0]

    assert study_collab.main(flags) == 0
    assert sorted(t["dir"].name for t in trained) == sorted(
        [
            *(f"sft_{a}{s}" for a in part.ARMS for s in ("", "_seed1", "_seed2")),
            "lr6e-05",
            "lr6e-05_seed1",
            "lr6e-05_seed2",
        ]
    )
    summary = json.loads((results / "summary.json").read_text())
    assert summary["collab"]["seeds"]["trained"] == [0, 1, 2] and summary["seeds"] == [0, 1, 2]
    assert summary["collab"]["differences"]["real"]["overall"]["n_seeds"] == 3
    assert summary["parts_missing"] == [] and summary["minutes"] == summary["minutes_per_part"]["collab"]
    report = (results / "report.md").read_text()
    assert "Trained models at each training seed" in report and "Not run yet" not in report
    assert (results / "report.html").exists()
    recorded = json.loads((work / "collab" / "settings.json").read_text())
    assert recorded["seeds"] == [0, 1, 2]

    n_calls = len(calls)
    capsys.readouterr()
    assert study_collab.main(["--seeds", "0", *flags]) == 1
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("[study-collab]")]
    assert len(err) == 1 and err[0].startswith("error: study-collab:") and "seeds" in err[0]
    assert len(calls) == n_calls and json.loads((results / "summary.json").read_text()) == summary
