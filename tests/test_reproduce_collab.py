"""The collab part of `make reproduce` without models: its data arms (same size, the real arm free of held-out and dev
items), the learning-rate/steps choice on dev contexts only (SCALE=gpu, in the run) or read from
reproduce/dev_choices.json (SCALE=cpu: nothing probed on dev, only the chosen points trained, the same models), and
the summary keys (`collab.arms`, the generic floor of every model, `collab.calibrated`) from made-up `fic probe` /
`fic build-followups` / training outputs. The commands themselves are tested elsewhere (test_probe*.py,
test_followups*.py, the trainers' tests)."""

import hashlib
import json
import sys
from pathlib import Path

import pytest

from fic.eval.rates import turn_sha

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402

VALIDITY = {"name": "learned", "version": "v", "errors": {"per_dataset": {}, "pooled": {
    "source": "pooled", "sensitivity": 0.8, "specificity": 0.95, "var_sensitivity": 0.001, "var_specificity": 0.001,
    "n_pos": 40, "n_neg": 140}}}  # fmt: skip
JUDGE = {"kind": "learned", "name": "learned", "version": "v", "n": 180, "kappa": 0.64, "false_positive_rate": 0.03,
         "judge_genuine_rate": 0.18, "annotator_genuine_rate": 0.27, "labels_by": "agents"}  # fmt: skip


def _flip(p: float, *key) -> bool:
    """A made-up draw with chance p; a model's path is keyed by its last three parts, not the test's tmp folder, so
    every run draws the same."""
    key = tuple(Path(k).parts[-3:] if isinstance(k, str) and "/" in k else k for k in key)
    h = int(hashlib.sha256(repr(key).encode()).hexdigest()[:8], 16) / 16**8
    return h < p


def _rate(model: str) -> float:
    """Made-up genuine rates: on dev, the grid point lr 1e-4 at 8 steps (the run's own folder) is best, and RL at 6e-5
    (the recorded choice, so both scales train the other seeds at the same rate); every model has the same generic
    floor (10%)."""
    if "/grid/" in model:
        return 0.9 if model.endswith("lr0.0001") else 0.3
    if model.endswith("/rl/lr3e-05"):
        return 0.3
    return {"smollm2": 0.2}.get(model, 0.5)


def _fake_probe(args: list[str], calls: list) -> None:
    from fic.data import load_source
    from fic.followup_summary import summarize

    get = lambda flag: args[args.index(flag) + 1]  # noqa: E731
    out, model, samples = Path(get("--out")), get("--model"), int(get("--samples"))
    out.mkdir(parents=True, exist_ok=True)
    specs = get("--datasets").split(",")
    limit = int(get("--limit"))
    calls.append({"model": model, "datasets": specs, "out": out, "args": args})
    rows = []
    for spec in specs:
        dataset = spec.split(":", 1)[0]
        for record in load_source(spec, limit=limit):
            messages = [*record.messages, {"role": "assistant", "content": "Paris has 2 million people."}]
            for s in range(samples):
                genuine = _flip(_rate(model), model, record.id, s)
                rows.append({"dataset": dataset, "item_id": record.id, "temperature": 0.7, "perturbation": "none",
                             "sample": s, "messages": messages, "user_turn": f"Why {s}?" if genuine else "Hi.",
                             "label": "genuine_followup" if genuine else "new_task_prompt", "genuine": genuine,
                             "generic_genuine": _flip(0.1, "floor", model, record.id, s)})  # fmt: skip
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not (out / "responses.jsonl").exists():
        (out / "responses.jsonl").write_text("{}\n")
    (out / "probe_meta.json").write_text(json.dumps({"run_id": f"run-{out.name}", "accuracy": {}}))
    accuracy = {"gsm8k": {"accuracy": 0.1, "n": 20}} if "gsm8k" in get("--datasets") else {}
    (out / "summary.json").write_text(json.dumps(summarize(rows, accuracy, validity=VALIDITY)))


