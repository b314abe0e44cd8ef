"""The collab part of `make reproduce` without models: its data arms (same size, the real arm free of held-out and dev
items), the learning-rate/steps choice on dev contexts only (SCALE=gpu, in the run) or read from
reproduce/dev_choices.json (SCALE=cpu: nothing probed on dev, only the chosen points trained, the same models), and
the summary keys (`collab.arms`, the generic floor of every model, `collab.calibrated`) from made-up `fic probe` /
`fic build-followups` / training outputs. The commands themselves are tested elsewhere (test_probe*.py,
test_followups*.py, the trainers' tests). Shared stand-ins: tests/collab_fakes.py; the readers' floor and the training seeds: test_reproduce_collab_readers.py and test_reproduce_collab_seeds.py."""

import json
import sys
from pathlib import Path

import pytest

from fic.eval.rates import turn_sha

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reproduce"))

import repro  # noqa: E402
from collab_fakes import ROOT, import_part, run_part  # noqa: E402


@pytest.fixture(params=["gpu", "cpu"])
def collab_part(tmp_path, monkeypatch, request):
    """The part at either scale: SCALE=gpu chooses on dev in the run, SCALE=cpu reads the recorded choice."""
    return run_part(tmp_path, monkeypatch, request.param)


@pytest.fixture
def collab_in_run(tmp_path, monkeypatch):
    """SCALE=gpu: the choices made on dev inside the run (`CHOOSE_IN_RUN`)."""
    return run_part(tmp_path, monkeypatch, "gpu")


@pytest.fixture
def collab_recorded(tmp_path, monkeypatch):
    """SCALE=cpu, the default: the choices read from reproduce/dev_choices.json."""
    return run_part(tmp_path, monkeypatch, "cpu")


def _first_users(path: Path, kind: str) -> set[str]:
    from fic.data import load_source
    from fic.data.followups import first_user

    return {first_user(r.messages) for r in load_source(f"{kind}:{path}")}


def test_arms_have_the_same_size_and_the_real_arm_no_heldout_or_dev_item(collab_part):
    from fic.data.followups import first_user

    part, section, out, _, trained, _ = collab_part
    data = out / "data"
    arms = section.summary["arms"]
    sizes = {a: len((data / "arms" / a / "train.jsonl").read_text().splitlines()) for a in (*part.ARMS, "mixed")}
    assert len(set(sizes.values())) == 1 and sizes["real"] > 20, sizes
    assert {a: arms[a]["rows"] for a in part.ARMS} == {a: sizes[a] for a in part.ARMS}
    real = [json.loads(line) for line in (data / "arms" / "real" / "train.jsonl").read_text().splitlines()]
    assert all(r["source"] == "mt_bench" and r["messages"][-1]["role"] == "user" for r in real)
    assert all(r["messages"][-2]["role"] == "assistant" for r in real)  # a real second turn after the answer
    held = _first_users(data / "mt_bench_heldout" / "test.jsonl", "mt_bench") | _first_users(
        data / "healthbench_multiturn" / "test.jsonl", "healthbench")  # fmt: skip
    dev = _first_users(data / "mt_bench_dev" / "dev.jsonl", "mt_bench") | _first_users(
        data / "healthbench_singleturn_dev" / "dev.jsonl", "healthbench")  # fmt: skip
    for arm in (*part.ARMS, "mixed"):
        rows = [json.loads(line) for line in (data / "arms" / arm / "train.jsonl").read_text().splitlines()]
        assert not {first_user(r["messages"]) for r in rows} & (held | dev), arm
    # the two template arms: the same contexts, only the follow-up differs
    unf, fil = ([json.loads(x) for x in (data / "arms" / a / "train.jsonl").read_text().splitlines()]
                for a in ("template_unfiltered", "template_filtered"))  # fmt: skip
    assert [r["messages"][:-1] for r in unf] == [r["messages"][:-1] for r in fil]
    # every arm trained with the same steps and learning rate, the chosen ones, once per training seed
    chosen = section.summary["hyperparameters"]["chosen"]
    arm_runs = [t for t in trained if t["dir"].name.startswith("sft_")]
    assert sorted(t["dir"].name for t in arm_runs) == sorted(
        f"sft_{part.run_name(a, s)}" for a in part.ARMS for s in part.seeds()
    )
    assert {(t["learning_rate"], t["max_steps"]) for t in arm_runs} == {
        (str(chosen["learning_rate"]), str(chosen["max_steps"]))}  # fmt: skip
    assert {t["dir"].name: t.get("seed") for t in arm_runs if t["dir"].name.startswith("sft_real")} == {
        "sft_real": None,
        "sft_real_seed1": "1",
        "sft_real_seed2": "2",
    }  # seed 0: the recipe's own seed


