#!/usr/bin/env python
"""`make study-rl`: follow-up RL long enough to move, a held-out learning curve per seed on SmolLM2-135M-Instruct.

    python reproduce/study_rl.py [--seeds 0,1,2] [--steps 36] [--every 12]
                                 [--out outputs/studies/rl] [--results reproduce/studies/rl]

The reproduce collab part (`reproduce/collab.py`) trains follow-up RL for 4 steps; this trains the same recipe
(`recipes/reproduce_followup_rl.yaml`: genuine 1.0, every failure 0.0, the `strict` judge contrastively) on the same
data split (`collab.split_data`: the short GSM8K-train contexts, the held-out HealthBench multi-turn and MT-Bench items
kept out by `train.py --plan`) at the learning rate the part chose on dev (`reproduce/dev_choices.json` `collab_rl`,
else the recipe's), for `--steps` steps at each seed, saving the weights every `--every` steps. Each checkpoint is
evaluated by `fic eval-checkpoints` (the user-turn probe on the held-out contexts, after the base model's greedy
answers, judged by the training judge `strict` contrastively: the run's `eval/config.json` is written from
`SETTINGS["probe"]`); the base model (step 0) by `fic probe` with the same settings. The reward against the
judge-genuine share is read per window from the last checkpoint's `trainer_state.json` (the trainer logs both every
step) with `fic.trainers.reward_hacking.reward_hacking_summary`, the trainer's own check.

What it writes to the results folder: `summary.json` (per seed and checkpoint the held-out genuine rate and generic
floor with their item-clustered intervals, the seeds pooled per step with the seed-and-item bootstrap interval, the
last checkpoint against the base model, the reward curve and its check per window, the minutes), `curve.png` and
`report.md`, and the blind labels of the base model's and each seed's last checkpoint's turns where they are committed
(`reproduce/study_rl_readers.py`: readers' rates and floor, the calibrated rates, the readers' gain per seed and
pooled), else the command that makes them. Resumable: a trained seed is not trained
again, an evaluated checkpoint is not evaluated again. Defaults, budget and units: `reproduce/settings/study_rl.json`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import collab  # noqa: E402
import repro  # noqa: E402
import study  # noqa: E402
import study_rl_readers  # noqa: E402
from vasd_estimates import difference, seed_rate  # noqa: E402

NAME = "rl"
SETTINGS = repro.load_settings("study_rl")
GENUINE = "followup/genuine_rate"  # fic.metric_names.FOLLOWUP_GENUINE_RATE, what the trainer logs every step


def learning_rate() -> tuple[float, str]:
    """The collab part's dev choice (`collab_rl`) when recorded for this run's grid, else the recipe's rate."""
    try:
        rec = collab.recorded_choice("collab_rl")
        return rec["chosen"][
            "learning_rate"
        ], f"reproduce/dev_choices.json collab_rl (commit {rec['recorded']['commit']})"
    except repro.StepError:
        import yaml

        recipe = yaml.safe_load((repro.ROOT / "recipes" / f"{SETTINGS['recipe']}.yaml").read_text(encoding="utf-8"))
        return float(recipe["learning_rate"]), "the recipe's value (no collab_rl in reproduce/dev_choices.json)"


def settings_key(flags) -> dict:
    lr, source = learning_rate()
    return {"model": repro.MODEL, "recipe": SETTINGS["recipe"], "recipe_sha256": collab.SETTINGS["recipe_sha256"],
            "learning_rate": lr, "learning_rate_source": source, "overrides": SETTINGS["overrides"],
            "reward_hacking_window": SETTINGS["reward_hacking_window"], "probe": SETTINGS["probe"],
            "judge_version": collab.SETTINGS["training_judge"]["version"]}  # fmt: skip


def estimated_seconds(settings: dict, flags) -> float:
    """Wall time at these flags from `settings["seconds"]` (one process at a time on 2 cores): the split, the base
    model's probe (answers and turns), and per seed its `--plan`, training and checkpoint probes."""
    t, samples = settings["seconds"], settings["probe"]["samples"] * len(settings["probe"]["temperatures"])
    turns = sum(n * samples * t["turn"][d] for d, n in t["items"].items())
    answers = sum(n * t["answer"][d] for d, n in t["items"].items())
    checkpoints = len(study.checkpoint_steps(flags.steps, flags.every))
    seed = t["plan"] + t["train_load"] + flags.steps * t["rl_step"] + checkpoints * (t["probe_load"] + turns)
    return t["split"] + t["probe_load"] + answers + turns + len(flags.seeds) * seed


