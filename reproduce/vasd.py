"""Part 3 of `make reproduce`: View-Asymmetric Self-Distillation (Found in Conversation) on SmolLM2-135M-Instruct.

The runner: it makes the dev choices (start model, task, the training configuration from a small grid), trains VASD
and the same-budget self-SFT control at every seed with the chosen configuration, scores the start model and each
trained model once on the test tasks with `fic lic`, and hands what it measured to `vasd_report.section`. Settings:
reproduce/settings/vasd.json (`vasd_settings`); how the part is set up and why: reproduce/results/README.md.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import repro  # noqa: E402
from repro import Section  # noqa: E402
from vasd_report import section  # noqa: E402
from vasd_settings import (  # noqa: E402
    ARITHMETIC,
    CANDIDATES,
    CHOOSE_IN_RUN,
    GRID,
    KINDS,
    SETTINGS,
    VIEWS,
    qualifies,
    seeds_of,
    views,
)

TITLE = "View-Asymmetric Self-Distillation (Found in Conversation): sharded arithmetic on SmolLM2"


def split_side(key: str) -> str:
    """`dev` or `test` for a task's content key: one bit of a salted hash, so the two sides never share a task."""
    return "dev" if hashlib.sha256(f"{SETTINGS['split']['salt']}|{key}".encode()).digest()[0] % 2 == 0 else "test"


def family_tasks(name: str, side: str, n: int) -> list[tuple[str, str, list[str], str]]:
    """The first `n` (id, full prompt, shards, answer) of candidate `name` on `side` (dev or test).

    Ids are `NAME|CONTENT-ID`. Arithmetic tasks come from the held-out (`test`) content-hash split of
    `fic.data.synthetic`, which no training task is drawn from; `make_tasks` is prefix-stable in `n`, so a larger
    pool only adds tasks after these."""
    if side not in SETTINGS["split"]["sides"]:
        raise ValueError(f"side: expected dev or test, got {side!r}")
    seed = SETTINGS["split"]["seed"]
    if name in ARITHMETIC:
        from fic.data.synthetic import make_tasks

        pool = make_tasks(4 * n + 40, seed=seed, split="test", steps=ARITHMETIC[name])
        items = [(f"{name}|{t.id}", t.full_prompt, list(t.shards), t.answer) for t in pool if split_side(t.id) == side]
    elif name == "sum-of-two":
        pairs = [(a, b) for a in range(2, 31) for b in range(2, 31)]
        random.Random(f"sum|{seed}").shuffle(pairs)
        items = [(f"{name}|sum-{a}-{b}", f"What is {a} + {b}?", ["I need the sum of two numbers. What is it?",
                  f"The first number is {a}.", f"The second number is {b}."], str(a + b))
                 for a, b in pairs if split_side(f"sum-{a}-{b}") == side]  # fmt: skip
    else:
        raise ValueError(f"unknown candidate {name!r}; valid: {', '.join(CANDIDATES)}")
    if len(items) < n:
        raise ValueError(f"{name}: only {len(items)} {side} tasks for n={n}")
    return items[:n]


