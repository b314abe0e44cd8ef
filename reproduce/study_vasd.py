#!/usr/bin/env python
"""`make study-vasd`: VASD long enough to move, a learning curve per view and seed on SmolLM2-135M-Instruct.

    python reproduce/study_vasd.py [--seeds 0,1,2] [--steps 60] [--every 10] [--start MODEL] [--tasks N]
                                   [--confirm M] [--confirm-from F] [--side test|dev] [--set KEY=VALUE ...]
                                   [--out outputs/studies/vasd] [--results reproduce/studies/vasd]

The reproduce VASD part (`reproduce/vasd.py`) trains 8 steps; this trains the same recipe in the same form
(`recipes/reproduce_vasd.yaml`: LoRA, the teacher the same weights with the adapter off) from the same start model
(the part's single-turn SFT model, `outputs/reproduce/vasd/sft`, trained by the part's `sft()` when absent) with the
configuration the part chose on dev (`reproduce/dev_choices.json` `vasd_config` when it is recorded for this task and
start model, else the recipe's values) and, on top, the dev check's choice at study length (`study_vasd_config`,
below), for `--steps` steps at each seed, saving a checkpoint every `--every` steps.
Each checkpoint and the start model (step 0) are scored with `fic lic` (FULL, CONCAT, SHARDED, greedy) on the part's
held-out test tasks (`vasd.family_tasks(task, "test", n)`, the tasks the part reports on; no choice here reads them).
Then the start model and each seed's last checkpoint are scored once more on `--confirm` further test tasks, the next
ones of the same held-out split, which neither the part nor the curve scores: the last-minus-start differences on
them are a confirmation on items no earlier figure read, with each seed alone against the start model beside the
seeds pooled (on 180 tasks a seed's difference is known to about +/-5 points; the pooled interval is then limited by
how far the seeds disagree). `--confirm-from F` starts the confirmation at task F instead of N+1, so a later run
can confirm on tasks no earlier run read (the tasks between N+1 and F-1 are not scored).

What it writes to the results folder: `summary.json` (per seed and step P_full / P_concat / P_sharded, the seeds
pooled per step with the seed-and-task bootstrap interval, the last checkpoint against the start model per view with
its interval, the share of the multi-turn gap closed, the same differences on the confirmation tasks, the minutes),
`curve.png` and `report.md`. Resumable: a seed whose training finished is not trained again (a killed training
resumes from its last checkpoint), a scored checkpoint is not scored again. Defaults, budget and units: `reproduce/settings/study_vasd.json`.

A configuration is checked at study length on dev, never on the tasks above: `--side dev` scores the curve on the
part's dev split (disjoint from test by a salted hash) and `--set KEY=VALUE` (repeatable) changes a recipe value on
top of the configuration, e.g. `--side dev --tasks 100 --confirm 0 --set learning_rate=3e-4 --out
outputs/studies/vasd-dev/lr3e-4 --results reproduce/studies/vasd-dev/lr3e-4`; `reproduce/study_vasd_choose.py`
applies the check's rule to such folders and records the choice as `study_vasd_config`.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import repro  # noqa: E402
import study  # noqa: E402
import vasd  # noqa: E402
from vasd_estimates import arm, difference, recovery, seed_rate  # noqa: E402
from vasd_settings import ARITHMETIC, VIEWS  # noqa: E402

NAME = "vasd"
SETTINGS = repro.load_settings("study_vasd")
MODEL_NAME = "SmolLM2-135M-Instruct after the reproduce part's single-turn SFT (fp32 on CPU)"


def add_flags(parser) -> None:
    parser.add_argument("--start", default=None, help=f"start model (default: {SETTINGS['start']}, trained if absent)")
    parser.add_argument("--tasks", type=int, default=None,
                        help=f"test tasks scored per checkpoint (default: the part's, {vasd.SETTINGS['eval']['test_n']})")  # fmt: skip
    parser.add_argument("--confirm", type=int, default=SETTINGS["defaults"]["confirm"],
                        help="further test tasks (after --tasks) scoring the start model and each seed's last "
                             "checkpoint once more; 0 skips")  # fmt: skip
    parser.add_argument("--confirm-from", type=int, default=None, metavar="F",
                        help="the first confirmation task (1-based; default: the one after --tasks); a later F "
                             "confirms on tasks an earlier run's confirmation did not read")  # fmt: skip
    parser.add_argument("--side", choices=["test", "dev"], default="test",
                        help="the split whose tasks are scored: test (the part's held-out tasks) or dev (where a "
                             "configuration is checked before a study reports on test)")  # fmt: skip
    parser.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a recipe value on top of the configuration (repeatable), e.g. learning_rate=3e-4",
    )


def check_flags(flags) -> None:
    if flags.tasks is not None and flags.tasks < 1:
        raise study.FlagError(f"--tasks {flags.tasks}: expected a number of test tasks >= 1")
    if flags.confirm < 0:
        raise study.FlagError(f"--confirm {flags.confirm}: expected a number of confirmation tasks >= 0 (0 skips)")
    if flags.confirm_from is not None and flags.confirm_from <= n_tasks(flags):
        raise study.FlagError(f"--confirm-from {flags.confirm_from}: expected a task after the {n_tasks(flags)} curve "
                              f"tasks (>= {n_tasks(flags) + 1}), so no confirmation task is a curve task")  # fmt: skip
    for item in flags.extra:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip() or key != key.strip():
            raise study.FlagError(f"--set {item!r}: expected KEY=VALUE, a recipe key and its value, e.g. "
                                  "--set learning_rate=3e-4")  # fmt: skip


def n_tasks(flags) -> int:
    return flags.tasks if flags.tasks is not None else vasd.SETTINGS["eval"]["test_n"]


def configuration() -> dict:
    """{task, overrides, source}: the part's recorded dev choice (`vasd_config`) when it applies to this start model,
    else the settings' task with the recipe's values (no overrides); then the dev check's choice at study length
    (`study_vasd_config`, reproduce/study_vasd_choose.py) on top when it is recorded for that task."""
    try:
        rec = repro.recorded_choice("vasd_config")
    except repro.StepError:
        rec = None
    if rec and rec.get("start_model") == "sft" and rec.get("task") in ARITHMETIC and "overrides" in rec:
        config = {"task": rec["task"], "overrides": list(rec["overrides"]), "chosen": rec.get("chosen"),
                  "source": f"reproduce/dev_choices.json vasd_config (commit {rec['recorded']['commit']})"}  # fmt: skip
    else:
        config = {"task": SETTINGS["task"], "overrides": [], "chosen": None,
                  "source": "the recipe's values (no vasd_config for the SFT start model in reproduce/dev_choices.json)"}  # fmt: skip
    try:
        study_rec = repro.recorded_choice("study_vasd_config")
    except repro.StepError:
        return config
    if study_rec.get("task") == config["task"] and study_rec.get("overrides"):
        config["overrides"] += list(study_rec["overrides"])
        config["chosen"] = f"{config['chosen']} + {study_rec['chosen']}"
        config["source"] += (f", then study_vasd_config (the dev check at study length, commit "
                             f"{study_rec['recorded']['commit']})")  # fmt: skip
    return config


def settings_key(flags) -> dict:
    return {"model": repro.MODEL, "recipe": SETTINGS["recipe"], "configuration": configuration(),
            "start": flags.start or SETTINGS["start"], "test_n": n_tasks(flags),
            # a dev check's folder is not a test study's; absent at the defaults, so earlier work folders still match
            **({"side": flags.side} if flags.side != "test" else {}), **({"set": flags.extra} if flags.extra else {}),
            "max_new_tokens": vasd.SETTINGS["eval"]["max_new_tokens"], "overrides": SETTINGS["overrides"]}  # fmt: skip


def estimated_seconds(settings: dict, flags) -> float:
    """Wall time at these flags from `settings["seconds"]` (one process at a time on 2 cores): each seed's training
    and its checkpoints' `fic lic`, the start model's `fic lic`, and the SFT when the start model is not there."""
    t, n = settings["seconds"], n_tasks(flags)
    lic = t["lic_load"] + n * t["lic_task"]
    seed = t["train_load"] + flags.steps * t["vasd_step"] + len(study.checkpoint_steps(flags.steps, flags.every)) * lic
    start = Path(flags.start) if flags.start else repro.ROOT / settings["start"]
    sft = t["sft"] if flags.start is None and not saved(start) else 0
    confirm = (1 + len(flags.seeds)) * (t["lic_load"] + flags.confirm * t["lic_task"]) if flags.confirm else 0
    return sft + lic + len(flags.seeds) * seed + confirm


def saved(folder: Path) -> bool:
    """A model is saved in `folder` (what `repro.train` checks before skipping a training)."""
    return (folder / "config.json").exists() or (folder / "adapter_config.json").exists()


def start_model(flags, logs: Path) -> str:
    """`--start`, or the reproduce part's SFT model (trained by `vasd.sft` into its folder when absent)."""
    if flags.start:
        return flags.start
    folder = repro.ROOT / SETTINGS["start"]
    if not saved(folder):
        vasd.sft(folder.parent, logs)
    return str(folder)