def overrides(paths: dict, lr: float, seed: int, flags) -> list[str]:
    return [*collab.rl_overrides(paths, lr), f"seed={seed}", f"max_steps={flags.steps}", f"save_steps={flags.every}",
            f"reward_hacking_window={SETTINGS['reward_hacking_window']}", *SETTINGS["overrides"]]  # fmt: skip


def probe_args(datasets: list[str]) -> list:
    p = SETTINGS["probe"]
    return ["--datasets", ",".join(datasets), "--temperatures", ",".join(map(str, p["temperatures"])),
            "--samples", p["samples"], "--judge", p["judge"], *(["--contrast"] if p["contrast"] else []),
            "--limit", p["limit"]]  # fmt: skip


def probe_base(folder: Path, datasets: list[str], log: Path) -> None:
    """The base model's held-out probe (its greedy answers become every checkpoint's contexts)."""
    if (folder / "summary.json").exists():
        return
    p = SETTINGS["probe"]
    repro.fic(["probe", "--model", repro.MODEL, *probe_args(datasets), "--max-new-tokens", p["max_new_tokens"],
               "--response-tokens", p["response_tokens"], "--responses", p["responses"], "--batch-size",
               p["batch_size"], "--seed", p["seed"], "--out", folder], log)  # fmt: skip


def eval_config(run_dir: Path, datasets: list[str]) -> None:
    """`RUN/eval/config.json`, which `fic eval-checkpoints` reads: the probe of `SETTINGS["probe"]`."""
    from fic.eval_config import EvalConfig
    from fic.jsonl import write_json

    p = SETTINGS["probe"]
    config = EvalConfig.from_dict({
        "enabled": True, "evaluations": ["probe"], "datasets": datasets, "temperatures": p["temperatures"],
        "samples": p["samples"], "limit": p["limit"], "max_new_tokens": p["max_new_tokens"], "judge": p["judge"],
        "judge_contrast": p["contrast"], "responses": p["responses"], "response_tokens": p["response_tokens"],
        "batch_size": p["batch_size"], "seed": p["seed"], "perturbations": ["none"],
    })  # fmt: skip
    write_json(run_dir / "eval" / "config.json", config.to_dict())


def evaluated(checkpoint: Path) -> bool:
    return (checkpoint / "eval" / "metrics.json").exists()


def evaluate_seed(run_dir: Path, steps: list[int], datasets: list[str], base_dir: Path, log: Path) -> None:
    """`fic eval-checkpoints` on the checkpoints not yet evaluated, each seeded with the base model's answers."""
    pending = [f"checkpoint-{s}" for s in steps if not evaluated(run_dir / f"checkpoint-{s}")]
    if not pending:
        return
    eval_config(run_dir, datasets)
    for name in pending:
        target = run_dir / name / "eval" / "probe"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(base_dir / "responses.jsonl", target / "responses.jsonl")
    repro.fic(["eval-checkpoints", run_dir, "--checkpoints", ",".join(pending)], log)


def prune(checkpoint: Path) -> None:
    """An evaluated checkpoint's weights go (0.5 GB each); its eval/, trainer_state.json and config stay."""
    for path in [
        *checkpoint.glob("*.safetensors"),
        *checkpoint.glob("pytorch_model*.bin"),
        checkpoint / "optimizer.pt",
    ]:
        path.unlink(missing_ok=True)


def read_point(probe_dir: Path, step: int) -> tuple[dict, dict]:
    """({step, genuine, generic_floor} with item-clustered intervals, {item: [genuine of each turn]}) of one probe."""
    summary = repro.read_json(probe_dir / "summary.json")
    overall = summary["overall"]
    outcomes: dict[str, list[bool]] = {}
    for row in repro.read_jsonl(probe_dir / "samples.jsonl"):
        if row.get("perturbation", "none") == "none" and row.get("genuine") is not None:
            outcomes.setdefault(f"{row['dataset']}:{row['item_id']}", []).append(bool(row["genuine"]))
    return {"step": step, "genuine": repro.rate_only(overall["raw"]),
            "generic_floor": repro.rate_only(overall.get("generic_floor"))}, outcomes  # fmt: skip


def reward_check(checkpoint: Path) -> dict:
    """The logged reward curve and the trainer's reward-hacking check per window, from `trainer_state.json`."""
    from fic.trainers.reward_hacking import reward_hacking_summary

    history = repro.read_json(checkpoint / "trainer_state.json")["log_history"]
    keep = ("reward", "reward_std", GENUINE, "reward/generic_floor")
    curve = [{"step": e["step"], **{k: e[k] for k in keep if k in e}} for e in history if "reward" in e]
    return {"curve": curve, **reward_hacking_summary(curve, SETTINGS["reward_hacking_window"])}