def write_lic_file(items, path: Path) -> Path:
    """(id, full prompt, shards, answer) tuples as a Lost-in-Conversation `math` file: question = the canonical
    single-turn phrasing, the shards, and `#### ANSWER` (checked like GSM8K: the final number of a reply equals the
    answer)."""
    rows = [
        {"task_id": i, "task": "math", "question": q, "answer": f"#### {a}",
         "shards": [{"shard_id": k, "shard": s} for k, s in enumerate(shards)]}
        for i, q, shards, a in items
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return path


def sft_conversations(path: Path) -> Path:
    """Single-turn conversations (every single-turn phrasing of `SETTINGS["sft"]["tasks"]` train-split tasks, half
    of each candidate's update steps, answered "The answer is N.") as a `conversations` JSONL at `path`."""
    from fic.data.synthetic import make_tasks, single_turn_rows

    cfg = SETTINGS["sft"]
    per = cfg["tasks"] // len(cfg["task_steps"])
    tasks = [t for steps in cfg["task_steps"] for t in make_tasks(per, seed=cfg["seed"], split="train", steps=steps)]
    rows = [{"id": i, "messages": r["prompt"] + r["completion"]} for i, r in enumerate(single_turn_rows(tasks))]
    random.Random(cfg["seed"]).shuffle(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def sft(out: Path, logs: Path) -> Path:
    """The start model: `recipes/reproduce_vasd_sft.yaml` (collaboration SFT, loss on the assistant turns) on
    `sft_conversations`, saved to `out / "sft"` (skipped when already there)."""
    data = sft_conversations(out / "data" / "sft.jsonl")
    return repro.train(SETTINGS["sft"]["recipe"], [f"train_datasets=[conversations:{data}]"], out / "sft",
                       logs / "sft.log")  # fmt: skip


# ---------------------------------------------------------------------------------------------- measuring


def lic(model, data: Path, out: Path, log: Path, n: int, max_new_tokens: int, sampled: bool = False) -> dict:
    """`fic lic` on the first `n` tasks of `data` (resumes in `out`); returns its summary.json (P, A90, U90-10 per
    mode, as `fic lic` scores them) with `outcomes`: {mode: {task_id: [correct of each run]}} from its episodes, which
    the seed-and-task bootstrap resamples."""
    ev = SETTINGS["eval"]
    args = ["lic", "--model", str(model), "--data", f"lost_in_conversation:{data}", "--limit", n,
            "--max-new-tokens", max_new_tokens, "--batch-size", ev["batch_size"], "--out", str(out)]  # fmt: skip
    if sampled:
        s = ev["sampled"]
        args += ["--runs", s["runs"], "--temperature", s["temperature"], "--seed", s["seed"]]
    if not (out / "summary.json").exists():
        repro.fic(args, log)
    summary = repro.read_json(out / "summary.json")
    if "modes" not in summary:
        raise repro.StepError(f"{out / 'summary.json'}: not a `fic lic` summary (no `modes`); delete {out} to rerun")
    outcomes: dict[str, dict[str, list[bool]]] = {m: {} for m in VIEWS}
    for row in sorted(repro.read_jsonl(out / "episodes.jsonl"), key=lambda r: r["run"]):
        outcomes.setdefault(row["mode"], {}).setdefault(row["task_id"], []).append(bool(row["correct"]))
    return {**summary, "outcomes": outcomes}


def candidates_lic(model, items: dict[str, list], side: str, out: Path, log: Path, max_new_tokens: int) -> dict:
    """Each candidate's dev tasks scored by one `fic lic` run of its own (`out/NAME`): {name: views}."""
    result = {}
    for name, tasks in items.items():
        path = write_lic_file(tasks, out.parent.parent / "data" / f"{side}-{out.name}-{name}.json")
        result[name] = views(lic(model, path, out / name, log, len(tasks), max_new_tokens))
    return result


# ---------------------------------------------------------------------------------------------- choices


def choose_start(dev_views: dict[str, dict]) -> dict:
    """Whether the single-turn SFT runs: unless an arithmetic candidate qualifies on dev with the base model."""
    ok = [name for name in ARITHMETIC if name in dev_views and qualifies(dev_views[name])]
    return {"rule": "skip the single-turn SFT only if an arithmetic candidate qualifies on dev with the base model",
            "qualified": ok, "sft": not ok, "numbers": dev_views}  # fmt: skip


def choose_task(dev_views: dict[str, dict]) -> dict:
    """The arithmetic candidate to distil on: among those that qualify on dev, the largest gap P_full - P_sharded
    (ties: fewer shards); if none qualifies, the largest gap, with `qualified` False."""
    names = [n for n in ARITHMETIC if n in dev_views]
    ok = [n for n in names if qualifies(dev_views[n])]
    pick = max(ok or names, key=lambda n: (dev_views[n]["p_full"] - dev_views[n]["p_sharded"], -ARITHMETIC[n]))
    return {"rule": "qualifying arithmetic candidate with the largest dev gap P_full - P_sharded",
            "chosen": pick, "qualified": pick in ok, "numbers": {n: dev_views[n] for n in names}}  # fmt: skip


def choose_config(before: dict, after: dict[str, dict], margin: float) -> dict:
    """The training configuration from the dev grid: among the configurations keeping P_full and P_concat within
    `margin` of `before`, the highest P_sharded; if none keeps both, the smallest worst drop. Ties: grid order."""
    eps = 1e-9
    order = {name: i for i, name in enumerate(after)}

    def drop(name):
        return max(before["p_full"] - after[name]["p_full"], before["p_concat"] - after[name]["p_concat"])

    keep = [n for n in after if drop(n) <= margin + eps]
    if keep:
        pick = max(keep, key=lambda n: (after[n]["p_sharded"], -order[n]))
    else:
        pick = min(after, key=lambda n: (drop(n), order[n]))
    return {"rule": f"highest dev P_sharded among configurations keeping dev P_full and P_concat within "
                    f"{margin:.2f} of the start model (none keeping: smallest worst drop)",
            "chosen": pick, "overrides": GRID[pick], "kept": keep, "before": before, "numbers": after,
            "grid": GRID, "seed": SETTINGS["vasd"]["grid_seed"]}  # fmt: skip


def _recorded_mismatch(task: str, start_model: str) -> str | None:
    """Why the recorded `vasd_config` does not apply to this run (None if it does): it was chosen on one task's dev
    tasks with one start model and one grid."""
    rec = repro.recorded_choice("vasd_config")
    ours = {"task": task, "start_model": start_model, "grid": GRID}
    wrong = [f"{key} {rec.get(key)!r}, this run {value!r}" for key, value in ours.items() if rec.get(key) != value]
    return f"recorded for {'; '.join(wrong)}" if wrong else None


def recorded_config(task: str, start_model: str) -> dict | None:
    """The configuration recorded in reproduce/dev_choices.json (`vasd_config`, with `recorded` naming its commit and
    file), or None with a warning when it was made for another task, start model or grid (then the run chooses)."""
    try:
        mismatch = _recorded_mismatch(task, start_model)
    except repro.StepError as exc:
        mismatch = str(exc)
    if mismatch:
        print(f"warning: vasd: the recorded training configuration does not apply ({mismatch}); choosing it in this "
              "run", file=sys.stderr, flush=True)  # fmt: skip
        return None
    return repro.recorded_choice("vasd_config")


# ---------------------------------------------------------------------------------------------- the part


def _train(kind: str, start, task_steps: int, config: list[str], seed: int, out: Path, logs: Path, name: str) -> Path:
    overrides = [f"model_name_or_path={start}", f"synthetic_task_steps={task_steps}", f"seed={seed}",
                 *SETTINGS["vasd"]["overrides"], *config, *KINDS[kind]]  # fmt: skip
    return repro.train(SETTINGS["vasd"]["recipe"], overrides, out / "train" / name, logs / f"train-{name}.log")


def _train_summary(model_dir: Path) -> dict:
    for name in ("eval_summary.json", "train_summary.json"):
        if (model_dir / name).exists():
            return repro.read_json(model_dir / name)
    return {}


def run(out: Path) -> Section:
    out = Path(out).resolve()
    logs, data = out / "logs", out / "data"
    c, ev, v = SETTINGS["candidates"], SETTINGS["eval"], SETTINGS["vasd"]
    seen: dict[str, list[str]] = {}  # which task ids each choice read (the test checks none is a test task)

    # 1. start model: the candidates on dev with the base model
    base_items = {name: family_tasks(name, "dev", c["base_n"]) for name in CANDIDATES}
    start_choice = choose_start(candidates_lic(repro.MODEL, base_items, "dev", out / "dev" / "candidates-base",
                                               logs / "dev.log", c["base_max_new_tokens"]))  # fmt: skip
    seen["start"] = sorted(i[0] for items in base_items.values() for i in items)
    start = sft(out, logs) if start_choice["sft"] else repro.MODEL
    start_model = "sft" if start_choice["sft"] else "base"

    # 2. task: both arithmetic candidates on dev with the start model
    dev_items = {name: family_tasks(name, "dev", c["dev_n"]) for name in ARITHMETIC}
    task_choice = choose_task(candidates_lic(start, dev_items, "dev", out / "dev" / "candidates-start",
                                             logs / "dev.log", ev["max_new_tokens"]))  # fmt: skip
    seen["task"] = sorted(i[0] for items in dev_items.values() for i in items)
    task = task_choice["chosen"]
    steps = ARITHMETIC[task]

    # 3. the training configuration: the dev grid (VASD, grid seed) on the chosen task's dev tasks (SCALE=gpu, or
    # when the recorded choice does not apply); at SCALE=cpu the choice recorded by an earlier run on the same tasks
    models: dict[tuple, Path] = {}
    config_choice = None if CHOOSE_IN_RUN else recorded_config(task, start_model)
    if config_choice is None:
        dev_file = write_lic_file(dev_items[task], data / f"dev-{task}.json")
        dev_after = {}
        for name, config in GRID.items():
            model = _train("vasd", start, steps, config, v["grid_seed"], out, logs, f"grid-{name}")
            result = lic(model, dev_file, out / "dev" / f"grid-{name}", logs / "dev.log", c["dev_n"],
                         ev["max_new_tokens"])  # fmt: skip
            seen[f"grid {name}"] = sorted(result["outcomes"]["full"])
            dev_after[name] = views(result)
        before = task_choice["numbers"][task]
        config_choice = choose_config(before, dev_after, v["keep_margin"])
        if not CHOOSE_IN_RUN:
            config_choice["recorded_not_used"] = _recorded_mismatch_text(task, start_model)
    config = config_choice["overrides"]

    # 4. VASD and the control at every seed with the chosen configuration (the grid's run at the grid seed is the
    # same training call as VASD's at that seed, so it is trained once)
    for kind in KINDS:
        for seed in seeds_of(kind):
            if kind == "vasd" and seed == v["grid_seed"] and "recorded" not in config_choice:
                models[kind, seed] = out / "train" / f"grid-{config_choice['chosen']}"
            else:
                models[kind, seed] = _train(kind, start, steps, config, seed, out, logs, f"{kind}-seed{seed}")

    # 5. test: scored once, after every choice
    test_items = family_tasks(task, "test", ev["test_n"])
    test_file = write_lic_file(test_items, data / f"test-{task}.json")
    scored = {"before": lic(start, test_file, out / "test" / "before", logs / "test.log", ev["test_n"],
                            ev["max_new_tokens"])}  # fmt: skip
    for (kind, seed), model in models.items():
        scored[kind, seed] = lic(model, test_file, out / "test" / f"{kind}-seed{seed}", logs / "test.log",
                                 ev["test_n"], ev["max_new_tokens"])  # fmt: skip
    s = ev["sampled"]
    first = seeds_of("vasd")[0]
    sampled = {"before": lic(start, test_file, out / "test_sampled" / "before", logs / "test.log", s["n"],
                             ev["max_new_tokens"], sampled=True),
               "after": lic(models["vasd", first], test_file, out / "test_sampled" / f"vasd-seed{first}",
                            logs / "test.log", s["n"], ev["max_new_tokens"], sampled=True)}  # fmt: skip
    training = {f"{kind}-seed{seed}": _train_summary(path) for (kind, seed), path in models.items()}
    measured = {
        "split": {"dev": sorted({i[0] for items in [*base_items.values(), *dev_items.values()] for i in items}),
                  "test": [i[0] for i in test_items]},
        "choices": {"start": start_choice, "task": task_choice, "config": config_choice}, "seen": seen,
        "start_model": start_model,
        "test": {key: r["outcomes"] for key, r in scored.items()},
        "test_views": {key: views(r) for key, r in scored.items()},
        "sampled": {key: r["modes"] for key, r in sampled.items()},
        "training": training,
    }  # fmt: skip
    return section(measured)


def _recorded_mismatch_text(task: str, start_model: str) -> str:
    try:
        return _recorded_mismatch(task, start_model) or "not recorded"
    except repro.StepError as exc:
        return str(exc)


def estimated_seconds(settings: dict = SETTINGS, choose_in_run: bool | None = None) -> float:
    """The part's wall time from `settings["seconds"]` (one process at a time on 2 cores), with the dev grid run in
    the run or read from dev_choices.json (`choose_in_run` False; default: `CHOOSE_IN_RUN`)."""
    choose_in_run = CHOOSE_IN_RUN if choose_in_run is None else choose_in_run
    t, c, ev, v = settings["seconds"], settings["candidates"], settings["eval"], settings["vasd"]
    steps = int(dict(item.split("=", 1) for item in v["overrides"]).get("max_steps", v["recipe_values"]["max_steps"]))
    lic_s = lambda n: t["lic_load"] + n * t["lic_task"]  # noqa: E731
    vasd = t["train_load"] + steps * t["vasd_step"]
    control = t["train_load"] + steps * t["self_sft_step"]
    grid = len(v["grid"]) * (vasd + lic_s(c["dev_n"])) if choose_in_run else 0
    n_vasd = len(v["seeds"]) - (1 if choose_in_run else 0)
    candidates = len(c["tasks"]) * lic_s(c["base_n"]) + len(c["update_steps"]) * lic_s(c["dev_n"])
    test = (1 + len(v["seeds"]) + len(v["control_seeds"])) * lic_s(ev["test_n"])
    sampled = 2 * (t["lic_load"] + ev["sampled"]["n"] * t["lic_sampled_task"])
    return candidates + t["sft"] + grid + n_vasd * vasd + len(v["control_seeds"]) * control + test + sampled