def train_seed(start: str, config: dict, seed: int, flags, out: Path, logs: Path) -> Path:
    """One seed's VASD run with a checkpoint every `--every` steps (skipped when its final model is saved)."""
    overrides = [f"model_name_or_path={start}", f"synthetic_task_steps={ARITHMETIC[config['task']]}", f"seed={seed}",
                 f"max_steps={flags.steps}", f"save_steps={flags.every}", *SETTINGS["overrides"],
                 *config["overrides"], *flags.extra]  # fmt: skip
    return repro.train(SETTINGS["recipe"], overrides, out / "train" / f"seed{seed}", logs / f"train-seed{seed}.log")


def point(step: int, result: dict) -> dict:
    return {"step": step, **vasd.views(result)}


def run(out: Path, flags, progress) -> dict:
    logs = out / "logs"
    config = configuration()
    n = n_tasks(flags)
    items = vasd.family_tasks(config["task"], flags.side, n)
    test_file = vasd.write_lic_file(items, out / "data" / f"{flags.side}-{config['task']}.json")
    max_new = vasd.SETTINGS["eval"]["max_new_tokens"]
    progress(f"task {config['task']}, configuration from {config['source']}: {config['overrides'] or 'none'}"
             + (f"; set: {', '.join(flags.extra)}" if flags.extra else "") + f"; {n} {flags.side} tasks")  # fmt: skip
    start = start_model(flags, logs)
    before = vasd.lic(start, test_file, out / "lic" / "start", logs / "lic.log", n, max_new)
    progress("start model: " + views_line(point(0, before)))
    outcomes = {}  # seed -> step -> {view: {task: [correct]}}
    curves = {}
    for i, seed in enumerate(flags.seeds, 1):
        progress(f"seed {seed} ({i}/{len(flags.seeds)}): training {flags.steps} steps")
        run_dir = train_seed(start, config, seed, flags, out, logs)
        curves[seed], outcomes[seed] = [point(0, before)], {0: before["outcomes"]}
        for step in study.checkpoint_steps(flags.steps, flags.every):
            checkpoint = run_dir / f"checkpoint-{step}"
            if not checkpoint.is_dir():
                raise repro.StepError(f"{checkpoint}: missing although the run finished; delete {run_dir} to train "
                                      "this seed again")  # fmt: skip
            result = vasd.lic(checkpoint, test_file, out / "lic" / f"seed{seed}" / f"step{step}", logs / "lic.log", n,
                              max_new)  # fmt: skip
            curves[seed].append(point(step, result))
            outcomes[seed][step] = result["outcomes"]
            progress(f"seed {seed}: checkpoint {step}/{flags.steps}: " + views_line(curves[seed][-1]))
    summary = summarize(config, flags, n, before, curves, outcomes, start)
    if flags.confirm:
        summary["confirm"] = confirm(start, config, flags, n, out, progress)
    return summary