def run(out: Path, flags, progress) -> dict:
    logs = out / "logs"
    paths = collab.split_data(out / "data")
    held = collab.heldout_specs(paths)
    lr, source = learning_rate()
    progress(f"learning rate {lr:g} from {source}; held-out: {', '.join(held)}")
    base_dir = out / "probe_base"
    probe_base(base_dir, held, logs / "probe_base.log")
    base, base_outcomes = read_point(base_dir, 0)
    progress("base model: " + point_line(base))
    steps = study.checkpoint_steps(flags.steps, flags.every)
    curves, outcomes, rewards = {}, {}, {}
    for i, seed in enumerate(flags.seeds, 1):
        run_dir = out / "train" / f"seed{seed}"
        log = logs / f"train-seed{seed}.log"
        if not (run_dir / "config.json").exists():
            progress(f"seed {seed} ({i}/{len(flags.seeds)}): training {flags.steps} steps")
            repro.plan(SETTINGS["recipe"], overrides(paths, lr, seed, flags), log)  # refuses held-out overlap
            repro.train(SETTINGS["recipe"], [*overrides(paths, lr, seed, flags), "eval.datasets=[]"], run_dir, log)
        missing = [s for s in steps if not (run_dir / f"checkpoint-{s}").is_dir()]
        if missing:
            raise repro.StepError(f"{run_dir}: no checkpoint at steps {missing} although the run finished; delete "
                                  f"{run_dir} to train seed {seed} again")  # fmt: skip
        progress(f"seed {seed}: evaluating checkpoints {', '.join(map(str, steps))}")
        evaluate_seed(run_dir, steps, held, base_dir, logs / f"eval-seed{seed}.log")
        curves[seed], outcomes[seed] = [base], {0: base_outcomes}
        for step in steps:
            checkpoint = run_dir / f"checkpoint-{step}"
            p, o = read_point(checkpoint / "eval" / "probe", step)
            curves[seed].append(p)
            outcomes[seed][step] = o
            progress(f"seed {seed}: checkpoint {step}/{flags.steps}: " + point_line(p))
        rewards[seed] = reward_check(run_dir / f"checkpoint-{steps[-1]}")
        if SETTINGS["prune_weights"]:
            for step in steps:
                prune(run_dir / f"checkpoint-{step}")
        flagged = rewards[seed]["flagged"]
        progress(f"seed {seed}: reward vs judge-genuine: {len(rewards[seed]['windows'])} windows, {flagged} flagged"
                 + (f": {rewards[seed]['warning']}" if flagged else ""))  # fmt: skip
    summary = summarize(flags, lr, source, held, base, base_outcomes, curves, outcomes, rewards)
    summary["blind_labels"] = study_rl_readers.figures(out, list(curves), steps[-1])
    progress("blind labels: " + (summary["blind_labels"]["note"] or "read"))
    return summary


def point_line(p: dict) -> str:
    g, f = p["genuine"], p.get("generic_floor") or {}
    floor = f" (generic floor {100 * f['rate']:.1f})" if f.get("rate") is not None else ""
    return f"held-out genuine {repro.rate_cell(g)}{floor}"


def summarize(flags, lr, source, held, base, base_outcomes, curves, outcomes, rewards) -> dict:
    seeds, steps = list(curves), study.checkpoint_steps(flags.steps, flags.every)
    pooled = []
    for step in steps:
        arm = {s: outcomes[s][step] for s in seeds}
        one = curves[seeds[0]][steps.index(step) + 1]["genuine"]  # step 0 is the base model
        pooled.append({"step": step, "genuine": seed_rate(arm) if len(seeds) > 1 else one})
    last = difference({None: base_outcomes}, {s: outcomes[s][steps[-1]] for s in seeds})
    windows = [{"seed": s, **w} for s in seeds for w in rewards[s]["windows"]]
    return {
        "method": "followup_rl", "model": "SmolLM2-135M-Instruct (smollm2, fp32 on CPU)", "recipe": SETTINGS["recipe"],
        "learning_rate": lr, "learning_rate_source": source, "heldout": held, "probe": SETTINGS["probe"],
        "seeds": seeds, "steps": flags.steps, "every": flags.every, "base": base,
        "curves": {str(s): c for s, c in curves.items()}, "pooled": pooled, "last_vs_base": last,
        "reward": {str(s): r for s, r in rewards.items()},
        "reward_vs_genuine": {"window": SETTINGS["reward_hacking_window"], "windows": len(windows),
                              "flagged": sum(w["hacking"] for w in windows),
                              "same_direction": sum((w["reward_slope"] > 0) == (w["genuine_slope"] > 0) for w in windows)},
        "interval": "95%; per checkpoint item-clustered (the probe's); pooled and differences: seeds and items "
                    "resampled (fic.bootstrap.seed_task_bootstrap); the judge's raw rates",
    }  # fmt: skip


