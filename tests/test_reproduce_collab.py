"""The collab part of `make reproduce` without models: its data arms (same size, the real arm free of held-out and dev
items), the learning-rate/steps choice on dev contexts only, and the summary keys (`collab.arms`, the generic floor of
every model, `collab.calibrated`) from made-up `fic probe` / `fic build-followups` / training outputs. The commands
themselves are tested elsewhere (test_probe*.py, test_followups*.py, the trainers' tests)."""

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
    h = int(hashlib.sha256(repr(key).encode()).hexdigest()[:8], 16) / 16**8
    return h < p


def _rate(model: str) -> float:
    """Made-up genuine rates: on dev, the grid point lr 1e-4 at 8 steps (the run's own folder) is best; every model
    has the same generic floor (10%)."""
    if "/grid/" in model:
        return 0.9 if model.endswith("lr0.0001") else 0.3
    return {"smollm2": 0.2}.get(model, 0.5)


def _fake_probe(args: list[str], calls: list) -> None:
    from fic.data import load_source
    from fic.followup_summary import summarize

    get = lambda flag: args[args.index(flag) + 1]  # noqa: E731
    out, model, samples = Path(get("--out")), get("--model"), int(get("--samples"))
    out.mkdir(parents=True, exist_ok=True)
    specs = get("--datasets").split(",")
    limit = int(get("--limit"))
    calls.append({"model": model, "datasets": specs, "out": out})
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
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
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


@pytest.fixture
def collab_part(tmp_path, monkeypatch):
    sys.modules.pop("collab", None)
    import collab as part

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
    monkeypatch.setattr(part, "COMMITTED_LABELS", tmp_path / "no_committed_labels")  # the repo's own labels stay out
    section = part.run(tmp_path)
    return part, section, tmp_path, calls, trained


def _first_users(path: Path, kind: str) -> set[str]:
    from fic.data import load_source
    from fic.data.followups import first_user

    return {first_user(r.messages) for r in load_source(f"{kind}:{path}")}


def test_arms_have_the_same_size_and_the_real_arm_no_heldout_or_dev_item(collab_part):
    from fic.data.followups import first_user

    part, section, out, _, trained = collab_part
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
    # every arm trained with the same steps and learning rate, the chosen ones
    chosen = section.summary["hyperparameters"]["chosen"]
    arm_runs = [t for t in trained if t["dir"].name.startswith("sft_")]
    assert len(arm_runs) == 3 and {(t["learning_rate"], t["max_steps"]) for t in arm_runs} == {
        (str(chosen["learning_rate"]), str(chosen["max_steps"]))}  # fmt: skip


def test_the_choice_reads_dev_contexts_only(collab_part):
    part, section, out, calls, trained = collab_part
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


def test_rl_learning_rate_is_chosen_on_dev_and_only_the_chosen_run_is_held_out(collab_part):
    part, section, out, calls, trained = collab_part
    rl = section.summary["rl"]["hyperparameters"]
    runs = [t for t in trained if t["recipe"] == part.SETTINGS["rl_recipe"]]
    assert sorted(float(t["learning_rate"]) for t in runs) == part.SETTINGS["rl"]["grid"]["learning_rate"]
    assert [p["learning_rate"] for p in rl["points"]] == part.SETTINGS["rl"]["grid"]["learning_rate"]
    # every RL run trains with the part's overrides of the recipe (half its steps) and the rate as the last word
    assert all(t["max_steps"] == "4" for t in runs) and "max_steps=4" in part.SETTINGS["rl"]["overrides"]
    # scores that differ only in float order are a tie (broken toward the lower rate), so compare to 9 digits
    assert rl["chosen"]["score"] == pytest.approx(max(p["score"] for p in rl["points"]), abs=1e-9)
    rl_calls = [c for c in calls if "/rl/" in c["model"]]
    dev = [c for c in rl_calls if all("dev.jsonl" in s for s in c["datasets"])]
    held = [c for c in rl_calls if any("test.jsonl" in s and "gsm8k" not in s for s in c["datasets"])]
    assert len(dev) == 2 and [c["model"] for c in held] == [rl["chosen"]["model"]]
    assert any(t.caption.startswith("Follow-up RL learning rate chosen") for t in section.tables)