def test_the_choice_reads_dev_contexts_only(collab_in_run):
    part, section, out, calls, trained, _ = collab_in_run
    data = out / "data"
    hp = section.summary["hyperparameters"]
    # the made-up dev numbers favour lr 1e-4 at the longest step count (the grid run's own folder)
    assert (hp["chosen"]["learning_rate"], hp["chosen"]["max_steps"]) == (1e-4, 8)
    assert len(hp["points"]) == len(part.grid_points()) and hp["chosen"]["score"] == pytest.approx(
        max(p["score"] for p in hp["points"]), abs=1e-9
    )
    grid_probes = [c for c in calls if "/grid/" in c["model"]]
    assert len(grid_probes) == len(part.grid_points())
    dev_specs = [f"healthbench:{data / 'healthbench_singleturn_dev' / 'dev.jsonl'}",
                 f"mt_bench:{data / 'mt_bench_dev' / 'dev.jsonl'}"]  # fmt: skip
    assert all(c["datasets"] == dev_specs for c in grid_probes) and hp["dev"]["datasets"] == dev_specs
    assert not any("heldout" in s or "multiturn" in s for c in grid_probes for s in c["datasets"])
    # no held-out probe of a grid model, no dev probe of an arm; the grid trains on the mix only
    heldout_models = {c["model"] for c in calls if any("test.jsonl" in s for s in c["datasets"])}
    assert not any("/grid/" in m for m in heldout_models)
    grid_rates = part.SETTINGS["sft"]["grid"]["learning_rate"]
    assert {t["dir"].name for t in trained if "/grid" in str(t["dir"])} == {f"lr{lr:g}" for lr in grid_rates}
    assert all("arms/mixed" in t["train_datasets"] for t in trained if "/grid" in str(t["dir"]))
    # dev, held-out and training MT-Bench / HealthBench items are disjoint
    ids = {name: {json.loads(x).get("question_id") or json.loads(x)["prompt_id"]
                  for x in (data / name).read_text().splitlines()}
           for name in ("mt_bench_dev/dev.jsonl", "mt_bench_heldout/test.jsonl", "mt_bench_train/train.jsonl",
                        "healthbench_singleturn_dev/dev.jsonl", "healthbench_singleturn/train.jsonl",
                        "healthbench_multiturn/test.jsonl")}  # fmt: skip
    names = list(ids)
    assert all(not ids[a] & ids[b] for i, a in enumerate(names) for b in names[i + 1 :])
    assert len(ids["mt_bench_dev/dev.jsonl"]) >= 10 and len(ids["healthbench_singleturn_dev/dev.jsonl"]) == 10
    # dev MT-Bench items are outside the judge's fit
    from fic.judges.provenance import prompt_hash

    fitted = part.judge_fitted()
    dev_rows = [json.loads(x) for x in (data / "mt_bench_dev" / "dev.jsonl").read_text().splitlines()]
    assert not any(prompt_hash([{"role": "user", "content": r["turns"][0]}]) in fitted for r in dev_rows)