def _fake_build(args: list[str]) -> None:
    """`fic build-followups --candidates templates`: the judge keeps a follow-up on all but every 7th context."""
    from fic.data.followups import contexts_from_records, load_records, template_followups

    specs = [args[i + 1] for i, a in enumerate(args) if a == "--contexts"]
    out = Path(args[args.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, c in enumerate(contexts_from_records(load_records(specs), "data")):
        if i % 7:
            turn = template_followups(c["messages"], 6, 0)[-1]
            rows.append({"id": f"{c['id']}#0", "source": c["source"], "origin": "template", "label": "genuine_followup",
                         "messages": [*c["messages"], {"role": "user", "content": turn}]})  # fmt: skip
    (out / "followups.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _fake_train(recipe: str, overrides: list[str], output_dir: Path, log: Path, trained: list) -> Path:
    """A stand-in for `repro.train`: skips a saved model (config.json) as it does, else records the run."""
    output_dir = Path(output_dir)
    if (output_dir / "config.json").exists():
        return output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.json").write_text("{}")
    values = dict(o.split("=", 1) for o in overrides)
    trained.append({"recipe": recipe, "dir": output_dir, **values})
    if values.get("save_steps"):
        (output_dir / f"checkpoint-{values['save_steps']}").mkdir(exist_ok=True)
    summary = {"train_loss": 1.0, "wall_s": 60.0, "data": {"conversations": 0}}
    if recipe.endswith("rl"):
        summary = {"before": {"mean_reward": -0.4}, "after": {"mean_reward": 0.1}, "wall_s": 190.0,
                   "train_contexts": 64, "reward_curve": [{"step": 1, "reward": -0.4}, {"step": 8, "reward": 0.1}]}  # fmt: skip
    (output_dir / "eval_summary.json").write_text(json.dumps(summary))
    return output_dir


def _import_part(monkeypatch, scale: str):
    """A fresh `collab` module at `SCALE=scale` (its SETTINGS and CHOOSE_IN_RUN are read at import)."""
    monkeypatch.setenv("SCALE", scale)
    for name in ("collab", "collab_labels", "collab_report", "collab_settings", "heldout"):
        sys.modules.pop(name, None)
    import collab as part

    assert part.CHOOSE_IN_RUN == (scale == "gpu")
    return part


def _run_part(out: Path, monkeypatch, scale: str, committed_foils: Path | None = None,
              seeds: list[int] | None = (0, 1, 2)):  # fmt: skip
    """The part run at `scale` with made-up commands: (part, section, out, probe calls, training runs, plans).
    `committed_foils` stands for labels/followup/collab_foils (default: a folder that does not exist); `seeds`: the
    training seeds (default: three, as SCALE=gpu trains; SCALE=cpu trains seed 0 only, for time; None: the
    settings')."""
    part = _import_part(monkeypatch, scale)
    if seeds is not None:
        monkeypatch.setitem(part.SETTINGS, "seeds", list(seeds))
    calls, trained, plans = [], [], []

    def fake_fic(args, log):
        if args[0] == "probe":
            _fake_probe([str(a) for a in args], calls)
        elif args[0] == "build-followups":
            _fake_build([str(a) for a in args])
        else:
            raise AssertionError(args)

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "plan", lambda recipe, overrides, log: plans.append(overrides))
    monkeypatch.setattr(repro, "train", lambda *a: _fake_train(*a, trained))
    monkeypatch.setattr(repro, "judge_about", lambda: JUDGE)
    import collab_labels

    # the repo's own labels stay out
    monkeypatch.setattr(collab_labels, "COMMITTED_LABELS", out / "no_committed_labels")
    monkeypatch.setattr(collab_labels, "COMMITTED_FOILS", committed_foils or out / "no_committed_foils")
    section = part.run(out)
    return part, section, out, calls, trained, plans


@pytest.fixture(params=["gpu", "cpu"])
def collab_part(tmp_path, monkeypatch, request):
    """The part at either scale: SCALE=gpu chooses on dev in the run, SCALE=cpu reads the recorded choice."""
    return _run_part(tmp_path, monkeypatch, request.param)


@pytest.fixture
def collab_in_run(tmp_path, monkeypatch):
    """SCALE=gpu: the choices made on dev inside the run (`CHOOSE_IN_RUN`)."""
    return _run_part(tmp_path, monkeypatch, "gpu")


@pytest.fixture
def collab_recorded(tmp_path, monkeypatch):
    """SCALE=cpu, the default: the choices read from reproduce/dev_choices.json."""
    return _run_part(tmp_path, monkeypatch, "cpu")


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
        _, _, _, _, trained, _ = _run_part(out, monkeypatch, scale)
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
    part = _import_part(monkeypatch, "cpu")
    assert part.recorded_choice("collab_rl")["chosen"]["learning_rate"] == 6e-5  # the committed file is usable
    monkeypatch.setattr(repro, "DEV_CHOICES", _write_choices(tmp_path / "dev_choices.json", edit))
    with pytest.raises(repro.StepError, match="SCALE=gpu") as err:
        part.recorded_choice("collab_rl")
    assert message in str(err.value)


def test_recorded_sft_choice_refuses_another_grid(tmp_path, monkeypatch):
    part = _import_part(monkeypatch, "cpu")
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
    _run_part(out, monkeypatch, "cpu")
    for model in ("base", "template_filtered"):
        folder = out / f"probe_{model}"
        rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
        rows.sort(key=lambda r: (r["sample"], r["dataset"], str(r["item_id"])))
        labels = [{k: r[k] for k in ("dataset", "item_id", "temperature", "perturbation", "sample")}
                  | {"genuine": bool(r["genuine"]) and i % 3 > 0, "run_id": f"run-{folder.name}"}
                  for i, r in enumerate(rows[:30])]  # fmt: skip
        (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    _, section, *_ = _run_part(out, monkeypatch, "cpu")
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
    assert {"collab_report", "collab_labels", "collab_settings", "heldout"} <= reached

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


KEY = ("dataset", "item_id", "temperature", "perturbation", "sample")


def _samples(folder: Path) -> list[dict]:
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["sample"], r["dataset"], str(r["item_id"])))


def _real_labels(folder: Path, flag: bool = True) -> list[dict]:
    """30 labels of the folder's first-sample turns (every item), with the context_free flag on genuine ones unless
    `flag` is false (labels made before the flag)."""
    labels = []
    for i, r in enumerate(_samples(folder)[:30]):
        genuine = bool(r["genuine"]) or i % 5 == 0
        row = {k: r[k] for k in KEY} | {"genuine": genuine, "run_id": f"run-{folder.name}",
                                        "turn_sha": turn_sha(r["user_turn"])}  # fmt: skip
        if flag:
            row["context_free"] = genuine and i % 4 == 0
        labels.append(row)
    return labels


def _foil_labels(folder: Path, n: int, share: float, run_id: str | None = None) -> list[dict]:
    """`n` foil labels of turns outside the real sample (sample 2, one per item), `context_item_id` the next item of
    the same dataset; genuine on about `share` of them, every genuine foil a context-free request."""
    rows = [r for r in _samples(folder) if r["sample"] == 2][:n]
    items: dict[str, dict[str, None]] = {}
    for r in _samples(folder):
        items.setdefault(r["dataset"], {})[str(r["item_id"])] = None
    labels = []
    for r in rows:
        mine = list(items[r["dataset"]])
        genuine = _flip(share, folder.name, r["item_id"])
        labels.append({k: r[k] for k in KEY} | {
            "foil": True, "context_item_id": mine[(mine.index(str(r["item_id"])) + 1) % len(mine)],
            "genuine": genuine, "context_free": genuine, "label": "genuine_followup" if genuine else "new_task_prompt",
            "run_id": run_id or f"run-{folder.name}", "turn_sha": turn_sha(r["user_turn"])})  # fmt: skip
    return labels


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))