def confirm(start: str, config: dict, flags, n: int, out: Path, progress) -> dict:
    """The start model and each seed's last checkpoint on the `--confirm` test tasks from `--confirm-from` (default:
    after the first `n`; prefix-stable `family_tasks`, so none is a curve task): the rates and last-minus-start
    differences per view."""
    m, logs = flags.confirm, out / "logs"
    skip = n if flags.confirm_from is None else flags.confirm_from - 1
    items = vasd.family_tasks(config["task"], flags.side, skip + m)[skip:]
    data = vasd.write_lic_file(items, out / "data" / f"confirm-{skip}+{m}-{config['task']}.json")
    folder, max_new = out / "lic" / f"confirm-{skip}+{m}", vasd.SETTINGS["eval"]["max_new_tokens"]
    progress(
        f"confirmation: the start model and each seed's last checkpoint on {flags.side} tasks {skip + 1}-{skip + m}"
    )
    before = vasd.lic(start, data, folder / "start", logs / "lic.log", m, max_new)
    last = {seed: vasd.lic(out / "train" / f"seed{seed}" / f"checkpoint-{flags.steps}", data, folder / f"seed{seed}",
                           logs / "lic.log", m, max_new) for seed in flags.seeds}  # fmt: skip
    start_arm = {view: arm({None: before["outcomes"]}, view) for view in VIEWS}
    last_arm = {view: arm({s: r["outcomes"] for s, r in last.items()}, view) for view in VIEWS}
    # each seed alone against the start model: tasks resampled only, so the seeds' spread shows beside the pooled figure
    per_seed = {str(s): {view: difference(start_arm[view], arm({None: r["outcomes"]}, view)) for view in VIEWS}
                for s, r in last.items()}  # fmt: skip
    result = {"tasks": m, "first_task": skip + 1, "start": point(0, before),
              "last": {str(s): point(flags.steps, r) for s, r in last.items()},
              "last_vs_start": {view: difference(start_arm[view], last_arm[view]) for view in VIEWS},
              "per_seed": per_seed}  # fmt: skip
    progress("confirmation, last minus start: " + "; ".join(
        f"{v.upper()} {study.interval_text(result['last_vs_start'][v])}" for v in VIEWS))  # fmt: skip
    return result


