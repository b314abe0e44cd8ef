"""The study commands (`make study-vasd`, `make study-rl`, reproduce/study*.py) on stand-in training runs and made-up
`fic lic` / `fic probe` / `fic eval-checkpoints` outputs: the learning curve per seed and its files, resuming (a rerun
trains and scores nothing finished; an added seed trains only that seed), one process at a time, a work folder of
other settings refused, bad flags refused in one line, the defaults' budget, and the RL study's reward vs
judge-genuine check read from trainer_state.json. One slow test runs study-vasd end to end on a tiny local model."""

import fcntl
import hashlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402


def _u(*key) -> float:
    return int(hashlib.sha256(repr(key).encode()).hexdigest()[:12], 16) / 16**12


def _get(args: list, flag: str) -> str:
    return str(args[args.index(flag) + 1])


def _override(overrides: list[str], key: str) -> str:
    return [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")][-1]


# ---------------------------------------------------------------------------------------------- study-vasd


def _vasd_p(model: str, mode: str) -> float:
    """Made-up P: the start model 0.6 / 0.6 / 0.2; SHARDED rises with the checkpoint's step, a little by seed."""
    path = Path(model)
    if not path.name.startswith("checkpoint-"):
        return {"full": 0.6, "concat": 0.6, "sharded": 0.2}[mode]
    step, seed = int(path.name.split("-")[1]), int(path.parent.name.removeprefix("seed"))
    return {"full": 0.6, "concat": 0.6, "sharded": 0.2 + 0.1 * step + 0.02 * seed}[mode]


@pytest.fixture
def vasd_env(tmp_path, monkeypatch):
    import study_vasd

    from fic.eval.lic import summarize

    calls = {"lic": [], "train": []}

    def fake_fic(args, log):
        assert args[0] == "lic"
        model, out = _get(args, "--model"), Path(_get(args, "--out"))
        data = Path(_get(args, "--data").split(":", 1)[1])
        ids = [row["task_id"] for row in json.loads(data.read_text())][: int(_get(args, "--limit"))]
        calls["lic"].append(out)
        rows = [{"task_id": t, "mode": m, "run": 0, "correct": _u(t, m) < _vasd_p(model, m)}
                for m in ("full", "concat", "sharded") for t in ids]  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (out / "summary.json").write_text(json.dumps({**summarize(rows, ["full", "concat", "sharded"]), "runs": 1}))

    def fake_train(recipe, overrides, output_dir, log):
        output_dir = Path(output_dir)
        if (output_dir / "adapter_config.json").exists():
            return output_dir
        calls["train"].append({"recipe": recipe, "overrides": overrides, "out": output_dir})
        steps, every = int(_override(overrides, "max_steps")), int(_override(overrides, "save_steps"))
        for step in range(every, steps + 1, every):
            (output_dir / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
        (output_dir / "adapter_config.json").write_text("{}")
        return output_dir

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "train", fake_train)
    monkeypatch.setattr(repro, "recorded_choice", no_record)
    flags = ["--start", str(tmp_path / "start"), "--tasks", "12", "--confirm", "6", "--out", str(tmp_path / "work"),
             "--results", str(tmp_path / "results")]  # fmt: skip
    return study_vasd, calls, flags, tmp_path


def test_vasd_study_writes_the_curve_per_view_and_seed(vasd_env):
    study_vasd, calls, flags, tmp = vasd_env
    assert study_vasd.main(["--seeds", "0,1", "--steps", "4", "--every", "2", *flags]) == 0
    assert [c["out"].name for c in calls["train"]] == ["seed0", "seed1"]
    overrides = calls["train"][0]["overrides"]
    assert calls["train"][0]["recipe"] == "reproduce_vasd"
    assert f"model_name_or_path={tmp / 'start'}" in overrides and "seed=0" in overrides
    assert _override(overrides, "max_steps") == "4" and _override(overrides, "save_steps") == "2"
    assert "save_strategy=steps" in overrides and "synthetic_task_steps=1" in overrides
    # the start model once, each checkpoint of each seed once; then the start model and each last checkpoint once
    # more on the confirmation tasks
    assert len(calls["lic"]) == 1 + 2 * 2 + 1 + 2
    summary = json.loads((tmp / "results" / "summary.json").read_text())
    assert summary["configuration"]["overrides"] == [] and "recipe's values" in summary["configuration"]["source"]
    assert summary["seeds"] == [0, 1] and summary["test_tasks"] == 12
    for seed in ("0", "1"):
        curve = summary["curves"][seed]
        assert [p["step"] for p in curve] == [0, 2, 4]
        assert all(set(p) >= {"p_full", "p_concat", "p_sharded", "n"} for p in curve)
        assert curve[0] == summary["start"]
    assert [p["step"] for p in summary["pooled"]] == [2, 4]
    assert {"low", "high", "n_seeds"} <= set(summary["pooled"][0]["sharded"])
    assert set(summary["last_vs_start"]) == {"full", "concat", "sharded"}
    assert summary["last_vs_start"]["sharded"]["diff"] > 0.3  # made up: SHARDED 0.2 -> ~0.6
    assert summary["minutes"] >= 0 and summary["estimated_minutes"] > 0
    confirm = summary["confirm"]
    assert confirm["tasks"] == 6 and confirm["first_task"] == 13 and set(confirm["last"]) == {"0", "1"}
    assert all(p["step"] == 4 and p["n"] == 6 for p in confirm["last"].values())
    assert confirm["last_vs_start"]["sharded"]["n_items"] == 6 and confirm["last_vs_start"]["sharded"]["n_seeds"] == 2
    assert set(confirm["per_seed"]) == {"0", "1"} and confirm["per_seed"]["1"]["sharded"]["n_seeds"] == 1
    curve_ids = {r["task_id"] for r in map(json.loads, open(tmp / "work" / "lic" / "start" / "episodes.jsonl"))}
    confirm_run = tmp / "work" / "lic" / "confirm-12+6" / "start" / "episodes.jsonl"
    confirm_ids = {r["task_id"] for r in map(json.loads, open(confirm_run))}
    assert len(curve_ids) == 12 and len(confirm_ids) == 6 and not curve_ids & confirm_ids  # tasks no curve figure read
    report = (tmp / "results" / "report.md").read_text()
    assert "What a GPU would change" in report and "SHARDED" in report
    assert "Confirmation on 6 further test tasks** (13-18" in report and "- seed 1: FULL" in report
    assert (tmp / "results" / "curve.png").stat().st_size > 1000


def test_vasd_study_resumes_and_adds_seeds(vasd_env):
    study_vasd, calls, flags, tmp = vasd_env
    args = ["--steps", "4", "--every", "2", *flags]
    assert study_vasd.main(["--seeds", "0", *args]) == 0
    first = json.loads((tmp / "results" / "summary.json").read_text())
    calls["train"].clear(), calls["lic"].clear()
    assert study_vasd.main(["--seeds", "0", *args]) == 0
    assert calls == {"lic": [], "train": []}  # nothing finished is done again
    assert json.loads((tmp / "results" / "summary.json").read_text())["curves"] == first["curves"]
    # an interrupted scoring: only the missing checkpoint is scored; an added seed: only that seed is trained
    import shutil

    shutil.rmtree(tmp / "work" / "lic" / "seed0" / "step4")
    assert study_vasd.main(["--seeds", "0,2", *args]) == 0
    assert [c["out"].name for c in calls["train"]] == ["seed2"]
    assert sorted(str(p.relative_to(tmp / "work" / "lic")) for p in calls["lic"]) == [
        "confirm-12+6/seed2", "seed0/step4", "seed2/step2", "seed2/step4"]  # fmt: skip
    minutes = json.loads((tmp / "work" / "elapsed.json").read_text())["minutes"]
    assert json.loads((tmp / "results" / "summary.json").read_text())["minutes"] == round(minutes, 2)


def test_vasd_study_confirms_on_later_tasks(vasd_env):
    """`--confirm-from F`: a second confirmation scores tasks F.. (none the first confirmation or the curve read)."""
    study_vasd, calls, flags, tmp = vasd_env
    args = ["--seeds", "0", "--steps", "2", "--every", "2", *flags]
    assert study_vasd.main(args) == 0
    assert study_vasd.main([*args, "--confirm-from", "20"]) == 0
    assert json.loads((tmp / "results" / "summary.json").read_text())["confirm"]["first_task"] == 20
    ids = {name: {r["task_id"] for r in map(json.loads, open(tmp / "work" / "lic" / name / "start" / "episodes.jsonl"))}
           for name in ("confirm-12+6", "confirm-19+6")}  # fmt: skip
    assert len(ids["confirm-19+6"]) == 6 and not ids["confirm-12+6"] & ids["confirm-19+6"]
    assert "Confirmation on 6 further test tasks** (20-25" in (tmp / "results" / "report.md").read_text()


def test_vasd_study_uses_the_recorded_configuration(vasd_env, monkeypatch):
    study_vasd, calls, flags, tmp = vasd_env
    record = {"task": "arithmetic-2-updates", "start_model": "sft", "chosen": "lora-r64",
              "overrides": ["lora_r=64", "learning_rate=1e-4"], "recorded": {"commit": "abc1234"}}  # fmt: skip
    monkeypatch.setattr(repro, "recorded_choice", lambda key: dict(record) if key == "vasd_config" else no_record(key))
    assert study_vasd.main(["--seeds", "0", "--steps", "2", "--every", "2", *flags]) == 0
    overrides = calls["train"][0]["overrides"]
    assert overrides[-2:] == ["lora_r=64", "learning_rate=1e-4"] and "synthetic_task_steps=2" in overrides
    summary = json.loads((tmp / "results" / "summary.json").read_text())
    assert summary["task"] == "arithmetic-2-updates" and "abc1234" in summary["configuration"]["source"]


def test_vasd_study_checks_a_configuration_on_dev(vasd_env):
    """`--side dev --set KEY=VALUE`: the curve reads dev tasks only (none of the test tasks a study reports), the set
    value goes last among the training overrides, and the summary and report say both."""
    study_vasd, calls, flags, tmp = vasd_env
    dev = [*flags, "--out", str(tmp / "dev"), "--results", str(tmp / "dev-results"), "--confirm", "0"]
    argv = ["--seeds", "0", "--steps", "2", "--every", "2", "--side", "dev", "--set", "learning_rate=3e-4"]
    assert study_vasd.main([*argv, *dev]) == 0
    assert calls["train"][0]["overrides"][-1] == "learning_rate=3e-4"
    assert study_vasd.main(["--seeds", "0", "--steps", "2", "--every", "2", *flags]) == 0
    ids = {side: {r["task_id"] for r in map(json.loads, open(tmp / folder / "lic" / "start" / "episodes.jsonl"))}
           for side, folder in (("dev", "dev"), ("test", "work"))}  # fmt: skip
    assert len(ids["dev"]) == len(ids["test"]) == 12 and not ids["dev"] & ids["test"]
    assert all(vasd_split(i) == side for side in ids for i in ids[side])
    summary = json.loads((tmp / "dev-results" / "summary.json").read_text())
    assert summary["side"] == "dev" and summary["set"] == ["learning_rate=3e-4"] and "confirm" not in summary
    report = (tmp / "dev-results" / "report.md").read_text()
    assert "12 tasks of the dev split (no test task)" in report and "set here: learning_rate=3e-4" in report


def vasd_split(task_id: str) -> str:
    import vasd

    return vasd.split_side(task_id.split("|", 1)[1])


def no_record(key):
    raise repro.StepError(f"no {key}")


def test_vasd_study_refuses_a_folder_of_other_steps(vasd_env, capsys):
    study_vasd, calls, flags, tmp = vasd_env
    assert study_vasd.main(["--seeds", "0", "--steps", "2", "--every", "2", *flags]) == 0
    capsys.readouterr()
    assert study_vasd.main(["--seeds", "0", "--steps", "4", "--every", "2", *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: study-vasd:") and "other settings" in err[0]


def test_results_name_the_work_folder_as_the_command_did(tmp_path, monkeypatch):
    """Committed results carry no machine's absolute path: the work folder reads as named (resolved through a
    symlinked outputs/, as in a worktree), and other checkout paths read relative to the checkout."""
    import repro
    import study

    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere" / "outputs"
    checkout.mkdir(), elsewhere.mkdir(parents=True)
    (checkout / "outputs").symlink_to(elsewhere)
    monkeypatch.setattr(repro, "ROOT", checkout)
    named = checkout / "outputs" / "studies" / "x"
    out = named.resolve()
    assert not out.is_relative_to(checkout)
    found = {"review": f"fic review {out}/probe_base --sample 30", "start": str(checkout / "outputs" / "sft"), "n": 3}
    assert study.shown_paths(found, out, str(named) + "/") == {
        "review": "fic review outputs/studies/x/probe_base --sample 30", "start": "outputs/sft", "n": 3}  # fmt: skip


def test_one_study_process_at_a_time(vasd_env, capsys):
    study_vasd, calls, flags, tmp = vasd_env
    (tmp / "work").mkdir()
    with (tmp / "work" / ".lock").open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("pid 12345")
        fh.flush()
        assert study_vasd.main(["--seeds", "0", "--steps", "2", "--every", "2", *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pid 12345 is already running" in err[0]
    assert calls == {"lic": [], "train": []}


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--seeds", "0,x"], "--seeds"),
        (["--seeds", "1,1"], "named twice"),
        (["--seeds", ""], "--seeds"),
        (["--steps", "10", "--every", "3"], "not a multiple"),
        (["--every", "0"], "--every"),
        (["--steps", "0"], "--steps"),
        (["--steps", "ten"], "--steps"),
        (["--tasks", "0"], "--tasks"),
        (["--confirm", "-1"], "--confirm"),
        (["--confirm-from", "12"], "--confirm-from"),
        (["--set", "learning_rate"], "--set"),
        (["--set", "=3e-4"], "--set"),
        (["--side", "train"], "--side"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_flags_are_refused_in_one_line(vasd_env, capsys, argv, says):
    study_vasd, calls, flags, tmp = vasd_env
    assert study_vasd.main([*flags, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: study-vasd:") and says in err[0], err
    assert calls == {"lic": [], "train": []} and not (tmp / "work").exists()


def test_the_defaults_fit_two_hours_and_both_studies_fit_one_session():
    import study
    import study_rl
    import study_vasd

    total = 0.0
    for module in (study_vasd, study_rl):
        flags = study.parse_flags(["--start", "x"] if module is study_vasd else [], module)
        minutes = module.estimated_seconds(module.SETTINGS, flags) / 60
        assert 45 <= minutes <= 125, (module.NAME, minutes)
        assert len(flags.seeds) == 3
        total += minutes
    assert total <= 150, total  # both studies, one after the other, inside a 3-hour session with room to commit
    # with the start model still to train, VASD adds the SFT (~8 min) and stays near two hours
    flags = study.parse_flags([], study_vasd)
    flags.start = None
    assert study_vasd.estimated_seconds(study_vasd.SETTINGS, flags) / 60 <= 125


# ---------------------------------------------------------------------------------------------- study-rl

HELD = {"hb_test": "healthbench", "mtb_test": "mt_bench"}


def _rl_rate(model: str) -> float:
    """Made-up held-out genuine rates: the base 0.2; a checkpoint 0.2 + 0.1 per 2 steps."""
    path = Path(model)
    return 0.2 if not path.name.startswith("checkpoint-") else 0.2 + 0.05 * int(path.name.split("-")[1])


def _write_probe(out: Path, model: str, samples: int) -> None:
    from fic.followup_summary import summarize

    rows = []
    for dataset in HELD.values():
        for item in range(12):
            for s in range(samples):
                # keyed on the path below the test's tmp folder, so every run draws the same turns
                genuine = _u(Path(model).parts[-2:], dataset, item, s) < _rl_rate(model)
                rows.append({"dataset": dataset, "item_id": str(item), "temperature": 0.7, "perturbation": "none",
                             "sample": s, "user_turn": f"turn {s}", "label": "genuine_followup" if genuine else "new_task_prompt",
                             "genuine": genuine, "generic_genuine": False})  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "summary.json").write_text(json.dumps(summarize(rows)))


@pytest.fixture
def rl_env(tmp_path, monkeypatch):
    import collab
    import study_rl

    calls = {"probe": [], "eval": [], "plan": [], "train": []}

    def fake_fic(args, log):
        if args[0] == "probe":
            out = Path(_get(args, "--out"))
            assert _get(args, "--judge") == "strict" and "--contrast" in args
            calls["probe"].append(out)
            _write_probe(out, _get(args, "--model"), int(_get(args, "--samples")))
            (out / "responses.jsonl").write_text('{"item_id": "0", "response": "base answer"}\n')
            return
        assert args[0] == "eval-checkpoints"
        run_dir = Path(args[1])
        config = json.loads((run_dir / "eval" / "config.json").read_text())
        assert config["judge"] == "strict" and config["judge_contrast"] is True and config["responses"] == "model"
        for name in _get(args, "--checkpoints").split(","):
            checkpoint = run_dir / name
            assert (checkpoint / "model.safetensors").exists(), "evaluated after its weights were pruned"
            assert "base answer" in (checkpoint / "eval" / "probe" / "responses.jsonl").read_text()
            calls["eval"].append(checkpoint)
            _write_probe(checkpoint / "eval" / "probe", str(checkpoint), config["samples"])
            (checkpoint / "eval" / "metrics.json").write_text("{}")

    def fake_train(recipe, overrides, output_dir, log):
        output_dir = Path(output_dir)
        calls["train"].append({"recipe": recipe, "overrides": overrides, "out": output_dir})
        steps, every = int(_override(overrides, "max_steps")), int(_override(overrides, "save_steps"))
        seed = int(_override(overrides, "seed"))
        # seed 1 games the reward: it rises while the judge-genuine share falls
        history = [{"step": s, "reward": 0.1 * s, GENUINE: (0.5 - 0.05 * s) if seed == 1 else 0.05 * s}
                   for s in range(1, steps + 1)]  # fmt: skip
        for step in range(every, steps + 1, every):
            checkpoint = output_dir / f"checkpoint-{step}"
            checkpoint.mkdir(parents=True, exist_ok=True)
            (checkpoint / "model.safetensors").write_bytes(b"weights")
            (checkpoint / "trainer_state.json").write_text(json.dumps({"log_history": history[:step]}))
        (output_dir / "config.json").write_text("{}")
        return output_dir

    def fake_split(data):
        paths = {key: data / f"{key}.jsonl" for key in (*HELD, "gsm8k_train")}
        for path in paths.values():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        return paths

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "train", fake_train)
    monkeypatch.setattr(repro, "plan", lambda recipe, overrides, log: calls["plan"].append(overrides))
    monkeypatch.setattr(collab, "split_data", fake_split)
    flags = ["--out", str(tmp_path / "work"), "--results", str(tmp_path / "results")]
    return study_rl, calls, flags, tmp_path


GENUINE = "followup/genuine_rate"


def test_rl_study_curve_reward_check_and_resume(rl_env):
    study_rl, calls, flags, tmp = rl_env
    args = ["--seeds", "0,1", "--steps", "4", "--every", "2", *flags]
    assert study_rl.main(args) == 0
    assert len(calls["probe"]) == 1  # the base model once
    assert [c["out"].name for c in calls["train"]] == ["seed0", "seed1"]
    overrides = calls["train"][0]["overrides"]
    assert "eval.datasets=[]" in overrides and overrides.index("eval.datasets=[]") > 0
    assert _override(overrides, "max_steps") == "4" and _override(overrides, "eval.datasets") == "[]"
    assert "save_strategy=steps" in overrides and "reward_hacking_window=10" in overrides
    assert any(o.startswith("learning_rate=") for o in overrides) and any(o.startswith("contexts=") for o in overrides)
    assert all("healthbench:" in _override(p, "eval.datasets") for p in calls["plan"]) and len(calls["plan"]) == 2
    assert len(calls["eval"]) == 4
    summary = json.loads((tmp / "results" / "summary.json").read_text())
    for seed in ("0", "1"):
        assert [p["step"] for p in summary["curves"][seed]] == [0, 2, 4]
        assert {"rate", "low", "high", "n", "n_items"} <= set(summary["curves"][seed][-1]["genuine"])
        assert summary["curves"][seed][0] == summary["base"]
    assert summary["last_vs_base"]["diff"] > 0.1  # made up: 0.2 -> 0.4
    assert {"low", "high", "n_seeds"} <= set(summary["pooled"][-1]["genuine"])
    # the trainer's check per window, from trainer_state.json: seed 1's reward rose while its genuine share fell
    assert summary["reward"]["0"]["flagged"] == 0 and summary["reward"]["1"]["flagged"] == 1
    assert [p["step"] for p in summary["reward"]["1"]["curve"]] == [1, 2, 3, 4]
    assert summary["reward_vs_genuine"]["windows"] == 2 and summary["reward_vs_genuine"]["flagged"] == 1
    assert "reward hacking?" in summary["reward"]["1"]["warning"]
    # evaluated checkpoints lose their weights, keep their evaluation and trainer state
    checkpoint = tmp / "work" / "train" / "seed0" / "checkpoint-2"
    assert not (checkpoint / "model.safetensors").exists() and (checkpoint / "trainer_state.json").exists()
    report = (tmp / "results" / "report.md").read_text()
    assert "Reward vs judge-genuine" in report and "What a GPU would change" in report
    assert (tmp / "results" / "curve.png").stat().st_size > 1000
    for value in calls.values():
        value.clear()
    assert study_rl.main(args) == 0
    assert calls == {"probe": [], "eval": [], "plan": [], "train": []}
    assert json.loads((tmp / "results" / "summary.json").read_text())["curves"] == summary["curves"]


def _blind_labels(probe: Path, share: float, foil_share: float) -> tuple[list[dict], list[dict]]:
    """Made-up blind labels of a probe folder, as `fic review --sample 30 --foil-share 0.25` writes them: 2 real turns
    of every item (genuine with chance `share`), 1 foil turn of every item (genuine with chance `foil_share`, shown
    after the next item's conversation)."""
    from fic.eval.rates import turn_sha

    rows = [json.loads(x) for x in (probe / "samples.jsonl").read_text().splitlines()]
    keys = ("dataset", "item_id", "temperature", "perturbation", "sample")
    real, foils = [], []
    for r in rows:
        base = {k: r[k] for k in keys} | {"turn_sha": turn_sha(r["user_turn"]), "context_free": False}
        draw = _u(probe.parts[-5:], r["dataset"], r["item_id"], r["sample"])
        if r["sample"] < 2:
            real.append(base | {"genuine": draw < share, "label": "genuine_followup" if draw < share else "x"})
        elif r["sample"] == 2:
            nxt = str((int(r["item_id"]) + 1) % 12)
            foils.append(base | {"genuine": draw < foil_share, "foil": True, "context_item_id": nxt,
                                 "label": "genuine_followup" if draw < foil_share else "x"})  # fmt: skip
    return real, foils


def test_rl_study_reads_the_blind_labels_of_the_last_checkpoints(rl_env, monkeypatch):
    """Without labels the summary and report name the pooled blind session's command; with committed real and foil
    labels of the base model and each seed's last checkpoint, a rerun (nothing trained or probed again) reports each
    model's readers' rate, floor and calibrated rate, the readers' gain per seed and pooled over the seeds (seeds and
    items resampled), and the labels attach by turn hash."""
    import study_rl_readers

    study_rl, calls, flags, tmp = rl_env
    labels, foils = tmp / "labels" / "study_rl", tmp / "labels" / "study_rl_foils"
    monkeypatch.setattr(study_rl_readers, "LABELS", labels)
    monkeypatch.setattr(study_rl_readers, "FOILS", foils)
    args = ["--seeds", "0,1", "--steps", "4", "--every", "2", *flags]
    assert study_rl.main(args) == 0
    blind = json.loads((tmp / "results" / "summary.json").read_text())["blind_labels"]
    assert blind["pooled"] is None and blind["note"].startswith(
        "no blind labels (real and foil) yet for base, seed0, seed1"
    )
    assert "--sample 30 --seed 0 --foil-share 0.25 --readers 2" in blind["note"]
    assert blind["note"] in (tmp / "results" / "report.md").read_text()

    work = tmp / "work"
    probes = {"base": work / "probe_base", **{f"seed{s}": work / "train" / f"seed{s}" / "checkpoint-4" / "eval" / "probe"
                                              for s in (0, 1)}}  # fmt: skip
    shares = {"base": (0.2, 0.1), "seed0": (0.6, 0.1), "seed1": (0.7, 0.2)}
    for name, folder in probes.items():
        real, foil = _blind_labels(folder, *shares[name])
        for root, rows in ((labels, real), (foils, foil)):
            root.mkdir(parents=True, exist_ok=True)
            (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for value in calls.values():
        value.clear()
    assert study_rl.main(args) == 0
    assert calls == {"probe": [], "eval": [], "plan": [], "train": []}
    blind = json.loads((tmp / "results" / "summary.json").read_text())["blind_labels"]
    assert blind["note"] == ""
    assert [blind["calibrated"][m]["status"] for m in probes] == ["48 of 48 labels attach"] * 3
    assert blind["calibrated"]["seed0"]["overall"]["rate"] is not None
    models = blind["readers"]["models"]
    assert models["seed1"]["n_real"] == 48 and models["seed1"]["n_foils"] == 24
    assert set(blind["readers"]["differences"]) == {"seed0", "seed1"}
    gain = blind["pooled"]["counted"]["gain"]
    rate = lambda rows: sum(r["genuine"] for r in rows) / len(rows)  # noqa: E731
    real = {m: _blind_labels(f, *shares[m])[0] for m, f in probes.items()}
    assert gain["diff"] == pytest.approx(rate(real["seed0"] + real["seed1"]) - rate(real["base"]))
    assert gain["low"] > 0 and blind["pooled"]["counted"]["n_seeds"] == 2
    report = (tmp / "results" / "report.md").read_text()
    assert (
        "## Blind labels of the last checkpoints" in report and "seeds pooled (2, seeds and items resampled)" in report
    )
    kept = {k: v for k, v in blind.items() if k not in ("labels", "foils")}  # the labels' folders, repo-relative
    assert str(tmp) not in json.dumps(kept)  # no machine path in what is committed


def test_rl_study_one_seed_pools_each_step_by_itself(rl_env):
    study_rl, calls, flags, tmp = rl_env
    assert study_rl.main(["--seeds", "3", "--steps", "4", "--every", "2", *flags]) == 0
    summary = json.loads((tmp / "results" / "summary.json").read_text())
    assert [p["genuine"] for p in summary["pooled"]] == [p["genuine"] for p in summary["curves"]["3"][1:]]


def test_rl_study_refuses_bad_flags_in_one_line(rl_env, capsys):
    study_rl, calls, flags, tmp = rl_env
    assert study_rl.main(["--steps", "5", "--every", "2", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: study-rl:") and "not a multiple" in err[0]


def test_study_overrides_are_valid_recipe_values(tmp_path):
    """The studies' overrides parse with their recipes (the later max_steps wins over the part's)."""
    import study_rl

    import train

    paths = {"hb_test": tmp_path / "hb.jsonl", "mtb_test": tmp_path / "mtb.jsonl", "gsm8k_train": tmp_path / "g.jsonl"}
    flags = type("F", (), {"steps": 60, "every": 12})()
    recipe, method = train.load([f"recipe={study_rl.SETTINGS['recipe']}", *study_rl.overrides(paths, 6e-5, 1, flags)])
    args = recipe.get(method.config_class())
    assert (args.max_steps, args.save_steps, args.seed, args.context_limit) == (60, 12, 1, None)
    assert args.save_only_model and args.learning_rate == 6e-5


# ---------------------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_vasd_study_end_to_end_on_a_tiny_model(tmp_path):
    """study-vasd for real on a tiny random model (LoRA, 2 steps, a checkpoint each step, 3 test tasks): the
    processes run, the checkpoints are scored by `fic lic`, the curve and its files are written."""
    import study_vasd

    argv = ["--seeds", "0", "--steps", "2", "--every", "1", "--start", "tiny:chatml", "--tasks", "3",
            "--out", str(tmp_path / "work"), "--results", str(tmp_path / "results")]  # fmt: skip
    assert study_vasd.main(argv) == 0
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert [p["step"] for p in summary["curves"]["0"]] == [0, 1, 2]
    assert all(p["n"] == 3 for p in summary["curves"]["0"])
    assert (tmp_path / "work" / "train" / "seed0" / "checkpoint-1" / "adapter_config.json").exists()
    assert (tmp_path / "results" / "curve.png").exists() and (tmp_path / "results" / "report.md").exists()
