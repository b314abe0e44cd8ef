"""Collaboration post-training (Table 2) with controls: three collab-SFT data arms and follow-up RL from SmolLM2.

`run` splits the data (held out, dev, training), probes the base model on the held-out contexts and on IFBench items
outside the judge's fit, builds the three SFT arms of the same size (`real`, `template_unfiltered`,
`template_filtered`), chooses the learning rate and steps on dev (or reads the recorded choice at SCALE=cpu), trains
each arm and follow-up RL at the chosen point once per training seed (`seeds`; the base model is one model), probes
every trained model after the base model's held-out and IFBench answers, and hands what it measured to
`collab_report.build_section`. Seed 0, the seed the blind labels were made on, keeps the one-seed folder names
(`sft_real`, `probe_real`, `rl/lr6e-05`); seed 1 is `sft_real_seed1`, `probe_real_seed1`, `rl/lr6e-05_seed1`. Every
step resumes: fic commands in their `--out` folders, `repro.train` skips a saved model. Settings: `collab_settings`
(`reproduce/settings/collab.json`); why the part is set up this way and what it costs: `reproduce/results/README.md`,
"How the collab part is set up".
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import repro
from collab_report import build_section
from collab_settings import (
    ARMS,
    CHOOSE_IN_RUN,
    IFBENCH,
    LABELLED_SEED,
    SETTINGS,
    TRAINING_JUDGE,
    point_key,
    run_name,
    seed_overrides,
    seeds,
)
from heldout import mt_bench_heldout_ids

TITLE = "Collaboration post-training (Table 2): collab SFT data arms and follow-up RL, with controls"


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


def judge_fitted() -> set[str]:
    """Prompt hashes of the items the judge was fitted on (`fic.judges.provenance`): dev items stay outside them."""
    from fic.judges import make_judge
    from fic.judges.provenance import judge_provenance

    return set(judge_provenance(make_judge(repro.JUDGE)).get("fitted_items") or ())


def _mt_bench_messages(row: dict) -> list[dict]:
    return [{"role": "user", "content": row["turns"][0]}]


def split_data(data: Path) -> dict[str, Path]:
    """Held-out, dev and training copies of HealthBench and MT-Bench under `data/` (file names say the split)."""
    from fic.judges.provenance import prompt_hash

    hb = repro.read_jsonl(repro.SHARED / "healthbench" / "oss_eval_first30.jsonl")
    multi = [r for r in hb if len(r["prompt"]) > 1]
    single = [r for r in hb if len(r["prompt"]) == 1]
    hb_dev_ids = set(random.Random(SETTINGS["seed"]).sample(sorted(r["prompt_id"] for r in single),
                                                            SETTINGS["dev"]["healthbench_single_turn"]))  # fmt: skip
    mtb = repro.read_jsonl(repro.SHARED / "mt_bench" / "question.jsonl")
    held_ids = mt_bench_heldout_ids(mtb)
    references = {
        r["question_id"] for r in repro.read_jsonl(repro.SHARED / "mt_bench" / "reference_answer_gpt-4.jsonl")
    }
    fitted = judge_fitted()
    # Dev MT-Bench: training questions with no reference answer (no real conversation to train on), outside the fit.
    dev_ids = {r["question_id"] for r in mtb if r["question_id"] not in held_ids and r["question_id"] not in references
               and not r.get("reference") and prompt_hash(_mt_bench_messages(r)) not in fitted}  # fmt: skip
    paths = {
        "hb_test": _write(data / "healthbench_multiturn" / "test.jsonl", multi),
        "hb_train": _write(data / "healthbench_singleturn" / "train.jsonl",
                           [r for r in single if r["prompt_id"] not in hb_dev_ids]),
        "hb_dev": _write(data / "healthbench_singleturn_dev" / "dev.jsonl",
                         [r for r in single if r["prompt_id"] in hb_dev_ids]),
        "mtb_test": _write(data / "mt_bench_heldout" / "test.jsonl", [r for r in mtb if r["question_id"] in held_ids]),
        "mtb_dev": _write(data / "mt_bench_dev" / "dev.jsonl", [r for r in mtb if r["question_id"] in dev_ids]),
        "mtb_train": _write(data / "mt_bench_train" / "train.jsonl",
                            [r for r in mtb if r["question_id"] not in held_ids | dev_ids]),
    }  # fmt: skip
    # Training contexts cost prefill and training tokens on 2 cores: the shortest GSM8K-train items, in file order.
    gsm8k = repro.read_jsonl(repro.SHARED / "gsm8k" / "train.jsonl")
    short = sorted(range(len(gsm8k)), key=lambda i: (len(gsm8k[i]["question"]) + len(gsm8k[i]["answer"]), i))
    keep = sorted(short[: SETTINGS["gsm8k_train_short"]])
    paths["gsm8k_train"] = _write(data / "gsm8k_short" / "train.jsonl", [gsm8k[i] for i in keep])
    # MT-Bench's GPT-4 reference answers, beside the training questions (real conversations need them).
    shutil.copy(repro.SHARED / "mt_bench" / "reference_answer_gpt-4.jsonl", paths["mtb_train"].parent)
    return paths


def heldout_specs(paths: dict[str, Path]) -> list[str]:
    return [f"healthbench:{paths['hb_test']}", f"mt_bench:{paths['mtb_test']}"]


def dev_specs(paths: dict[str, Path]) -> list[str]:
    return [f"healthbench:{paths['hb_dev']}", f"mt_bench:{paths['mtb_dev']}"]


def dev_contexts(paths: dict[str, Path]) -> dict[str, int]:
    return {d: len(repro.read_jsonl(paths[k])) for d, k in (("healthbench", "hb_dev"), ("mt_bench", "mtb_dev"))}


def template_specs(paths: dict[str, Path]) -> list[str]:
    return [f"gsm8k:{paths['gsm8k_train']}", f"healthbench:{paths['hb_train']}"]


def _until_followup(messages: list[dict]) -> list[dict]:
    """The conversation up to its last user turn that follows an answer (a trailing answer carries no loss)."""
    roles = [m["role"] for m in messages]
    last = max(i for i in range(1, len(roles)) if roles[i] == "user" and roles[i - 1] == "assistant")
    return messages[: last + 1]


def real_arm(paths: dict[str, Path]) -> list[dict]:
    """Real follow-ups of training items only: MT-Bench second turns after the reference answer (training questions
    with a reference), and multi-turn HealthBench training items (none here: every multi-turn item is held out)."""
    from fic.data import load_source
    from fic.data.followups import real_conversations

    rows, _ = real_conversations(load_source(f"mt_bench:{paths['mtb_train']}"))
    return [{**r, "messages": _until_followup(r["messages"])} for r in rows]


def _rank(key: str) -> str:
    return hashlib.sha256(f"{SETTINGS['seed']}:{key}".encode()).hexdigest()


def template_contexts(paths: dict[str, Path]) -> list[dict]:
    """The template arms' contexts (GSM8K-train and single-turn HealthBench training items with their reference
    answers), in a fixed seeded order; `fic build-followups` judges the same contexts (same loader, same ids)."""
    from fic.data.followups import contexts_from_records, load_records

    return sorted(contexts_from_records(load_records(template_specs(paths)), "data"), key=lambda c: _rank(c["id"]))


def template_arms(contexts: list[dict], judged: list[dict], n: int) -> dict[str, list[dict]]:
    """`template_unfiltered` and `template_filtered` on the same first `n` contexts (in `contexts`' order) that the
    judge kept a follow-up for: the unfiltered one takes the first of the context's shuffled template candidates,
    the filtered one the candidate the judge called genuine with most confidence (`judged`: `fic build-followups`
    rows)."""
    from fic.data.followups import template_followups

    kept = {r["id"].rsplit("#", 1)[0]: r for r in judged}
    arms: dict[str, list[dict]] = {"template_unfiltered": [], "template_filtered": []}
    for context in contexts:
        if len(arms["template_filtered"]) == n:
            break
        if context["id"] not in kept:
            continue
        candidate = template_followups(context["messages"], SETTINGS["template_candidates"], SETTINGS["seed"])[0]
        arms["template_unfiltered"].append({"id": context["id"], "source": context["source"], "origin": "template",
                                            "messages": [*context["messages"], {"role": "user", "content": candidate}]})  # fmt: skip
        arms["template_filtered"].append({**kept[context["id"]], "id": context["id"]})
    if len(arms["template_filtered"]) < n:
        raise repro.StepError(f"template arms: the judge kept a follow-up on {len(arms['template_filtered'])} "
                              f"contexts, fewer than the real arm's {n} rows; add contexts (gsm8k_train_short)")  # fmt: skip
    return arms


def mixed_arm(arms: dict[str, list[dict]], n: int) -> list[dict]:
    """`n` rows for the hyperparameter grid: a third from each arm (different contexts for the two template arms), so
    the choice favours no arm."""
    cuts = [round(i * n / len(ARMS)) for i in range(len(ARMS) + 1)]
    return [row for i, arm in enumerate(ARMS) for row in arms[arm][cuts[i] : cuts[i + 1]]]


def build_arms(out: Path, paths: dict[str, Path], log: Path) -> dict:
    """The three arms and the grid's mix as `conversations` files under `data/arms/`; returns {arm: {path, rows,
    sources}}."""
    real = real_arm(paths)
    judged_dir = out / "data" / "template_judged"
    if not (judged_dir / "followups.jsonl").exists():
        repro.fic(["build-followups", *[a for spec in template_specs(paths) for a in ("--contexts", spec)],
                   "--candidates", "templates", "--samples", SETTINGS["template_candidates"], "--keep", 1,
                   "--responses", "data", "--judge", TRAINING_JUDGE, "--contrast", "--seed", SETTINGS["seed"], "--out", judged_dir],
                  log)  # fmt: skip
    arms = {
        "real": real,
        **template_arms(template_contexts(paths), repro.read_jsonl(judged_dir / "followups.jsonl"), len(real)),
    }
    arms["mixed"] = mixed_arm(arms, len(real))
    return {
        name: {"path": _write(out / "data" / "arms" / name / "train.jsonl", rows), "rows": len(rows),
               "sources": dict(Counter(r["source"] for r in rows)), "ids": [r["id"] for r in rows]}
        for name, rows in arms.items()
    }  # fmt: skip


def _probe(folder: Path, model: str, datasets: list[str], log: Path, seed_from: Path | None = None,
           samples: int | None = None) -> dict:  # fmt: skip
    """`fic probe` of `model` into `folder`; `seed_from`: a probe folder whose greedy answers (responses.jsonl) become
    this probe's contexts, so every model is judged after the same answers."""
    if seed_from is not None and not (folder / "responses.jsonl").exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(seed_from / "responses.jsonl", folder / "responses.jsonl")
    p = SETTINGS["probe"]
    repro.fic(["probe", "--model", model, "--datasets", ",".join(datasets), "--temperatures",
               ",".join(map(str, p["temperatures"])), "--samples", samples or p["samples"], "--judge", repro.JUDGE,
               "--max-new-tokens", p["max_new_tokens"], "--response-tokens", p["response_tokens"],
               "--responses", "model", "--batch-size", p["batch_size"], "--limit", 100, "--seed", SETTINGS["seed"],
               "--out", folder], log)  # fmt: skip
    return repro.read_json(folder / "summary.json")