def views_line(p: dict) -> str:
    return ", ".join(f"{v.upper()} {100 * p[f'p_{v}']:.1f}" for v in VIEWS) + f" (n={p['n']})"


def summarize(config, flags, n, before, curves, outcomes, start) -> dict:
    """summary.json: the curve per seed, the seeds pooled per step (seed-and-task bootstrap), the last checkpoint
    against the start model per view, and the share of the multi-turn gap closed."""
    seeds, steps = list(curves), [0, *study.checkpoint_steps(flags.steps, flags.every)]
    start_arm = {view: arm({None: before["outcomes"]}, view) for view in VIEWS}
    pooled = []
    for step in steps[1:]:
        row = {"step": step}
        for view in VIEWS:
            r = seed_rate(arm({s: outcomes[s][step] for s in seeds}, view)) if len(seeds) > 1 else None
            row[view] = r or {"rate": curves[seeds[0]][steps.index(step)][f"p_{view}"]}
        pooled.append(row)
    last = {view: arm({s: outcomes[s][steps[-1]] for s in seeds}, view) for view in VIEWS}
    return {
        "method": "vasd", "model": MODEL_NAME if flags.start is None else f"{start} (--start)", "recipe": SETTINGS["recipe"],
        "start_model": start, "task": config["task"], "configuration": config, "set": flags.extra,
        "side": flags.side, "test_tasks": n,
        "views": list(VIEWS), "seeds": seeds, "steps": flags.steps, "every": flags.every,
        "start": point(0, before), "curves": {str(s): c for s, c in curves.items()}, "pooled": pooled,
        "last_vs_start": {view: difference(start_arm[view], last[view]) for view in VIEWS},
        "gap_closed": recovery(start_arm["full"], start_arm["sharded"], last["sharded"]),
        "interval": "95%; seeds and tasks resampled (fic.bootstrap.seed_task_bootstrap)",
    }  # fmt: skip