def _without_readers(section) -> dict:
    data = section.to_json()
    data["summary"] = {k: v for k, v in data["summary"].items() if k != "readers"}
    data["tables"] = [t for t in data["tables"] if not t["caption"].startswith("The readers' generic floor")]
    data["text"] = [t for t in data["text"] if "readers' floor is not measured" not in t
                    and not t.startswith("Read by blind readers with their own floor subtracted")]  # fmt: skip
    data["targets"] = [t for t in data["targets"] if "read by blind readers" not in t["name"]]
    return data


def test_the_readers_floor_from_foil_labels(tmp_path, monkeypatch):
    """Real and foil labels of the base model and trained ones (this run's files, and committed foil labels attached
    by turn hash): the readers' rate, floor and floor-subtracted reading per model and reading, and per trained model
    `reader_difference` against the base model, Holm-adjusted; the table, the text and the targets read the
    floor-subtracted gain; a foil label that does not attach is named; under 10 items, no number; without foil labels,
    one line and nothing else changes."""
    from collab_labels import NOT_MEASURED

    from fic.reader_floor import reader_difference, reader_readings

    out = tmp_path / "collab"
    committed = tmp_path / "collab_foils"
    _run_part(out, monkeypatch, "cpu", committed)
    real = {m: _real_labels(out / f"probe_{m}", flag=m != "rl") for m in ("base", "template_filtered", "rl",
                                                                          "template_unfiltered")}  # fmt: skip
    for m, labels in real.items():
        _write(out / f"probe_{m}" / "labels.jsonl", labels)
    _, before, *_ = _run_part(out, monkeypatch, "cpu", committed)
    r = before.summary["readers"]
    assert not r["measured"] and r["note"] == NOT_MEASURED and r["differences"] == {}
    assert [t for t in before.text if "readers' floor" in t] == [NOT_MEASURED]
    assert not any(t.caption.startswith("The readers' generic floor") for t in before.tables)
    assert all(t.measured.startswith("calibrated") for t in before.targets[:2])
    assert r["models"]["base"]["counted"]["floor"] is None and r["models"]["rl"]["not_counted"] == "unknown"
    assert r["models"]["real"] == {"foil_labels": r["models"]["real"]["foil_labels"], "n_real": 0, "n_foils": 0}

    foils = {"base": _foil_labels(out / "probe_base", 14, 0.3),
             "template_filtered": _foil_labels(out / "probe_template_filtered", 14, 0.5),
             "template_unfiltered": _foil_labels(out / "probe_template_unfiltered", 6, 0.5)}  # fmt: skip
    for m, labels in foils.items():
        _write(out / f"probe_{m}" / "foil_labels.jsonl", labels)
    # the RL model's foil labels are committed ones, made on another run: they attach by hash, one turn changed
    rl_foils = [{**x, "annotator": "f1"} for x in _foil_labels(out / "probe_rl", 12, 0.4, run_id="another-run")]
    rl_foils[0]["turn_sha"] = turn_sha("another text")
    _write(committed / "rl.jsonl", rl_foils)
    foils["rl"] = rl_foils[1:]
    _, section, *_ = _run_part(out, monkeypatch, "cpu", committed)
    r = section.summary["readers"]
    assert r["measured"] and r["note"] == ""
    named = "|".join(str(rl_foils[0][k]) for k in KEY)
    status = r["models"]["rl"]["foil_labels"]
    assert (
        status["status"] == f"11 of 12 foil labels attach (1 labelled turn(s) differ in this run, left out: {named})"
    )
    assert status["left_out_keys"] == [named] and status["committed"] == str(committed / "rl.jsonl")
    assert r["models"]["base"]["foil_labels"]["status"] == "14 of 14 foil labels attach"
    assert r["models"]["real"]["foil_labels"]["status"] == "no foil labels"

    rows = {m: [json.loads(x) for x in (out / f"probe_{m}" / "samples.jsonl").read_text().splitlines()] for m in foils}
    for m in foils:
        direct = reader_readings(real[m], foils[m], rows[m])
        mine = r["models"][m]
        assert mine["n_real"] == 30 and mine["n_foils"] == len(foils[m])
        assert mine["counted"]["genuine"] == direct["counted"]["real"]
        assert mine["counted"]["floor"] == direct["counted"]["floor"]
    assert r["models"]["base"]["counted"]["floor_subtracted"] == reader_readings(
        real["base"], foils["base"], rows["base"])["counted"]["floor_subtracted"]  # fmt: skip
    assert r["models"]["rl"]["not_counted"] == "unknown" and "no context_free flag" in r["models"]["rl"][
        "not_counted_note"]  # fmt: skip
    # under 10 items (6 foil contexts): no number, not even in summary.json
    unf = r["models"]["template_unfiltered"]["counted"]
    assert unf["floor"]["rate"] is None and "not estimable" in unf["floor"]["note"]
    assert unf["floor_subtracted"]["diff"] is None and unf["floor_subtracted"]["rate_foil"] is None

    diffs = r["differences"]
    assert set(diffs) == {"template_filtered", "rl", "template_unfiltered"}
    for m in ("template_filtered", "rl"):
        for reading in ("counted", "not_counted"):
            if m == "rl" and reading == "not_counted":
                assert diffs[m][reading] == "unknown"  # the RL model's real labels carry no flag
                continue
            direct = reader_difference(real["base"], foils["base"], real[m], foils[m], reading, seed=0)
            for stat in ("gain", "floor_rise", "floor_subtracted_gain"):
                got = diffs[m][reading][stat]
                assert {k: got[k] for k in ("diff", "low", "high", "p")} == direct[stat], (m, reading, stat)
                family = 2 if reading == "counted" else 1  # the RL model's reading without them is unknown
                assert "p_holm" in got and got["holm_family"] == family and "Holm-adjusted p=" in got["reading"]
    few = diffs["template_unfiltered"]["counted"]
    assert few["floor_subtracted_gain"]["diff"] is None and "not estimable" in few["note"]
    assert set(few["rates"].values()) == {None}

    table = next(t for t in section.tables if t.caption.startswith("The readers' generic floor"))
    assert len(table.rows) == 2 * 5 and "Holm-adjusted" in table.caption
    row = next(x for x in table.rows if x[0] == "SFT: template, judge-filtered" and x[1] == "counted genuine")
    assert row[-1] == diffs["template_filtered"]["counted"]["floor_subtracted_gain"]["reading"]
    few_row = next(x for x in table.rows if x[0] == "SFT: template, unfiltered" and x[1] == "counted genuine")
    assert few_row[4].startswith("not estimable") and few_row[-1].startswith("not estimable")
    assert any(x[0] == "follow-up RL" and x[1] == "not counted" and x[3].startswith("unknown") for x in table.rows)
    # the RL model's foils were labelled by another annotator than its real turns: said beside its labels
    assert r["models"]["rl"]["annotators"] == {"real": ["None"], "foils": ["f1"], "same": False}
    rl_row = next(x for x in table.rows if x[0] == "follow-up RL" and x[1] == "counted genuine")
    assert "labelled by other annotators (real: None; foils: f1)" in rl_row[2]
    assert r["models"]["base"]["annotators"]["same"]
    assert NOT_MEASURED not in section.text
    para = next(t for t in section.text if t.startswith("Read by blind readers with their own floor subtracted"))
    assert diffs["template_filtered"]["counted"]["floor_subtracted_gain"]["reading"] in para
    assert "No real and foil labels for SFT: real follow-ups" in para
    gain = section.targets[0]
    cell = diffs["template_filtered"]
    assert gain.measured.startswith("readers' gain minus floor rise, context-free counted: ")
    lows = [cell[x]["floor_subtracted_gain"]["low"] for x in ("counted", "not_counted")]
    holm = [cell[x]["floor_subtracted_gain"].get("detectable_holm", True) for x in ("counted", "not_counted")]
    assert gain.met == (all(low >= 0.15 for low in lows) and all(holm))
    assert section.targets[1].measured.endswith("not counted: unknown (no context_free flag)")
    # nothing else moves: every other table, figure and target is the section's without foil labels
    assert _without_readers(section) == _without_readers(before)

    # committed foil labels of another run (most turns changed) are refused, in one line
    for x in rl_foils[:8]:
        x["turn_sha"] = turn_sha("another text")
    _write(committed / "rl.jsonl", rl_foils)
    _, section, *_ = _run_part(out, monkeypatch, "cpu", committed)
    assert section.summary["readers"]["models"]["rl"]["foil_labels"]["status"].startswith("foil labels not usable")
    assert "rl" not in section.summary["readers"]["differences"]