def ifbench_spec() -> str:
    return f"{IFBENCH}:{repro.SHARED / 'ifbench' / 'IFBench_test.jsonl'}"


def _ifbench(out: Path, name: str, model: str, log: Path) -> dict:
    """The held-out probe's settings on the first `ifbench.limit` IFBench items outside the judge's fit, into
    `ifbench_NAME`: the base model answers them once, and every trained model is probed after those answers (as
    `_probe` does). Its own folder, so the held-out probes, their blind labels and their pooled rates stay as they
    were."""
    p = SETTINGS["probe"]
    folder = out / f"ifbench_{name}"
    base = out / "ifbench_base"
    if name != "base" and not (folder / "responses.jsonl").exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(base / "responses.jsonl", folder / "responses.jsonl")
    repro.fic(["probe", "--model", model, "--datasets", ifbench_spec(), "--temperatures",
               ",".join(map(str, p["temperatures"])), "--samples", p["samples"], "--judge", repro.JUDGE,
               "--max-new-tokens", p["max_new_tokens"], "--response-tokens", p["response_tokens"],
               "--responses", "model", "--batch-size", p["batch_size"], "--limit", SETTINGS["ifbench"]["limit"],
               "--outside-judge-fit", "--seed", SETTINGS["seed"], "--out", folder], log)  # fmt: skip
    return repro.read_json(folder / "summary.json")