def report(summary: dict) -> str:
    s, last = summary, summary["last_vs_start"]
    rows = [{"seed": seed, **p} for seed, curve in s["curves"].items() for p in curve]
    cols = [("seed", "seed"), ("step", "step"), *[(f"P_{v} %", f"p_{v}") for v in s["views"]], ("tasks", "n")]
    gap = s["gap_closed"]
    gap_text = (f"{gap['estimate']:.2f} [{gap['low']:.2f}, {gap['high']:.2f}]" if gap.get("estimate") is not None
                else f"not defined ({gap.get('reason')})")  # fmt: skip
    return "\n".join([
        f"# Study: VASD long enough to move ({s['model']})", "",
        f"`make study-vasd`: recipe `{s['recipe']}` (LoRA, adapter-off teacher) from `{s['start_model']}`, task "
        f"`{s['task']}`, configuration from {s['configuration']['source']} "
        f"(overrides: {', '.join(s['configuration']['overrides']) or 'none'})"
        + (f", set here: {', '.join(s['set'])}" if s.get("set") else "") + f"; {len(s['seeds'])} seeds x {s['steps']} "
        f"steps, a checkpoint every {s['every']} steps, each scored with `fic lic` (greedy) on "
        + (f"the reproduce part's {s['test_tasks']} held-out test tasks" if s.get("side", "test") == "test"
           else f"{s['test_tasks']} tasks of the {s['side']} split (no test task)")
        + f". {s['minutes']:.1f} min on 2 CPU cores (estimated "
        f"{s['estimated_minutes']:.0f}).", "",
        f"**Last checkpoint (step {s['steps']}) minus the start model**, percentage points, {s['interval']}: "
        + "; ".join(f"{v.upper()} {study.interval_text(last[v])}" for v in s["views"])
        + f". Share of the start model's multi-turn gap (FULL - SHARDED) closed: {gap_text}.", "",
        "The curve per seed (step 0 is the start model), P in percent:", "",
        study.curve_table(rows, cols), *confirm_text(s.get("confirm"), s.get("side", "test")), study.GPU_NOTE, "",
    ])  # fmt: skip


def confirm_text(c: dict | None, side: str = "test") -> list[str]:
    if not c:
        return []
    last = c["last_vs_start"]
    split = "the held-out split" if side == "test" else f"the {side} split"
    return ["", f"**Confirmation on {c['tasks']} further {side} tasks** ({c['first_task']}-"
            f"{c['first_task'] + c['tasks'] - 1} of {split}; no curve figure read them), the start model and each seed's last checkpoint, "
            "last minus start in points: " + "; ".join(f"{v.upper()} {study.interval_text(last[v])}" for v in last)
            + ". Start model: " + views_line(c["start"]) + ". Each seed alone (tasks resampled):", "",
            *(f"- seed {seed}: " + "; ".join(f"{v.upper()} {study.interval_text(d[v])}" for v in d)
              for seed, d in c["per_seed"].items()), ""]  # fmt: skip


def plot(summary: dict, path: Path) -> None:
    """One panel per view: P against the step, one line per seed and the seeds pooled with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    views = summary["views"]
    fig, axes = plt.subplots(1, len(views), figsize=(4 * len(views), 3.4), sharey=True)
    for ax, view in zip(axes, views):
        for seed, curve in summary["curves"].items():
            ax.plot([p["step"] for p in curve], [p[f"p_{view}"] for p in curve], marker="o", ms=3, alpha=0.6,
                    label=f"seed {seed}")  # fmt: skip
        pooled = [p for p in summary["pooled"] if p[view].get("low") is not None]
        if pooled:
            x = [0] + [p["step"] for p in pooled]
            start = summary["start"][f"p_{view}"]
            ax.fill_between(x, [start] + [p[view]["low"] for p in pooled], [start] + [p[view]["high"] for p in pooled],
                            color="k", alpha=0.12, label="seeds pooled, 95%")  # fmt: skip
        ax.set_title(view.upper())
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("P (correct)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(
        f"VASD: {summary['task']}, {summary['test_tasks']} {summary.get('side', 'test')} tasks"
        + (f" ({', '.join(summary['set'])})" if summary.get("set") else "")
        + f", {len(summary['seeds'])} seeds",
        fontsize=9,
    )
    study.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    return study.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