def test_rl_learning_rate_is_chosen_on_dev_and_only_the_chosen_run_is_held_out(collab_in_run):
    part, section, out, calls, trained, _ = collab_in_run
    rl = section.summary["rl"]["hyperparameters"]
    every = [t for t in trained if t["recipe"] == part.SETTINGS["rl_recipe"]]
    runs = [t for t in every if "seed" not in t]  # the dev choice trains seed 0 at every rate of the grid
    assert sorted(float(t["learning_rate"]) for t in runs) == part.SETTINGS["rl"]["grid"]["learning_rate"]
    # the other seeds at the chosen rate only, in folders of their own
    others = {t["dir"].name: (float(t["learning_rate"]), t["seed"]) for t in every if "seed" in t}
    lr = rl["chosen"]["learning_rate"]
    assert others == {f"lr{lr:g}_seed{s}": (lr, str(s)) for s in part.seeds()[1:]}
    assert [p["learning_rate"] for p in rl["points"]] == part.SETTINGS["rl"]["grid"]["learning_rate"]
    # every RL run trains with the part's overrides of the recipe (half its steps) and the rate as the last word
    assert all(t["max_steps"] == "4" for t in runs) and "max_steps=4" in part.SETTINGS["rl"]["overrides"]
    # scores that differ only in float order are a tie (broken toward the lower rate), so compare to 9 digits
    assert rl["chosen"]["score"] == pytest.approx(max(p["score"] for p in rl["points"]), abs=1e-9)
    rl_calls = [c for c in calls if "/rl/" in c["model"]]
    dev = [c for c in rl_calls if all("dev.jsonl" in s for s in c["datasets"])]
    held = [c for c in rl_calls if c["out"].parent == out and c["out"].name.startswith("probe_rl")]
    assert len(dev) == 2 and [c["model"] for c in held] == [
        rl["chosen"]["model"],
        *(str(out / "rl" / f"lr{lr:g}_seed{s}") for s in part.seeds()[1:]),
    ]
    assert any(t.caption.startswith("Follow-up RL learning rate chosen") for t in section.tables)
    assert "recorded" not in rl and "recorded" not in section.summary["hyperparameters"]
    # GSM8K accuracy of the base model at SCALE=gpu, in the summary and the main table
    assert [c["model"] for c in calls if "gsm8k" in c["out"].name] == [repro.MODEL]
    assert section.summary["sft"]["gsm8k_accuracy"]["before"]["accuracy"] == 0.1
    assert section.tables[0].columns[-2].startswith("GSM8K test accuracy")
    assert section.tables[0].columns[-1].startswith("IFBench")


def test_choose_breaks_ties_toward_fewer_steps_and_the_lower_rate():
    sys.modules.pop("collab", None)
    import collab as part

    points = [{"learning_rate": lr, "max_steps": s, "score": sc}
              for lr, s, sc in [(3e-4, 8, 0.2), (1e-4, 8, 0.2), (3e-4, 4, 0.2), (1e-4, 4, 0.1)]]  # fmt: skip
    assert (part.choose(points)["learning_rate"], part.choose(points)["max_steps"]) == (3e-4, 4)
    points[3]["score"] = 0.2
    assert (part.choose(points)["learning_rate"], part.choose(points)["max_steps"]) == (1e-4, 4)