def _gsm8k(out: Path, name: str, model: str, log: Path) -> dict:
    """GSM8K test accuracy of the model's own greedy answers (the probe's `accuracy`; its user turns are not used)."""
    g = SETTINGS["gsm8k"]
    folder = out / f"gsm8k_{name}"
    repro.fic(["probe", "--model", model, "--datasets", f"gsm8k:{repro.SHARED / 'gsm8k' / 'test.jsonl'}",
               "--temperatures", "0", "--samples", 1, "--judge", repro.JUDGE, "--max-new-tokens", 8,
               "--response-tokens", g["response_tokens"], "--responses", "model", "--batch-size", g["limit"],
               "--limit", g["limit"], "--outside-judge-fit", "--no-generic-floor", "--out", folder], log)  # fmt: skip
    return repro.read_json(folder / "summary.json")["accuracy"]["gsm8k"]


def sft_overrides(
    paths: dict[str, Path], arm_path: Path, lr: float, steps: int, save_at: int | None = None
) -> list[str]:
    """The SFT recipe's overrides for one arm (or the grid's mix) at one learning rate and step count; `save_at`: also
    save the model after that many steps (a grid point of the constant schedule)."""
    held = f"eval.datasets=[{','.join(heldout_specs(paths))}]"
    out = [held, f"train_datasets=[conversations:{arm_path}]", *SETTINGS["sft"]["overrides"],
           f"learning_rate={lr}", f"max_steps={steps}"]  # fmt: skip
    if save_at:
        out += ["save_strategy=steps", f"save_steps={save_at}", "save_only_model=true"]
    return out