def test_the_label_scripts_leave_foil_labels_out(tmp_path, monkeypatch):
    """scripts/attach_label_text.py keeps a foil label as it is (no text of its own context), judge_calibration.py and
    judge_likelihood.py read no foil label as a turn."""
    import importlib.util

    def script(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.syspath_prepend(str(ROOT / "scripts"))
        spec.loader.exec_module(module)
        return module

    key = {"dataset": "mt_bench", "item_id": "1", "temperature": 0.7, "perturbation": "none"}
    samples = [{**key, "sample": s, "messages": [{"role": "user", "content": "q"}], "user_turn": f"turn {s}"}
               for s in range(2)]  # fmt: skip
    labels = [{**key, "sample": 0, "genuine": True, "turn_sha": turn_sha("turn 0")},
              {**key, "sample": 1, "genuine": True, "foil": True, "context_item_id": "2",
               "turn_sha": turn_sha("turn 1")}]  # fmt: skip
    rows, missing = script("attach_label_text").attach(labels, samples)
    assert missing == 0 and rows[0]["user_turn"] == "turn 0" and rows[1] == labels[1]
    path = tmp_path / "labels.jsonl"
    _write(path, [{**labels[0], "messages": samples[0]["messages"]}, {**labels[1], "messages": []}])
    for name in ("judge_likelihood", "judge_calibration"):
        assert [r["sample"] for r in script(name)._jsonl(path)] == [0], name


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
        monkeypatch.setattr(sys.modules[__name__], "_rate",
                            lambda model: 0.2 if model == "smollm2" else 0.5 + shift * (_seed_of(model) - 1))  # fmt: skip
        out = tmp_path / f"shift{shift}" / "collab"
        return _run_part(out, monkeypatch, "cpu")

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
    original = _flip
    monkeypatch.setattr(sys.modules[__name__], "_flip", lambda p, *key: original(0.3, *key[1:]))
    part, section, out, *_ = _run_part(tmp_path / "collab", monkeypatch, "cpu")
    for k in ("real", "template_filtered", "rl"):
        for cell in (section.summary["differences"][k]["overall"],
                     section.summary["differences"][k]["by_dataset"]["mt_bench"],
                     section.summary["differences"][k]["by_dataset"]["ifbench"]):  # fmt: skip
            assert (cell["diff"], cell["low"], cell["high"], cell["n_seeds"]) == (0.0, 0.0, 0.0, 3), (k, cell)


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
    part, one, _, _, trained_one, _ = _run_part(out, monkeypatch, "cpu", seeds=[0])
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
                   "run_id": f"run-{folder.name}"} for i, r in enumerate(_samples(folder)[:30])]  # fmt: skip
        _write(folder / "labels.jsonl", labels)
    _, one, *_ = _run_part(out, monkeypatch, "cpu", seeds=[0])
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("sft_*/config.json")}

    _, three, _, _, trained, _ = _run_part(out, monkeypatch, "cpu", seeds=[0, 1, 2])
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
    part = _import_part(monkeypatch, "cpu")
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
    part = _import_part(monkeypatch, "cpu")
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
    assert _import_part(monkeypatch, "cpu").seeds() == [0]
    assert _import_part(monkeypatch, "gpu").seeds() == [0, 1, 2]