def test_summary_keys_floors_and_calibrated(collab_part):
    from collab_labels import calibrated_rates

    part, section, out, _, _, _ = collab_part
    s = section.summary
    models = ["base", *part.ARMS, "rl"]
    for arm in part.ARMS:
        entry = s["arms"][arm]
        for group in (*entry["by_dataset"].values(), entry["overall"]):
            assert set(group) == {"raw", "corrected", "generic_floor", "vs_base"}
            assert {"diff", "low", "high", "p"} <= set(group["vs_base"])
            # a trained arm gets no judge-corrected rate: the judge's errors were measured on SmolLM2's turns only
            assert group["raw"]["rate"] is not None and group["corrected"] is None
            assert group["generic_floor"]["rate"] is not None
        assert entry["train"]["max_steps"] == s["hyperparameters"]["chosen"]["max_steps"]
    assert s["estimates"]["base"]["overall"]["corrected"]["rate"] is not None
    assert "do not transfer" in s["estimates"]["rl"]["overall"]["corrected_note"]
    assert set(s["generic_floor"]) == set(models)
    assert all(s["generic_floor"][m][d]["rate"] is not None for m in models for d in ("healthbench", "mt_bench"))
    assert set(s["calibrated"]) == set(models)
    for m in models:
        c = s["calibrated"][m]
        assert c["status"] == "no labels yet"
        assert c["command"] == f"fic review {out / f'probe_{m}'} --sample 30 --seed 0"
    assert {"sft", "rl", "differences", "estimates", "heldout", "turn_stats"} <= set(s)
    assert set(s["gsm8k_accuracy"]) == set(part.SETTINGS["gsm8k"]["models"])
    captions = [t.caption for t in section.tables]
    assert any(c.startswith("Held-out genuine follow-up rate") for c in captions)
    assert any(c.startswith("SFT learning rate and steps chosen on dev") for c in captions)
    assert "no labels yet for" in " ".join(section.text)

    # labels of 30 turns of one model's probe folder: its calibrated rate appears; the others still say no labels
    folder = out / "probe_template_filtered"
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: (r["sample"], r["dataset"], str(r["item_id"])))  # one turn of every item first
    labels = [{k: r[k] for k in ("dataset", "item_id", "temperature", "perturbation", "sample")}
              | {"genuine": bool(r["genuine"]) and i % 3 > 0, "run_id": "run-probe_template_filtered"}
              for i, r in enumerate(rows[:30])]  # fmt: skip
    assert len({(x["dataset"], x["item_id"]) for x in labels}) >= 10  # a calibrated rate needs 10 labelled items
    (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = calibrated_rates(out, models)
    assert cal["template_filtered"]["n_labels"] == 30 and cal["template_filtered"]["overall"]["rate"] is not None
    assert cal["base"]["status"] == "no labels yet"
    (out / "probe_rl" / "labels.jsonl").write_text(json.dumps({**labels[0], "run_id": "another"}) + "\n")
    assert calibrated_rates(out, models)["rl"]["status"].startswith("labels not usable")  # another run's labels

    # committed labels (no run id; the turn's hash) attach to a run whose turns are the same text, and only then
    committed = out / "committed"
    committed.mkdir()
    folder = out / "probe_base"
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    keep = ("dataset", "item_id", "temperature", "perturbation", "sample")
    labels = [{k: r[k] for k in keep} | {"genuine": i % 2 == 0, "turn_sha": turn_sha(r["user_turn"])}
              for i, r in enumerate(rows[:30])]  # fmt: skip
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = calibrated_rates(out, models, committed)
    assert cal["base"]["n_labels"] == 30 and cal["base"]["committed"] == str(committed / "base.jsonl")
    # a turn whose text changed in this run (a sampled token) loses its label; the rest attach
    labels[0]["turn_sha"] = turn_sha("another text")
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = calibrated_rates(out, models, committed)["base"]
    assert cal["n_labels"] == 29 and cal["left_out"] == 1 and "1 labelled turn(s) differ" in cal["status"]
    named = "|".join(str(labels[0][k]) for k in ("dataset", "item_id", "temperature", "perturbation", "sample"))
    assert (
        cal["left_out_keys"] == [named]
        and cal["status"].startswith("29 of 30 labels attach")
        and named in cal["status"]
    )
    # most turns changed: labels of another run, refused
    for x in labels[:16]:
        x["turn_sha"] = turn_sha("another text")
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    assert calibrated_rates(out, models, committed)["base"]["status"].startswith("labels not usable")
    (committed / "base.jsonl").write_text("not json\n")
    assert "not a label row" in calibrated_rates(out, models, committed)["base"]["status"]


def test_calibrated_differences_and_targets_read_off_the_lower_end_minus_the_floor_rise(collab_part):
    from collab_labels import calibrated_differences, calibrated_target

    part, section, out, _, _, _ = collab_part
    rows = {m: [json.loads(x) for x in (out / f"probe_{m}" / "samples.jsonl").read_text().splitlines()]
            for m in ("base", "template_filtered")}  # fmt: skip
    keys = {m: {part_key(r): bool(r["genuine"]) for r in rows[m]} for m in rows}  # every turn labelled as judged
    diffs = calibrated_differences(rows, keys)
    overall = diffs["template_filtered"]["overall"]
    # the labelled seed's judged difference (the pooled one, over the seeds, when there are several)
    judged = (section.summary["seeds"].get("labelled_differences") or section.summary["differences"])[
        "template_filtered"]["overall"]  # fmt: skip
    assert overall["diff"] == pytest.approx(judged["diff"])  # labels equal to the verdicts: the judge's difference
    assert calibrated_differences(rows, {"template_filtered": keys["template_filtered"]}) == {}  # base unlabelled
    cal = {"template_filtered": {"overall": {**overall, "low": 0.20}}}
    assert calibrated_target("template_filtered", "gain", cal, 0.04, 0.15).met  # 0.20 - 0.04 >= 0.15
    missed = calibrated_target("template_filtered", "gain", cal, 0.06, 0.15)
    assert not missed.met and missed.measured.endswith("+14.0")  # 0.20 - 0.06 < 0.15
    assert not calibrated_target("rl", "gain", cal, 0.0, 0.0).met  # no labels: never met


def test_a_readers_target_is_met_only_where_holm_agrees():
    from collab_labels import floor_subtracted_target

    def readers(holm: bool) -> dict:
        cell = {"diff": 0.23, "low": 0.045, "high": 0.43, "p": 0.02, "detectable": True, "detectable_holm": holm,
                "reading": "+23.3 points"}  # fmt: skip
        both = {"floor_subtracted_gain": cell}
        return {"differences": {"rl": {"counted": both, "not_counted": both}}}

    assert floor_subtracted_target("rl", "gain", readers(True), 0.0).met
    # the interval alone clears 0, but not after Holm's adjustment over the trained models: not met
    assert not floor_subtracted_target("rl", "gain", readers(False), 0.0).met


def part_key(row: dict) -> tuple:
    from fic.followup_summary import row_key

    return row_key(row)


def _recorded_file() -> dict:
    return json.loads((ROOT / "reproduce" / "dev_choices.json").read_text())


def test_recorded_choice_probes_nothing_on_dev_and_trains_no_grid(collab_recorded):
    part, section, out, calls, trained, plans = collab_recorded
    rec = _recorded_file()
    # no dev probe at all (base, grid or RL), no grid model trained or planned
    assert not [c for c in calls if any("dev.jsonl" in s for s in c["datasets"])]
    assert not (out / "dev").exists()
    assert not [t for t in trained if "grid" in t["dir"].parts] and not (out / "grid").exists()
    assert not [p for p in plans if any("arms/mixed" in o for o in p)]
    # only the held-out and IFBench probes: base once, the 3 arms and RL at every seed (no GSM8K at SCALE=cpu)
    runs = ["base", *(part.run_name(k, s) for k in (*part.ARMS, "rl") for s in part.seeds())]
    assert sorted(c["out"].name for c in calls) == sorted(f"{kind}_{r}" for kind in ("probe", "ifbench") for r in runs)
    # the returned choice is the recorded one, named with its commit and file; the old clone's paths moved aside
    hp = section.summary["hyperparameters"]
    assert hp["recorded"]["commit"] == rec["commit"] == "7eebd76"
    assert hp["recorded"]["file"] == "reproduce/dev_choices.json"
    assert hp["chosen"] == rec["collab_sft"]["chosen"] and hp["points"] == rec["collab_sft"]["points"]
    assert "datasets" not in hp["dev"] and hp["recorded"]["dev_datasets"] == rec["collab_sft"]["dev"]["datasets"]
    assert hp["dev"]["base"] == rec["collab_sft"]["dev"]["base"]


def test_recorded_choice_trains_the_arms_and_one_rl_run_at_the_recorded_points(collab_recorded):
    part, section, out, calls, trained, plans = collab_recorded
    rec = _recorded_file()
    sft, rl = rec["collab_sft"]["chosen"], rec["collab_rl"]["chosen"]
    arm_runs = [t for t in trained if t["dir"].name.startswith("sft_")]
    assert sorted(t["dir"].name for t in arm_runs) == sorted(
        f"sft_{part.run_name(a, s)}" for a in part.ARMS for s in part.seeds()
    )
    assert {(t["learning_rate"], t["max_steps"]) for t in arm_runs} == {
        (str(sft["learning_rate"]), str(sft["max_steps"]))
    }
    assert (sft["learning_rate"], sft["max_steps"]) == (1e-4, 8)
    assert all(section.summary["arms"][a]["train"]["learning_rate"] == 1e-4 for a in part.ARMS)
    # exactly one RL run per seed: the recorded rate, seed 0 in the folder and with the overrides the in-run choice
    # uses, the other seeds beside it
    every = [t for t in trained if t["recipe"] == part.SETTINGS["rl_recipe"]]
    runs = [t for t in every if "seed" not in t]
    assert len(runs) == 1 and runs[0]["dir"] == out / "rl" / f"lr{rl['learning_rate']:g}"
    assert sorted(t["dir"].name for t in every) == sorted(
        f"lr{rl['learning_rate']:g}" + (f"_seed{s}" if s else "") for s in part.seeds()
    )
    assert all(float(t["learning_rate"]) == rl["learning_rate"] for t in every)
    assert float(runs[0]["learning_rate"]) == rl["learning_rate"] == 6e-5 and runs[0]["max_steps"] == "4"
    paths = {k: out / "data" / v for k, v in (("hb_test", "healthbench_multiturn/test.jsonl"),
             ("mtb_test", "mt_bench_heldout/test.jsonl"), ("gsm8k_train", "gsm8k_short/train.jsonl"))}  # fmt: skip
    assert part.rl_overrides(paths, rl["learning_rate"]) in plans
    # the held-out RL probe is that run, and the summary names it
    hp = section.summary["rl"]["hyperparameters"]
    assert hp["chosen"]["model"] == str(runs[0]["dir"]) and hp["recorded"]["commit"] == "7eebd76"
    assert [c["model"] for c in calls if "/rl/lr6e-05" == c["model"][-len("/rl/lr6e-05") :]] == [
        hp["chosen"]["model"]] * 2  # its held-out and its IFBench probe  # fmt: skip
    assert {k: v for k, v in hp["chosen"].items() if k != "model"} == rl
    assert hp["grid"] == rec["collab_rl"]["grid"] and hp["points"] == rec["collab_rl"]["points"]


def test_recorded_mode_trains_the_same_models_as_the_in_run_choice(tmp_path, monkeypatch):
    """At the same points, SCALE=cpu trains with the same recipe, folder and overrides as SCALE=gpu: the same models."""

    def runs(scale):
        out = tmp_path / scale / "collab"
        _, _, _, _, trained, _ = run_part(out, monkeypatch, scale)
        return {t["dir"].relative_to(out): {k: str(v).replace(str(out), "OUT") for k, v in t.items() if k != "dir"}
                for t in trained}  # fmt: skip

    gpu, cpu = runs("gpu"), runs("cpu")
    seeds = ("", "_seed1", "_seed2")
    assert set(cpu) == {Path(f"sft_{a}{s}") for a in ("real", "template_unfiltered", "template_filtered")
                        for s in seeds} | {Path(f"rl/lr6e-05{s}") for s in seeds}  # fmt: skip
    assert set(cpu) < set(gpu) and all(cpu[k] == gpu[k] for k in cpu)


def test_recorded_choice_in_the_report(collab_recorded):
    part, section, out, calls, trained, _ = collab_recorded
    s = section.summary
    assert s["hyperparameters"]["chosen"]["learning_rate"] == 1e-4 and s["rl"]["hyperparameters"]["chosen"]
    text = " ".join(section.text)
    para = next(t for t in section.text if t.startswith("Learning rate and steps were chosen on dev contexts"))
    assert "in the run at commit 7eebd76 (recorded in reproduce/dev_choices.json" in para
    assert "this run trains only the chosen point" in para and "SCALE=gpu reruns the choice" in para
    assert "RL's learning rate was chosen the same way (in that run; this run trains only that rate)" in para
    grid = next(t for t in section.tables if t.caption.startswith("SFT learning rate and steps chosen on dev"))
    rl_grid = next(t for t in section.tables if t.caption.startswith("Follow-up RL learning rate chosen"))
    assert all("commit 7eebd76" in t.caption and "trains only the chosen point" in t.caption for t in (grid, rl_grid))
    # the chosen rows are marked by learning rate and steps (the RL choice carries a model path, its points do not)
    assert [(r[0], r[1]) for r in grid.rows if r[-1] == "yes"] == [("0.0001", 8)]
    assert [r[0] for r in rl_grid.rows if r[-1] == "yes"] == ["6e-05"]
    # no GSM8K step: no probe, an empty accuracy, None in the summary, and the text says where it is measured
    assert not [c for c in calls if "gsm8k" in c["out"].name] and part.SETTINGS["gsm8k"]["models"] == []
    assert s["gsm8k_accuracy"] == {} and s["sft"]["gsm8k_accuracy"] == {"before": None, "after": None}
    assert s["rl"]["gsm8k_accuracy"] == {"before": None, "after": None}
    assert "GSM8K accuracy is not measured in this part at SCALE=cpu" in text and "probe part" in text
    assert not any("GSM8K" in c for c in section.tables[0].columns)
    assert "chosen in the run at commit 7eebd76" in section.about["data"]
    assert str(out) not in json.dumps(s["hyperparameters"]["recorded"]["dev_datasets"])


def _write_choices(path: Path, edit) -> Path:
    data = _recorded_file()
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("collab_rl"), "'collab_rl': cannot read it"),
        (lambda d: d["collab_rl"].pop("overrides"), "lacks overrides"),
        (lambda d: d["collab_rl"]["chosen"].pop("learning_rate"), "chosen.learning_rate"),
        (lambda d: d.pop("commit"), "cannot read it"),
        (lambda d: d["collab_rl"]["chosen"].update(learning_rate=1e-5), "outside its grid"),
        (lambda d: d["collab_rl"].update(overrides=["max_steps=8"]), "overrides ['max_steps=8']"),
        (lambda d: d["collab_rl"]["grid"].update(learning_rate=[1e-5, 6e-5]), "this run's: {'learning_rate'"),
    ],
)
def test_recorded_choice_refuses_a_missing_key_or_another_grid(tmp_path, monkeypatch, edit, message):
    part = import_part(monkeypatch, "cpu")
    assert part.recorded_choice("collab_rl")["chosen"]["learning_rate"] == 6e-5  # the committed file is usable
    monkeypatch.setattr(repro, "DEV_CHOICES", _write_choices(tmp_path / "dev_choices.json", edit))
    with pytest.raises(repro.StepError, match="SCALE=gpu") as err:
        part.recorded_choice("collab_rl")
    assert message in str(err.value)