def rl_overrides(paths: dict[str, Path], lr: float) -> list[str]:
    return [f"eval.datasets=[{','.join(heldout_specs(paths))}]", f"contexts=[gsm8k:{paths['gsm8k_train']}]",
            *SETTINGS["rl"]["overrides"], f"learning_rate={lr}"]  # fmt: skip


def _train(recipe: str, overrides: list[str], output_dir: Path, log: Path) -> Path:
    """`train.py --plan` with the held-out sets as eval data (it fails on any train/held-out overlap), then training
    without in-training evaluation (the probes below measure before and after)."""
    repro.plan(recipe, overrides, log)
    return repro.train(recipe, [*overrides, "eval.datasets=[]"], output_dir, log)


def grid_points() -> list[tuple[float, int]]:
    g = SETTINGS["sft"]["grid"]
    return [(lr, steps) for lr in g["learning_rate"] for steps in g["max_steps"]]


def grid_model(out: Path, lr: float, steps: int) -> Path:
    """The grid point's model: the run of the longest step count, or its checkpoint at `steps`."""
    run = out / "grid" / f"lr{lr:g}"
    return run if steps == max(SETTINGS["sft"]["grid"]["max_steps"]) else run / f"checkpoint-{steps}"


def dev_point(summary: dict) -> dict:
    """One grid point's dev numbers from its probe summary: pooled raw rate, generic floor and their difference."""
    raw, floor = summary["overall"]["raw"], summary["overall"].get("generic_floor") or {}
    return {"raw": repro.rate_only(raw), "generic_floor": repro.rate_only(floor) if floor else None,
            "score": raw["rate"] - (floor.get("rate") or 0.0)}  # fmt: skip


def choose(points: list[dict]) -> dict:
    """The grid point with the highest dev score (`dev_point`); ties: fewer steps, then the lower learning rate."""
    return max(points, key=lambda p: (round(p["score"], 9), -p.get("max_steps", 0), -p["learning_rate"]))


RECORDED_KEYS = {
    "collab_sft": ("grid", "criterion", "dev", "trained_on", "points", "chosen"),
    "collab_rl": ("grid", "criterion", "overrides", "points", "chosen"),
}


def recorded_choice(key: str) -> dict:
    """The choice an earlier full run made on dev (`repro.recorded_choice`: `collab_sft` as `tune` returned it,
    `collab_rl` as `tune_rl` did, without model paths). Refused (StepError) when a key is missing or the recorded grid
    is not this run's, so that a stale choice is never trained."""
    rec = repro.recorded_choice(key)
    chosen = rec.get("chosen") if isinstance(rec.get("chosen"), dict) else {}
    needed = ("learning_rate", "score", *(("max_steps",) if key == "collab_sft" else ()))
    missing = [k for k in RECORDED_KEYS[key] if k not in rec] + [f"chosen.{k}" for k in needed if k not in chosen]
    if missing:
        raise repro.StepError(f"collab: the recorded dev choice {key!r} in {repro.DEV_CHOICES} lacks "
                              f"{', '.join(missing)}; run with SCALE=gpu to make the choice inside the run")  # fmt: skip
    settings = SETTINGS["sft" if key == "collab_sft" else "rl"]
    grid = rec["grid"]
    wrong = [f"grid {grid} (this run's: {settings['grid']})"] if grid != settings["grid"] else []
    if key == "collab_rl" and rec["overrides"] != settings["overrides"]:
        wrong.append(f"overrides {rec['overrides']} (this run's: {settings['overrides']})")
    if chosen["learning_rate"] not in grid.get("learning_rate", []) or (
        "max_steps" in chosen and chosen["max_steps"] not in grid.get("max_steps", [])
    ):
        wrong.append(f"chosen point {point_key(chosen)} outside its grid {grid}")
    if wrong:
        raise repro.StepError(f"collab: the recorded dev choice {key!r} in {repro.DEV_CHOICES} does not apply to this "
                              f"run: {'; '.join(wrong)}; run with SCALE=gpu to make the choice inside the run")  # fmt: skip
    return rec


