"""Made-up stand-ins for the commands the collab part of `make reproduce` runs (`fic probe`, `fic build-followups`,
training), and `run_part`, the part run on them: shared by the collab part's tests (test_reproduce_collab*.py) and
the collab study's (test_study.py). Every draw is a hash of the model, item and sample, so a run draws the same on
every machine; `rate` and `flip` are looked up at call time, so a test may patch them on this module."""

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import repro  # noqa: E402

VALIDITY = {"name": "learned", "version": "v", "errors": {"per_dataset": {}, "pooled": {
    "source": "pooled", "sensitivity": 0.8, "specificity": 0.95, "var_sensitivity": 0.001, "var_specificity": 0.001,
    "n_pos": 40, "n_neg": 140}}}  # fmt: skip
JUDGE = {"kind": "learned", "name": "learned", "version": "v", "n": 180, "kappa": 0.64, "false_positive_rate": 0.03,
         "judge_genuine_rate": 0.18, "annotator_genuine_rate": 0.27, "labels_by": "agents"}  # fmt: skip


def flip(p: float, *key) -> bool:
    """A made-up draw with chance p; a model's path is keyed by its last three parts, not the test's tmp folder, so
    every run draws the same."""
    key = tuple(Path(k).parts[-3:] if isinstance(k, str) and "/" in k else k for k in key)
    h = int(hashlib.sha256(repr(key).encode()).hexdigest()[:8], 16) / 16**8
    return h < p


def rate(model: str) -> float:
    """Made-up genuine rates: on dev, the grid point lr 1e-4 at 8 steps (the run's own folder) is best, and RL at 6e-5
    (the recorded choice, so both scales train the other seeds at the same rate); every model has the same generic
    floor (10%)."""
    if "/grid/" in model:
        return 0.9 if model.endswith("lr0.0001") else 0.3
    if model.endswith("/rl/lr3e-05"):
        return 0.3
    return {"smollm2": 0.2}.get(model, 0.5)


def fake_probe(args: list[str], calls: list) -> None:
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
                genuine = flip(rate(model), model, record.id, s)
                rows.append({"dataset": dataset, "item_id": record.id, "temperature": 0.7, "perturbation": "none",
                             "sample": s, "messages": messages, "user_turn": f"Why {s}?" if genuine else "Hi.",
                             "label": "genuine_followup" if genuine else "new_task_prompt", "genuine": genuine,
                             "generic_genuine": flip(0.1, "floor", model, record.id, s)})  # fmt: skip
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not (out / "responses.jsonl").exists():
        (out / "responses.jsonl").write_text("{}\n")
    (out / "probe_meta.json").write_text(json.dumps({"run_id": f"run-{out.name}", "accuracy": {}}))
    accuracy = {"gsm8k": {"accuracy": 0.1, "n": 20}} if "gsm8k" in get("--datasets") else {}
    (out / "summary.json").write_text(json.dumps(summarize(rows, accuracy, validity=VALIDITY)))


def fake_build(args: list[str]) -> None:
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


def fake_train(recipe: str, overrides: list[str], output_dir: Path, log: Path, trained: list) -> Path:
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


def import_part(monkeypatch, scale: str):
    """A fresh `collab` module at `SCALE=scale` (its SETTINGS and CHOOSE_IN_RUN are read at import), and fresh
    modules of the part (every `collab_*` one reads the settings at import)."""
    monkeypatch.setenv("SCALE", scale)
    for name in [n for n in sys.modules if n.startswith("collab") and n != "collab_fakes"] + ["heldout"]:
        sys.modules.pop(name, None)
    import collab as part

    assert part.CHOOSE_IN_RUN == (scale == "gpu")
    return part


def fake_commands(out: Path, monkeypatch, committed_foils: Path | None = None) -> tuple[list, list, list]:
    """`repro`'s commands replaced by the made-up ones, the repo's own labels kept out: (probe calls, training runs,
    plans), filled as the part runs. `committed_foils` stands for labels/followup/collab_foils (default: a folder
    that does not exist)."""
    calls, trained, plans = [], [], []

    def fake_fic(args, log):
        if args[0] == "probe":
            fake_probe([str(a) for a in args], calls)
        elif args[0] == "build-followups":
            fake_build([str(a) for a in args])
        else:
            raise AssertionError(args)

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "plan", lambda recipe, overrides, log: plans.append(overrides))
    monkeypatch.setattr(repro, "train", lambda *a: fake_train(*a, trained))
    monkeypatch.setattr(repro, "judge_about", lambda: JUDGE)
    import collab_labels

    monkeypatch.setattr(collab_labels, "COMMITTED_LABELS", out / "no_committed_labels")
    monkeypatch.setattr(collab_labels, "COMMITTED_FOILS", committed_foils or out / "no_committed_foils")
    return calls, trained, plans


def run_part(out: Path, monkeypatch, scale: str, committed_foils: Path | None = None,
             seeds: list[int] | None = (0, 1, 2)):  # fmt: skip
    """The part run at `scale` with made-up commands (`fake_commands`): (part, section, out, probe calls, training
    runs, plans). `seeds`: the training seeds (default: three, as SCALE=gpu trains; SCALE=cpu trains seed 0 only, for
    time; None: the settings')."""
    part = import_part(monkeypatch, scale)
    if seeds is not None:
        monkeypatch.setitem(part.SETTINGS, "seeds", list(seeds))
    calls, trained, plans = fake_commands(out, monkeypatch, committed_foils)
    section = part.run(out)
    return part, section, out, calls, trained, plans


KEY = ("dataset", "item_id", "temperature", "perturbation", "sample")


def samples(folder: Path) -> list[dict]:
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["sample"], r["dataset"], str(r["item_id"])))


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