def test_recorded_sft_choice_refuses_another_grid(tmp_path, monkeypatch):
    part = import_part(monkeypatch, "cpu")
    monkeypatch.setattr(repro, "DEV_CHOICES", _write_choices(
        tmp_path / "dev_choices.json", lambda d: d["collab_sft"]["chosen"].update(max_steps=6)))  # fmt: skip
    with pytest.raises(repro.StepError, match="outside its grid"):
        part.recorded_choice("collab_sft")
    monkeypatch.setattr(repro, "DEV_CHOICES", ROOT / "reproduce" / "dev_choices.json")
    monkeypatch.setitem(part.SETTINGS["sft"], "grid", {"learning_rate": [1e-4, 3e-4], "max_steps": [4, 8]})
    with pytest.raises(repro.StepError, match=r"this run's: \{'learning_rate': \[0.0001, 0.0003\]"):
        part.recorded_choice("collab_sft")


def test_the_rl_reward_is_checked_against_the_genuine_share_per_window():
    sys.modules.pop("collab_report", None)
    import collab_report

    from fic.trainers.reward_hacking import reward_hacking_summary

    key = "followup/genuine_rate"
    rising_reward_falling_genuine = [{"step": i, "reward": 0.1 * i, key: 0.5 - 0.05 * i} for i in range(1, 5)]
    flagged = collab_report.hacking_target(reward_hacking_summary(rising_reward_falling_genuine, 2))
    assert not flagged.met and "2 of 2 windows of 2 logged steps flagged" in flagged.measured
    together = [{"step": i, "reward": 0.1 * i, key: 0.1 * i} for i in range(1, 5)]
    assert collab_report.hacking_target(reward_hacking_summary(together, 2)).met
    assert not collab_report.hacking_target(None).met