def recorded_tuning(paths: dict[str, Path]) -> dict:
    """`tune`'s result as recorded (`collab_sft`). Its dev file paths are the recorded run's (relative to its clone), so
    they move under `recorded`; a warning if this run's dev split has other sizes than the recorded one."""
    rec = recorded_choice("collab_sft")
    dev = dict(rec["dev"])
    recorded = {**rec["recorded"], "dev_datasets": dev.pop("datasets", None),
                "note": "dev_datasets are paths of the recorded run's output folder, not of this run"}  # fmt: skip
    ours = dev_contexts(paths)
    if ours != dev.get("contexts"):
        print(f"warning: collab: this run's dev split has {ours} contexts, the recorded choice was made on "
              f"{dev.get('contexts')}", file=sys.stderr, flush=True)  # fmt: skip
    return {**rec, "dev": dev, "recorded": recorded}


def tune(out: Path, paths: dict[str, Path], arms: dict, logs: Path) -> dict:
    """The SFT learning rate and steps on the dev contexts: the grid (`sft.grid`) trained on the mixed arm (one run per
    rate, its shorter step counts as checkpoints of the constant schedule), each point probed on dev after the base
    model's dev answers, the best dev score chosen (`choose`): {grid, dev, points, chosen}. Reads no held-out file. At
    SCALE=cpu (not `CHOOSE_IN_RUN`) the recorded choice (`recorded_tuning`), with nothing trained or probed."""
    if not CHOOSE_IN_RUN:
        return recorded_tuning(paths)
    dev = dev_specs(paths)
    base = _probe(out / "dev" / "probe_base", repro.MODEL, dev, logs / "dev_probe_base.log",
                  samples=SETTINGS["dev"]["samples"])  # fmt: skip
    longest = max(SETTINGS["sft"]["grid"]["max_steps"])
    shortest = min(SETTINGS["sft"]["grid"]["max_steps"])
    points = []
    for lr, steps in grid_points():
        if steps == longest:
            _train(SETTINGS["sft_recipe"],
                   sft_overrides(paths, arms["mixed"]["path"], lr, longest, save_at=shortest if shortest < longest else None),
                   out / "grid" / f"lr{lr:g}", logs / f"train_grid_lr{lr:g}.log")  # fmt: skip
    for lr, steps in grid_points():
        name = f"lr{lr:g}_steps{steps}"
        summary = _probe(out / "dev" / f"probe_{name}", str(grid_model(out, lr, steps)), dev,
                         logs / f"dev_probe_{name}.log", seed_from=out / "dev" / "probe_base",
                         samples=SETTINGS["dev"]["samples"])  # fmt: skip
        points.append({"learning_rate": lr, "max_steps": steps, **dev_point(summary)})
    return {"grid": SETTINGS["sft"]["grid"], "criterion": SETTINGS["sft"]["criterion"],
            "dev": {"datasets": dev, "contexts": dev_contexts(paths), "samples": SETTINGS["dev"]["samples"],
                    "base": dev_point(base)},
            "trained_on": {"rows": arms["mixed"]["rows"], "sources": arms["mixed"]["sources"],
                           "note": "a third of each arm's rows"},
            "points": points, "chosen": choose(points)}  # fmt: skip