def report(summary: dict) -> str:
    s = summary
    rows = []
    for seed, curve in s["curves"].items():
        for p in curve:
            floor = (p.get("generic_floor") or {}).get("rate")
            rows.append({"seed": seed, "step": p["step"], "genuine": repro.rate_cell(p["genuine"]),
                         "floor": None if floor is None else f"{100 * floor:.1f}"})  # fmt: skip
    cols = [
        ("seed", "seed"),
        ("step", "step"),
        ("held-out genuine % [95%] n", "genuine"),
        ("generic floor %", "floor"),
    ]
    win = []
    for seed, r in s["reward"].items():
        for w in r["windows"]:
            win.append({"seed": seed, "steps": f"{w['steps'][0]}-{w['steps'][1]}", "reward": f"{w['reward_slope']:+.4f}",
                        "genuine": f"{w['genuine_slope']:+.4f}", "hacking": "yes" if w["hacking"] else "no"})  # fmt: skip
    rv = s["reward_vs_genuine"]
    return "\n".join([
        "# Study: follow-up RL long enough to move (SmolLM2-135M-Instruct, CPU)", "",
        f"`make study-rl`: recipe `{s['recipe']}` at learning rate {s['learning_rate']:g} ({s['learning_rate_source']}) "
        f"on the collab part's data split; {len(s['seeds'])} seeds x {s['steps']} steps, a checkpoint every "
        f"{s['every']} steps, each probed on the held-out contexts ({', '.join(d.split(':')[0] for d in s['heldout'])}) after "
        f"the base model's answers, judged by `{s['probe']['judge']}`"
        f"{' contrastively' if s['probe']['contrast'] else ''} (T={s['probe']['temperatures']}, "
        f"{s['probe']['samples']} turns per context). {s['minutes']:.1f} min on 2 CPU cores (estimated "
        f"{s['estimated_minutes']:.0f}). The curve's rates are the judge's raw rates; blind labels of the last checkpoints "
        "are read in their own section below.", "",
        f"**Last checkpoint (step {s['steps']}) minus the base model**, held-out genuine rate, percentage points, "
        f"seeds and items resampled: {study.interval_text(s['last_vs_base'])}.", "",
        f"**Reward vs judge-genuine share** (`trainers/reward_hacking.py`, windows of {rv['window']} logged steps, read "
        f"from each run's trainer_state.json): {rv['windows']} windows, {rv['flagged']} flagged as reward rising while "
        f"the genuine share falls, {rv['same_direction']} with both slopes in the same direction.", "",
        "Held-out curve per seed (step 0 is the base model):", "", study.curve_table(rows, cols),
        "Reward and judge-genuine share per window (least-squares slope per step):", "",
        study.curve_table(win, [("seed", "seed"), ("steps", "steps"), ("reward slope", "reward"),
                                ("genuine slope", "genuine"), ("hacking", "hacking")]),
        *(study_rl_readers.report_lines(s["blind_labels"]) if "blind_labels" in s else []),
        study.GPU_NOTE, "",
    ])  # fmt: skip


def plot(summary: dict, path: Path) -> None:
    """Left: the held-out genuine rate against the step, per seed and pooled; right: the logged training reward and
    judge-genuine share per step, per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for seed, curve in summary["curves"].items():
        left.plot([p["step"] for p in curve], [p["genuine"]["rate"] for p in curve], marker="o", ms=3, alpha=0.6,
                  label=f"seed {seed}")  # fmt: skip
    pooled = [p for p in summary["pooled"] if p["genuine"].get("low") is not None]
    if pooled:
        base = summary["base"]["genuine"]["rate"]
        left.fill_between([0] + [p["step"] for p in pooled], [base] + [p["genuine"]["low"] for p in pooled],
                          [base] + [p["genuine"]["high"] for p in pooled], color="k", alpha=0.12,
                          label="seeds pooled, 95%")  # fmt: skip
    left.set_title("held-out genuine rate (strict, contrastive)", fontsize=9)
    left.set_xlabel("step")
    left.set_ylim(-0.02, 1.02)
    left.legend(fontsize=7)
    for i, (seed, r) in enumerate(summary["reward"].items()):
        color = f"C{i}"
        curve = r["curve"]
        right.plot([p["step"] for p in curve], [p["reward"] for p in curve], color=color, label=f"reward, seed {seed}")
        right.plot([p["step"] for p in curve if GENUINE in p], [p[GENUINE] for p in curve if GENUINE in p],
                   color=color, ls="--", label=f"judge-genuine, seed {seed}")  # fmt: skip
    right.set_title("training: reward (solid) and judge-genuine share (dashed)", fontsize=9)
    right.set_xlabel("step")
    right.legend(fontsize=6)
    study.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    return study.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