def test_labelled_base_and_arm_give_holm_adjusted_calibrated_differences(tmp_path, monkeypatch):
    """Labels of the base model's and a trained model's turns: the section's calibrated differences from base are one
    family with Holm-adjusted p (each keeps `detectable`, which the adjustment reads)."""
    out = tmp_path / "collab"
    run_part(out, monkeypatch, "cpu")
    for model in ("base", "template_filtered"):
        folder = out / f"probe_{model}"
        rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
        rows.sort(key=lambda r: (r["sample"], r["dataset"], str(r["item_id"])))
        labels = [{k: r[k] for k in ("dataset", "item_id", "temperature", "perturbation", "sample")}
                  | {"genuine": bool(r["genuine"]) and i % 3 > 0, "run_id": f"run-{folder.name}"}
                  for i, r in enumerate(rows[:30])]  # fmt: skip
        (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    _, section, *_ = run_part(out, monkeypatch, "cpu")
    cal = section.summary["calibrated_differences"]
    assert set(cal) == {"template_filtered"}
    overall = cal["template_filtered"]["overall"]
    assert overall["holm_family"] == 1 and "Holm-adjusted p=" in overall["reading"] and "detectable" in overall


def _reproduce_imports() -> dict[str, set[str]]:
    """Which reproduce/ modules each reproduce/ module imports (at the top or inside a function), read from its
    source."""
    import ast

    names = {p.stem for p in (ROOT / "reproduce").glob("*.py")}
    graph = {}
    for name in names:
        tree = ast.parse((ROOT / "reproduce" / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
        graph[name] = found & names
    return graph


def test_the_collab_modules_import_one_way_and_share_no_private_name():
    import ast

    graph = _reproduce_imports()
    reached, todo = set(), ["collab"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += sorted(graph[name])
    assert {
        "collab_report",
        "collab_figures",
        "collab_tables",
        "collab_labels",
        "collab_settings",
        "heldout",
    } <= reached

    def leads_back(start: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == start:
                return True
            if name not in seen:
                seen.add(name)
                todo += graph[name]
        return False

    assert not [name for name in sorted(reached) if leads_back(name)]
    for name in sorted(n for n in reached if n.startswith("collab") or n == "heldout"):
        tree = ast.parse((ROOT / "reproduce" / f"{name}.py").read_text(encoding="utf-8"))
        private = [f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and node.module in graph for a in node.names if a.name.startswith("_")]  # fmt: skip
        assert not private, (name, private)