def test_choose_breaks_ties_toward_fewer_steps_and_the_lower_rate():
    sys.modules.pop("collab", None)
    import collab as part

    points = [{"learning_rate": lr, "max_steps": s, "score": sc}
              for lr, s, sc in [(3e-4, 8, 0.2), (1e-4, 8, 0.2), (3e-4, 4, 0.2), (1e-4, 4, 0.1)]]  # fmt: skip
    assert (part.choose(points)["learning_rate"], part.choose(points)["max_steps"]) == (3e-4, 4)
    points[3]["score"] = 0.2
    assert (part.choose(points)["learning_rate"], part.choose(points)["max_steps"]) == (1e-4, 4)


def test_summary_keys_floors_and_calibrated(collab_part):
    part, section, out, _, _ = collab_part
    s = section.summary
    models = ["base", *part.ARMS, "rl"]
    for arm in part.ARMS:
        entry = s["arms"][arm]
        for group in (*entry["by_dataset"].values(), entry["overall"]):
            assert set(group) == {"raw", "corrected", "generic_floor", "vs_base"}
            assert {"diff", "low", "high", "p"} <= set(group["vs_base"])
            assert group["raw"]["rate"] is not None and group["corrected"]["rate"] is not None
            assert group["generic_floor"]["rate"] is not None
        assert entry["train"]["max_steps"] == s["hyperparameters"]["chosen"]["max_steps"]
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
    labels = [{k: r[k] for k in ("dataset", "item_id", "temperature", "perturbation", "sample")}
              | {"genuine": bool(r["genuine"]) and i % 3 > 0, "run_id": "run-probe_template_filtered"}
              for i, r in enumerate(rows[:30])]  # fmt: skip
    (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = part.calibrated_rates(out, models)
    assert cal["template_filtered"]["n_labels"] == 30 and cal["template_filtered"]["overall"]["rate"] is not None
    assert cal["base"]["status"] == "no labels yet"
    (out / "probe_rl" / "labels.jsonl").write_text(json.dumps({**labels[0], "run_id": "another"}) + "\n")
    assert part.calibrated_rates(out, models)["rl"]["status"].startswith("labels not usable")  # another run's labels

    # committed labels (no run id; the turn's hash) attach to a run whose turns are the same text, and only then
    committed = out / "committed"
    committed.mkdir()
    folder = out / "probe_base"
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    keep = ("dataset", "item_id", "temperature", "perturbation", "sample")
    labels = [{k: r[k] for k in keep} | {"genuine": i % 2 == 0, "turn_sha": turn_sha(r["user_turn"])}
              for i, r in enumerate(rows[:30])]  # fmt: skip
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = part.calibrated_rates(out, models, committed)
    assert cal["base"]["n_labels"] == 30 and cal["base"]["committed"] == str(committed / "base.jsonl")
    # a turn whose text changed in this run (a sampled token) loses its label; the rest attach
    labels[0]["turn_sha"] = turn_sha("another text")
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    cal = part.calibrated_rates(out, models, committed)["base"]
    assert cal["n_labels"] == 29 and cal["left_out"] == 1 and "1 labelled turn(s) differ" in cal["status"]
    # most turns changed: labels of another run, refused
    for x in labels[:16]:
        x["turn_sha"] = turn_sha("another text")
    (committed / "base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    assert part.calibrated_rates(out, models, committed)["base"]["status"].startswith("labels not usable")
    (committed / "base.jsonl").write_text("not json\n")
    assert "not a label row" in part.calibrated_rates(out, models, committed)["base"]["status"]