def tune_rl(out: Path, paths: dict[str, Path], logs: Path) -> dict:
    """Follow-up RL's learning rate on the dev contexts: one RL run per rate of `rl.grid` (out/rl/lrRATE), each probed
    on dev after the base model's dev answers, the best dev score chosen (`choose`); {grid, criterion, points, chosen},
    where `chosen` also names the run's folder. Reads no held-out file. At SCALE=cpu (not `CHOOSE_IN_RUN`) only the
    recorded choice's rate (`collab_rl`) is trained, in the same folder with the same overrides, and nothing is probed
    on dev."""
    if not CHOOSE_IN_RUN:
        rec = recorded_choice("collab_rl")
        lr = rec["chosen"]["learning_rate"]
        model = _train(SETTINGS["rl_recipe"], rl_overrides(paths, lr), rl_folder(out, lr, LABELLED_SEED),
                       logs / f"train_rl_lr{lr:g}.log")  # fmt: skip
        return {**rec, "chosen": {**rec["chosen"], "model": str(model)}}
    dev, points = dev_specs(paths), []
    for lr in SETTINGS["rl"]["grid"]["learning_rate"]:
        model = _train(SETTINGS["rl_recipe"], rl_overrides(paths, lr), rl_folder(out, lr, LABELLED_SEED),
                       logs / f"train_rl_lr{lr:g}.log")  # fmt: skip
        summary = _probe(out / "dev" / f"probe_rl_lr{lr:g}", str(model), dev, logs / f"dev_probe_rl_lr{lr:g}.log",
                         seed_from=out / "dev" / "probe_base", samples=SETTINGS["dev"]["samples"])  # fmt: skip
        points.append({"learning_rate": lr, "model": str(model), **dev_point(summary)})
    return {**SETTINGS["rl"], "points": points, "chosen": choose(points)}


def rl_folder(out: Path, lr: float, seed: int) -> Path:
    """Follow-up RL's run at one rate and seed: `rl/lrRATE` at seed 0 (the folder the dev choice trains), else
    `rl/lrRATE_seedN`."""
    return out / "rl" / (f"lr{lr:g}" if seed == LABELLED_SEED else f"lr{lr:g}_seed{seed}")


def run(out: Path) -> repro.Section:
    out = Path(out)
    logs = out / "logs"
    trained_seeds = seeds()  # refused in one line before anything runs
    paths = split_data(out / "data")
    held = heldout_specs(paths)

    # The base measurements first (held out, then IFBench); then the choice on dev; then each arm at the chosen point
    # and RL, seed 0 first (the labelled seed), then the other seeds; GSM8K last.
    probes = {"base": _probe(out / "probe_base", repro.MODEL, held, logs / "probe_base.log")}
    ifbench = {"base": _ifbench(out, "base", repro.MODEL, logs / "ifbench_base.log")}
    arms = build_arms(out, paths, logs / "build_followups.log")
    tuning = tune(out, paths, arms, logs)
    lr, steps = tuning["chosen"]["learning_rate"], tuning["chosen"]["max_steps"]
    models = {"base": repro.MODEL}
    rl_tuning: dict = {}
    for seed in trained_seeds:
        for arm in ARMS:
            name = run_name(arm, seed)
            models[name] = str(_train(SETTINGS["sft_recipe"],
                                      [*sft_overrides(paths, arms[arm]["path"], lr, steps), *seed_overrides(seed)],
                                      out / f"sft_{name}", logs / f"train_{name}.log"))  # fmt: skip
            probes[name] = _probe(out / f"probe_{name}", models[name], held, logs / f"probe_{name}.log",
                                  seed_from=out / "probe_base")  # fmt: skip
            ifbench[name] = _ifbench(out, name, models[name], logs / f"ifbench_{name}.log")
        name = run_name("rl", seed)
        if seed == LABELLED_SEED:  # the dev choice trains seed 0 (SCALE=cpu: the recorded rate only)
            rl_tuning = tune_rl(out, paths, logs)
            models[name] = rl_tuning["chosen"]["model"]
        else:
            rate = rl_tuning["chosen"]["learning_rate"]
            models[name] = str(_train(SETTINGS["rl_recipe"], [*rl_overrides(paths, rate), *seed_overrides(seed)],
                                      rl_folder(out, rate, seed), logs / f"train_rl_lr{rate:g}_seed{seed}.log"))  # fmt: skip
        probes[name] = _probe(out / f"probe_{name}", models[name], held, logs / f"probe_{name}.log",
                              seed_from=out / "probe_base")  # fmt: skip
        ifbench[name] = _ifbench(out, name, models[name], logs / f"ifbench_{name}.log")
    acc = {k: _gsm8k(out, k, models[k], logs / f"gsm8k_{k}.log") for k in SETTINGS["gsm8k"]["models"]}
    return build_section(out, paths, probes, acc, arms, tuning, rl_tuning,
                         ifbench=ifbench, model_paths=models, seeds=trained_seeds)  # fmt: skip
