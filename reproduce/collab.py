"""Collaboration post-training (Table 2) with controls: three collab-SFT data arms and follow-up RL from SmolLM2.

Steps (each resumes: fic commands in their `--out` folders, `train` skips a saved model):

1. Split the data (`data/`). Held out (reported, never used for a choice): HealthBench's 9 multi-turn items and 20
   MT-Bench questions (4 per category of `HELDOUT_MTB_CATEGORIES`, outside the judge's fit). Dev (used only to
   choose the SFT learning rate and steps and RL's learning rate, steps 4 and 5): the MT-Bench training questions
   that have no reference answer (so no real conversation to train on) and are outside the judge's fit, plus
   `dev.healthbench_single_turn` single-turn HealthBench items. Training: the rest (MT-Bench questions with
   reference answers, the other single-turn HealthBench items, the shortest GSM8K-train items).
2. Base probe on the held-out contexts: the base model answers each held-out context once (greedy); those answers
   are copied into every later probe's `responses.jsonl`, so every model is judged after the same answers, with the
   same judge, temperature and seeds. Every probe also judges each turn after another context's answer (the generic
   floor, context swap).
3. Three SFT data arms of the same size (the real arm's size), trained with the same steps and learning rate:
   `real` (real follow-ups only: MT-Bench second turns of training questions after the GPT-4 reference answer, and
   the user turns of multi-turn HealthBench training items, of which this data has none: all 9 are held out),
   `template_unfiltered` (one template follow-up per context, "Why is it {x}?", "What do you mean by {w}?", drawn
   without a judge; `fic.data.followups`) and `template_filtered` (on the same contexts, the candidate the training
   judge (`TRAINING_JUDGE`, `strict`: fitted on SmolLM2's and trained models' turns alike), in its contrastive form,
   calls genuine with most confidence: genuine after this context's answer and not after another's,
   `fic.judges.contrast`). No follow-ups sampled from a model. Follow-up RL's reward comes from the same judge, also
   contrastive (the recipe's `reward_judge`, `reward_judge_contrast`); the probes judge every model plainly with the
   judge of rates (`repro.JUDGE`, `learned`), with the generic floor beside.
4. The learning rate and steps: a grid (`sft.grid`) trained on a mix of a third of each arm's rows, each point
   probed on the dev contexts (after the base model's answers there); the point with the highest dev genuine rate
   minus its dev generic floor is chosen (ties: fewer steps, then the lower rate). The schedule is constant, so
   the shorter point is a checkpoint of the longer run. The held-out contexts play no part in it. At SCALE=gpu
   (`CHOOSE_IN_RUN`) this runs inside the run. At SCALE=cpu, the default, it is not rerun (for time): the
   fresh-clone run at 7eebd76 made it on the same dev contexts (1e-4, 8 steps) and `reproduce/dev_choices.json`
   (`collab_sft`) records its numbers, which the report shows with that commit; no grid model is trained.
5. Each arm trained at the chosen point and probed on the held-out contexts. Follow-up RL: its learning rate
   chosen the same way (`rl.grid`: one RL run per rate, each probed on the dev contexts, the highest dev rate minus
   dev generic floor wins; ties: the lower rate); the chosen run is probed on the held-out contexts and reported as
   measured. At SCALE=cpu only the rate recorded in `dev_choices.json` (`collab_rl`: 6e-5) is trained, in the same
   folder with the same overrides (the model that run chose), and no RL model is probed on dev. GSM8K test accuracy
   of the base model at SCALE=gpu only (at SCALE=cpu the probe part reports the base model's GSM8K accuracy).
6. Calibrated rates: per model, `fic review PROBE_FOLDER --sample 30` (blind labels) then a rerun of the part's
   summary picks up `PROBE_FOLDER/labels.jsonl` (`collab.calibrated`); without labels it says so. Where the base
   model and a trained one are labelled, their calibrated difference paired by context
   (`collab.calibrated_differences`; "not estimable" under 10 labelled contexts, as HealthBench's 9 are) stands beside
   the judge's, and the targets are read off it: its lower end minus the model's rise in generic floor.

Time, measured in the fresh-clone `make reproduce` of 2026-12-02 (reproduce/results; 2 cores, on a day the machine
ran ~1.6x slower than the part-by-part check of the same code, where this part took 27 min):

    base held-out probe                                   4.0
    judge the template candidates (~1.9k, one process)    0.3
    base dev probe (24 contexts answered, 2 turns each)   1.3
    grid: 2 runs x 8 steps of the mixed rows              3.8 + 3.9 = 7.7   (+0.1 per `--plan`, every run)
    grid: 4 dev probes (answers copied, 2 turns each)     0.6 + 0.6 + 0.5 + 0.5 = 2.2
    arms at the chosen point (8 steps): real 4.8, templates 2.5 and 2.6
                                                          9.9
    held-out probes of 3 arms and RL (answers copied)     2.0 + 1.7 + 1.7 + 2.0 = 7.4
    follow-up RL: 2 learning rates x 8 GRPO steps         5.1 + 4.7 = 9.8
    RL dev probes (answers copied, 2 turns each)          2 x 0.6 = 1.2
    GSM8K accuracy (base, judge-filtered arm, RL)         0.9 + 0.5 + 0.8 = 2.2
    total (the sizes of that run, before the cuts below)  46.6 min, and 2.6 min for the second pass that picks up
                                                          the blind labels (every step resumed)

Training is the line that moved most against the earlier estimate (7.4 s a step at max_length 320): at max_length
512 an MT-Bench batch of the real arm took ~33 s a step that day. `truncation_mode=keep_end` (deprecated in TRL,
still supported) keeps every row's trained follow-up, so no arm loses rows to truncation (at keep_start and 320
tokens the earlier SFT lost 25 of its 201 rows).

Sizes dropped after that run, before any control, so the part fits ~35 min on such a slow day (every dropped size
read on dev or on a floor, never on held-out numbers): the grid's second learning rate 3e-4 (it scored lowest on dev
at both step counts: -3.9 min training, -1.0 min dev probes); follow-up RL at 4 steps per rate instead of the
recipe's 8 (-4.9 min; the grid moves up to 3e-5 and 6e-5, the same learning rate x steps as 1.5e-5 and 3e-5 at 8);
GSM8K accuracy for the base model only (-1.3 min: base scored 0/20, so a trained model cannot show a loss there).
Estimated at the slow day's speed: 46.6 - 11.1 = 35.5 min, plus ~2 min for the labels pass.

The fresh clone of 2026-12-03 (commit 7eebd76, a slower day) took 45.5 min for this part at those sizes. SCALE=cpu
now skips the in-run dev choices and GSM8K, at that day's speed: the base dev probe 1.5 min, the grid's training 5.1
(with its `--plan`) and its 2 dev probes 1.5, the RL run at the rate not chosen (3e-5) 3.3 (with its `--plan`), the 2
RL dev probes 0.8 + 0.9, GSM8K of the base model 1.3: 14.4 min, so ~31 min at that speed. SCALE=gpu runs them all.
The fresh clone at 95e5153 (a faster hour: reference step 3.34 s, `reproduce/speed.py`) ran the part at these sizes
in 20.1 min, the blind labels attaching in the run. With the contrastive filter and reward (2026-12-04), judging the
1,854 template candidates took 0.3 min as before (the contrast re-judges only the 967 it keeps genuine) and the two
template arms, RL and their probes 13.2 min. With the `strict` training judge (same day, `--redo collab`, one pass
from scratch) the whole part took 21.7 min and the labels pass 0.8; the strict judge, contrastively, kept a
follow-up on 297 of the 309 template contexts (0.3 min) and called 1,213 of the 1,854 candidates genuine.

Sizes dropped for the ~25 min first planned (before any control): the arms hold the real arm's 35 rows (not the 176 the
earlier single SFT trained on), 4 or 8 steps instead of 22, 2 dev turns per context, GSM8K accuracy not measured
for the two control arms. Each extra held-out sample per context adds ~0.25 min per model (5 models).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import heldout
import repro
from heldout import HELDOUT_MTB_CATEGORIES, mt_bench_heldout_ids

SCALE = repro.scale()
# SCALE=gpu chooses the SFT learning rate and steps and RL's learning rate on dev inside the run; SCALE=cpu reads the
# choices the fresh-clone run at 7eebd76 made on the same dev contexts (`repro.recorded_choice`: `collab_sft`, `collab_rl`).
CHOOSE_IN_RUN = repro.chooses_in_run()

TITLE = "Collaboration post-training (Table 2): collab SFT data arms and follow-up RL, with controls"

ARMS = ("real", "template_unfiltered", "template_filtered")
# The judge of the training signals (the filtered arm's filter, follow-up RL's reward; the recipes name it too).
TRAINING_JUDGE = "strict"
DATASETS = ("healthbench", "mt_bench")
NAMES = {
    "base": "SmolLM2 (base)", "real": "SFT: real follow-ups", "template_unfiltered": "SFT: template, unfiltered",
    "template_filtered": "SFT: template, judge-filtered", "rl": "follow-up RL",
}  # fmt: skip

SETTINGS = {
    "model": repro.MODEL,
    "scale": SCALE,
    "judge": repro.JUDGE,
    "judge_version": repro.judge_version(),
    "seed": heldout.SEED,
    "heldout": {"healthbench": "all multi-turn items of oss_eval_first30", "mt_bench_per_category": heldout.PER_CATEGORY,
                "mt_bench_categories": list(HELDOUT_MTB_CATEGORIES)},
    "dev": {"mt_bench": "training questions with no reference answer, outside the judge's fit",
            "healthbench_single_turn": 10, "samples": 2},
    "probe": {"temperatures": [0.7], "samples": 4, "max_new_tokens": 48, "response_tokens": 128, "batch_size": 32},
    # The base model only, at SCALE=gpu: it scored 0/20 in the run of 2026-12-02, so no trained model can show a loss
    # here. SCALE=cpu measures none (for time; the probe part reports the base model's GSM8K accuracy).
    "gsm8k": {"limit": 20, "response_tokens": 192, "items": "the first 20 test items outside the judge's fit",
              "models": ["base"] if SCALE == "gpu" else []},
    "gsm8k_train_short": 300,  # training contexts: the GSM8K-train items with the shortest question + answer
    "arms": list(ARMS),
    "template_candidates": 6,
    # The judge-filtered arm's filter and follow-up RL's reward: the `strict` judge, contrastively
    # (`fic.judges.contrast`): a turn also genuine after another context's answer is not kept / not rewarded. The
    # probes judge plainly with `repro.JUDGE` and report the generic floor beside every rate.
    "training_judge": {"kind": TRAINING_JUDGE, "contrast": True, "version": repro.judge_version(TRAINING_JUDGE)},
    "sft": {
        # Every arm: the same rows, steps and learning rate; no arm loses its trained turn to truncation (keep_end).
        "overrides": ["max_length=512", "truncation_mode=keep_end", "lr_scheduler_type=constant", "warmup_steps=0",
                      "dataset_limit=null", "followup_contexts=[]"],
        # One run at 1e-4 (its checkpoint at 4 steps is the other point): 3e-4 scored lowest on dev at both step counts
        # in the run of 2026-12-02 (4.2 and 12.5 points against 22.9 and 25.0), so it was dropped for time.
        "grid": {"learning_rate": [1.0e-4], "max_steps": [4, 8]},
        "criterion": "dev genuine rate minus dev generic floor; ties: fewer steps, then the lower learning rate",
    },
    # Follow-up RL: the recipe's values but half its steps (for time); only the learning rate is chosen, on the same
    # dev contexts. At half the steps the grid is 3e-5 (the dev choice at 8 steps in the run of 2026-12-02) and 6e-5
    # (the same learning rate x steps as 3e-5 at 8).
    "rl": {"grid": {"learning_rate": [3.0e-5, 6.0e-5]}, "overrides": ["max_steps=4"],
           "criterion": "dev genuine rate minus dev generic floor; ties: the lower learning rate"},
    "sft_recipe": "reproduce_collab_sft",
    "rl_recipe": "reproduce_followup_rl",
}  # fmt: skip
# The recipes' contents, so that a part folder trained with other recipe values is refused rather than resumed.
SETTINGS["recipe_sha256"] = {
    name: hashlib.sha256((repro.ROOT / "recipes" / f"{name}.yaml").read_bytes()).hexdigest()[:16]
    for name in (SETTINGS["sft_recipe"], SETTINGS["rl_recipe"])
}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


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

    hb = _rows(repro.SHARED / "healthbench" / "oss_eval_first30.jsonl")
    multi = [r for r in hb if len(r["prompt"]) > 1]
    single = [r for r in hb if len(r["prompt"]) == 1]
    hb_dev_ids = set(random.Random(SETTINGS["seed"]).sample(sorted(r["prompt_id"] for r in single),
                                                            SETTINGS["dev"]["healthbench_single_turn"]))  # fmt: skip
    mtb = _rows(repro.SHARED / "mt_bench" / "question.jsonl")
    held_ids = mt_bench_heldout_ids(mtb)
    references = {r["question_id"] for r in _rows(repro.SHARED / "mt_bench" / "reference_answer_gpt-4.jsonl")}
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
    gsm8k = _rows(repro.SHARED / "gsm8k" / "train.jsonl")
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
    arms = {"real": real, **template_arms(template_contexts(paths), _rows(judged_dir / "followups.jsonl"), len(real))}
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


def _gsm8k(out: Path, name: str, model: str, log: Path) -> dict:
    """GSM8K test accuracy of the model's own greedy answers (the probe's `accuracy`; its user turns are not used)."""
    g = SETTINGS["gsm8k"]
    folder = out / f"gsm8k_{name}"
    repro.fic(["probe", "--model", model, "--datasets", f"gsm8k:{repro.SHARED / 'gsm8k' / 'test.jsonl'}",
               "--temperatures", "0", "--samples", 1, "--judge", repro.JUDGE, "--max-new-tokens", 8,
               "--response-tokens", g["response_tokens"], "--responses", "model", "--batch-size", g["limit"],
               "--limit", g["limit"], "--outside-judge-fit", "--no-generic-floor", "--out", folder], log)  # fmt: skip
    return repro.read_json(folder / "summary.json")["accuracy"]["gsm8k"]


def _cell(summary: dict, dataset: str) -> dict | None:
    t = f"t{float(SETTINGS['probe']['temperatures'][0])}"
    return repro.rate_only(summary["genuine_rate"].get(dataset, {}).get(t, {}).get("none"))


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
        wrong.append(f"chosen point {_point_key(chosen)} outside its grid {grid}")
    if wrong:
        raise repro.StepError(f"collab: the recorded dev choice {key!r} in {repro.DEV_CHOICES} does not apply to this "
                              f"run: {'; '.join(wrong)}; run with SCALE=gpu to make the choice inside the run")  # fmt: skip
    return rec


def _point_key(point: dict) -> tuple:
    """A grid point's identity: its learning rate and (SFT) steps; a chosen RL point also carries its model path."""
    return point["learning_rate"], point.get("max_steps")


def recorded_tuning(paths: dict[str, Path]) -> dict:
    """`tune`'s result as recorded (`collab_sft`). Its dev file paths are the recorded run's (relative to its clone), so
    they move under `recorded`; a warning if this run's dev split has other sizes than the recorded one."""
    rec = recorded_choice("collab_sft")
    dev = dict(rec["dev"])
    recorded = {**rec["recorded"], "dev_datasets": dev.pop("datasets", None),
                "note": "dev_datasets are paths of the recorded run's output folder, not of this run"}  # fmt: skip
    ours = {d: len(_rows(paths[k])) for d, k in (("healthbench", "hb_dev"), ("mt_bench", "mtb_dev"))}
    if ours != dev.get("contexts"):
        print(f"warning: collab: this run's dev split has {ours} contexts, the recorded choice was made on "
              f"{dev.get('contexts')}", file=sys.stderr, flush=True)  # fmt: skip
    return {**rec, "dev": dev, "recorded": recorded}


def tune(out: Path, paths: dict[str, Path], arms: dict, logs: Path) -> dict:
    """The grid on dev contexts (module docstring, step 4): {grid, dev, points, chosen}. Reads no held-out file. At
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
            "dev": {"datasets": dev, "contexts": {d: len(_rows(paths[k])) for d, k in (("healthbench", "hb_dev"),
                                                                                       ("mt_bench", "mtb_dev"))},
                    "samples": SETTINGS["dev"]["samples"], "base": dev_point(base)},
            "trained_on": {"rows": arms["mixed"]["rows"], "sources": arms["mixed"]["sources"],
                           "note": "a third of each arm's rows"},
            "points": points, "chosen": choose(points)}  # fmt: skip


def tune_rl(out: Path, paths: dict[str, Path], logs: Path) -> dict:
    """Follow-up RL's learning rate on the dev contexts (module docstring, step 5): one RL run per rate of `rl.grid`
    (out/rl/lrRATE), each probed on dev after the base model's dev answers; {grid, criterion, points, chosen}, where
    `chosen` also names the run's folder. Reads no held-out file. At SCALE=cpu (not `CHOOSE_IN_RUN`) only the recorded
    choice's rate (`collab_rl`) is trained, in the same folder with the same overrides, and nothing is probed on dev."""
    if not CHOOSE_IN_RUN:
        rec = recorded_choice("collab_rl")
        lr = rec["chosen"]["learning_rate"]
        model = _train(SETTINGS["rl_recipe"], rl_overrides(paths, lr), out / "rl" / f"lr{lr:g}",
                       logs / f"train_rl_lr{lr:g}.log")  # fmt: skip
        return {**rec, "chosen": {**rec["chosen"], "model": str(model)}}
    dev, points = dev_specs(paths), []
    for lr in SETTINGS["rl"]["grid"]["learning_rate"]:
        model = _train(SETTINGS["rl_recipe"], rl_overrides(paths, lr), out / "rl" / f"lr{lr:g}",
                       logs / f"train_rl_lr{lr:g}.log")  # fmt: skip
        summary = _probe(out / "dev" / f"probe_rl_lr{lr:g}", str(model), dev, logs / f"dev_probe_rl_lr{lr:g}.log",
                         seed_from=out / "dev" / "probe_base", samples=SETTINGS["dev"]["samples"])  # fmt: skip
        points.append({"learning_rate": lr, "model": str(model), **dev_point(summary)})
    return {**SETTINGS["rl"], "points": points, "chosen": choose(points)}


def run(out: Path) -> repro.Section:
    out = Path(out)
    logs = out / "logs"
    paths = split_data(out / "data")
    held = heldout_specs(paths)

    # The held-out base measurement first; then the choice on dev; then each arm at the chosen point; RL; GSM8K last.
    probes = {"base": _probe(out / "probe_base", repro.MODEL, held, logs / "probe_base.log")}
    arms = build_arms(out, paths, logs / "build_followups.log")
    tuning = tune(out, paths, arms, logs)
    lr, steps = tuning["chosen"]["learning_rate"], tuning["chosen"]["max_steps"]
    models = {"base": repro.MODEL}
    for arm in ARMS:
        models[arm] = str(_train(SETTINGS["sft_recipe"], sft_overrides(paths, arms[arm]["path"], lr, steps),
                                 out / f"sft_{arm}", logs / f"train_{arm}.log"))  # fmt: skip
        probes[arm] = _probe(out / f"probe_{arm}", models[arm], held, logs / f"probe_{arm}.log",
                             seed_from=out / "probe_base")  # fmt: skip
    rl_tuning = tune_rl(out, paths, logs)
    models["rl"] = rl_tuning["chosen"]["model"]
    probes["rl"] = _probe(out / "probe_rl", models["rl"], held, logs / "probe_rl.log", seed_from=out / "probe_base")
    acc = {k: _gsm8k(out, k, models[k], logs / f"gsm8k_{k}.log") for k in SETTINGS["gsm8k"]["models"]}
    return _section(out, paths, probes, acc, arms, tuning, rl_tuning)


def _turn_stats(folder: Path, dataset: str) -> dict:
    """Cheap signs of judge gaming in a probe's turns: mean words, share of distinct turns, share ending in '?'."""
    rows = [r for r in _rows(folder / "samples.jsonl") if r["dataset"] == dataset]
    turns = [r["user_turn"].strip() for r in rows]
    if not turns:
        return {}
    top, count = Counter(turns).most_common(1)[0]
    return {"mean_words": round(sum(len(t.split()) for t in turns) / len(turns), 1),
            "distinct": round(len(set(turns)) / len(turns), 3),
            "asks": round(sum(t.endswith("?") for t in turns) / len(turns), 3),
            "top_share": round(count / len(turns), 3), "top_turn": top[:120]}  # fmt: skip


def _shown_turns(folder: Path, per_dataset: int = 5) -> list[dict]:
    """Held-out turns of a probe: the first sample of each context first, then the next samples, `per_dataset` each."""
    rows = _rows(folder / "samples.jsonl")
    shown = []
    for dataset in DATASETS:
        t = float(SETTINGS["probe"]["temperatures"][0])
        mine = [r for r in rows if r["dataset"] == dataset and r["perturbation"] == "none" and r["temperature"] == t]
        mine.sort(key=lambda r: (r["sample"], str(r["item_id"])))
        shown += mine[:per_dataset]
    return shown


KEEP = ("diff", "low", "high", "p", "n_items", "detectable", "reading")


def _differences(base: list[dict], other: list[dict]) -> dict:
    """`fic.followup_summary.compare(base, other)` with the fields summary.json keeps."""
    from fic.followup_summary import compare

    out = compare(base, other)
    return {"overall": {k: out["overall"][k] for k in KEEP} if out["overall"] else None,
            "by_dataset": {d: {k: c[k] for k in KEEP} for d, c in out["by_dataset"].items() if c}}  # fmt: skip


COMMITTED_LABELS = repro.ROOT / "labels" / "followup" / "collab"


def review_command(folder: Path) -> str:
    return f"fic review {folder} --sample 30 --seed {SETTINGS['seed']}"


def calibrated_rates(out: Path, models: list[str], committed: Path | None = None,
                     label_maps: dict | None = None) -> dict:  # fmt: skip
    """Per model: the calibrated (PPI) rate per dataset and overall from `probe_MODEL/labels.jsonl` (written by
    `fic review ... --sample 30`), else from the committed `labels/followup/collab/MODEL.jsonl` (blind labels of an
    earlier run's turns: a label attaches only where its turn's text hashes the same in this run, and at least half
    of them must; `committed_labels`), or the command to write them; labels are never made up here. `label_maps`,
    when given, receives each labelled model's `{row key: genuine}` (for `calibrated_differences`)."""
    committed = COMMITTED_LABELS if committed is None else committed
    from fic.eval.rates import LABELS_FILE, META_FILE, RatesError, read_labels
    from fic.followup_summary import calibrated, row_key

    rerun = f"rm {out / 'section.json'}; python reproduce/run.py --parts collab --out {out.parent}"
    result = {}
    for name in models:
        folder = out / f"probe_{name}"
        entry = {"folder": str(folder), "command": review_command(folder), "then": rerun}
        labels_path, changed = folder / LABELS_FILE, 0
        rows = _rows(folder / "samples.jsonl")
        if not labels_path.is_file() and (committed / f"{name}.jsonl").is_file():
            entry["committed"] = str(committed / f"{name}.jsonl")
            labels_path, changed = committed_labels(committed / f"{name}.jsonl", rows, folder)
        if not labels_path.is_file():
            result[name] = {**entry, "status": "no labels yet", "n_labels": 0}
            continue
        entry["labels"] = str(labels_path)
        meta = repro.read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
        try:
            labels = read_labels(labels_path, rows, meta.get("run_id"), folder)
            if changed > len(labels):
                raise RatesError(f"{changed} of {changed + len(labels)} labelled turns differ in this run: labels of "
                                 "another run")  # fmt: skip
        except RatesError as err:
            result[name] = {**entry, "status": f"labels not usable: {err}", "n_labels": 0}
            continue
        label_map = {row_key(r): bool(r["genuine"]) for r in labels}
        if label_maps is not None:
            label_maps[name] = label_map
        by_dataset = {d: calibrated([r for r in rows if r["dataset"] == d], label_map) for d in DATASETS}
        status = f"{len(labels)} labels" + (
            f" ({changed} labelled turn(s) differ in this run: left out)" if changed else ""
        )
        result[name] = {**entry, "status": status, "n_labels": len(labels), "left_out": changed,
                        "labelled_rate": sum(label_map.values()) / len(label_map) if label_map else None,
                        "overall": calibrated(rows, label_map), "by_dataset": by_dataset}  # fmt: skip
    return result


def calibrated_differences(rows: dict[str, list[dict]], label_maps: dict[str, dict]) -> dict:
    """Per labelled trained model: the calibrated (PPI++) difference from the base model on the same held-out
    contexts, paired by context, pooled and per dataset (`fic.followup_summary.compare_calibrated`), with the fields
    summary.json keeps; "not estimable" where fewer than 10 contexts hold labels (HealthBench has 9)."""
    from fic.followup_summary import compare_calibrated

    if "base" not in label_maps:
        return {}
    keep = ("diff", "low", "high", "p", "n_items", "note", "reading")
    out = {}
    for name, labels in label_maps.items():
        if name == "base":
            continue
        both = compare_calibrated(rows["base"], rows[name], label_maps["base"], labels)
        out[name] = {"overall": {k: both["overall"].get(k) for k in keep} if both["overall"] else None,
                     "by_dataset": {d: {k: c.get(k) for k in keep} for d, c in both["by_dataset"].items() if c}}  # fmt: skip
    return out


def floor_rise(estimates: dict, name: str, dataset: str = "overall") -> float | None:
    """The model's generic floor minus the base model's (the judge's share of context-free turns), pooled or per
    dataset: what part of a judged gain any answer would earn."""

    def floor(k: str) -> float | None:
        return ((estimates[k].get(dataset) or {}).get("generic_floor") or {}).get("rate")

    mine, base = floor(name), floor("base")
    return None if mine is None or base is None else mine - base


def calibrated_target(name: str, what: str, cal: dict, rise: float | None, at_least: float) -> repro.Target:
    """A target read off the calibrated paired difference from base (pooled): its lower end minus the model's rise in
    generic floor must reach `at_least` (never a point estimate)."""
    entry = (cal.get(name) or {}).get("overall") or {}
    low = entry.get("low")
    rise_text = "n/a" if rise is None else f"{100 * rise:+.1f}"
    measured = (
        f"calibrated {entry.get('reading', 'not labelled')}; generic floor {rise_text} points vs base; "
        f"lower end minus floor rise: {'n/a' if low is None or rise is None else f'{100 * (low - rise):+.1f}'}"
    )
    met = low is not None and rise is not None and low - rise >= at_least
    target = f"lower end of the calibrated difference minus the generic-floor rise >= {100 * at_least:+.0f} points"
    return repro.Target(what, target, measured, met)


def committed_labels(path: Path, rows: list[dict], folder: Path) -> tuple[Path, int]:
    """The committed labels of `path` whose turn's text hashes the same in this run's `rows`, written to
    `folder/labels_committed.jsonl`, and how many were left out. A rerun on CPU reproduces nearly every turn, but a
    sampled token can change in a few (float order); those labels describe another text and are not used. A line
    that is not a label is kept, so that `read_labels` names it."""
    from fic.eval.rates import turn_sha
    from fic.followup_summary import row_key

    texts = {row_key(r): turn_sha(r["user_turn"]) for r in rows}
    kept, changed = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            label = json.loads(line)
            now, then = texts.get(row_key(label)), label.get("turn_sha")
        except (ValueError, KeyError, TypeError, AttributeError):
            now = then = None
        if now is not None and then is not None and now != then:
            changed += 1
        elif line.strip():
            kept.append(line)
    out = folder / "labels_committed.jsonl"
    out.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return out, changed


def _estimates(summary: dict) -> dict:
    """raw, corrected and generic floor per dataset and overall of one probe summary."""
    out = {d: repro.estimate(summary["by_dataset"].get(d)) for d in DATASETS}
    out["overall"] = repro.estimate(summary.get("overall"))
    return out


def arm_entries(arms: dict, estimates: dict, differences: dict, trained: dict) -> dict:
    """`collab.arms`: per arm its rows and sources, training, and per dataset and overall the raw rate, corrected
    rate, generic floor and paired difference from the base model ({diff, low, high, p, ...})."""
    out = {}
    for arm in ARMS:
        groups = {}
        for d in (*DATASETS, "overall"):
            e = estimates[arm].get(d) or {}
            diff = differences[arm]["overall"] if d == "overall" else differences[arm]["by_dataset"].get(d)
            groups[d] = {"raw": e.get("raw"), "corrected": e.get("corrected"), "generic_floor": e.get("generic_floor"),
                         "vs_base": diff}  # fmt: skip
        out[arm] = {"rows": arms[arm]["rows"], "sources": arms[arm]["sources"], "train": trained.get(arm, {}),
                    "by_dataset": {d: groups[d] for d in DATASETS}, "overall": groups["overall"]}  # fmt: skip
    return out


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else "..." + text[-n:]


def _section(out: Path, paths: dict[str, Path], probes: dict[str, dict], acc: dict[str, dict], arms: dict,
             tuning: dict, rl_tuning: dict) -> repro.Section:  # fmt: skip
    judge = repro.judge_about()
    p, g = SETTINGS["probe"], SETTINGS["gsm8k"]
    models = list(probes)
    hb = {k: _cell(v, "healthbench") for k, v in probes.items()}
    mtb = {k: _cell(v, "mt_bench") for k, v in probes.items()}
    acc_only = {k: {"accuracy": v.get("accuracy"), "n": v.get("n")} for k, v in acc.items()}
    rows = {k: _rows(out / f"probe_{k}" / "samples.jsonl") for k in probes}
    differences = {k: _differences(rows["base"], rows[k]) for k in models if k != "base"}
    estimates = {k: _estimates(v) for k, v in probes.items()}
    evals = {k: repro.read_json(out / f"sft_{k}" / "eval_summary.json") for k in ARMS}
    trained = {k: {"learning_rate": tuning["chosen"]["learning_rate"], "max_steps": tuning["chosen"]["max_steps"],
                   "conversations": (e.get("data") or {}).get("conversations"), "train_loss": e.get("train_loss"),
                   "wall_s": e.get("wall_s")} for k, e in evals.items()}  # fmt: skip
    rl_eval = repro.read_json(Path(rl_tuning["chosen"]["model"]) / "eval_summary.json")
    curve = rl_eval.get("reward_curve", [])
    label_maps: dict = {}
    calibrated = calibrated_rates(out, models, label_maps=label_maps)
    cal_diffs = calibrated_differences(rows, label_maps)
    n_rows = arms["real"]["rows"]
    summary = {
        "arms": arm_entries(arms, estimates, differences, trained),
        "generic_floor": {k: {d: e.get("generic_floor") for d, e in by.items()} for k, by in estimates.items()},
        "calibrated": calibrated,
        "calibrated_differences": cal_diffs,
        "floor_rise": {k: {d: floor_rise(estimates, k, d) for d in (*DATASETS, "overall")} for k in models if k != "base"},
        "hyperparameters": tuning,
        "sft": {"arm": "template_filtered", "before": hb["base"], "after": hb["template_filtered"],
                "mt_bench": {"before": mtb["base"], "after": mtb["template_filtered"]},
                "gsm8k_accuracy": {"before": acc_only.get("base"), "after": acc_only.get("template_filtered")},
                "train_data": {"rows": n_rows, "sources": arms["template_filtered"]["sources"]},
                "train_loss": trained["template_filtered"]["train_loss"],
                "train_wall_s": trained["template_filtered"]["wall_s"]},
        "rl": {"before": hb["base"], "after": hb["rl"],
               "mt_bench": {"before": mtb["base"], "after": mtb["rl"]},
               "gsm8k_accuracy": {"before": acc_only.get("base"), "after": acc_only.get("rl")},
               "reward_curve": curve, "reward_first_quarter": rl_eval["before"].get("mean_reward"),
               "reward_last_quarter": rl_eval["after"].get("mean_reward"),
               "train_contexts": rl_eval.get("train_contexts"), "train_wall_s": rl_eval.get("wall_s"),
               "hyperparameters": rl_tuning},
        "gsm8k_accuracy": acc_only,
        "heldout": {"healthbench_contexts": len(_rows(paths["hb_test"])), "mt_bench_contexts": len(_rows(paths["mtb_test"])),
                    "temperature": p["temperatures"], "samples": p["samples"]},
        "turn_stats": {k: {d: _turn_stats(out / f"probe_{k}", d) for d in DATASETS} for k in probes},
        "differences": differences,
        "estimates": estimates,
    }  # fmt: skip
    n_hb, n_mtb = summary["heldout"]["healthbench_contexts"], summary["heldout"]["mt_bench_contexts"]
    temps = ", ".join(map(str, p["temperatures"]))
    chosen = tuning["chosen"]
    sft_note, rl_note = _recorded_note(tuning), _recorded_note(rl_tuning)
    measured = bool(g["models"])  # GSM8K accuracy: SCALE=gpu only
    about = {
        "model": f"SmolLM2-135M-Instruct ({repro.MODEL}), fp32 on CPU; every SFT arm and follow-up RL start from it",
        "data": (f"held out: the {n_hb} multi-turn HealthBench items of oss_eval_first30 and {n_mtb} MT-Bench questions "
                 f"({SETTINGS['heldout']['mt_bench_per_category']} per category of "
                 f"{', '.join(HELDOUT_MTB_CATEGORIES)}); dev (the learning rate and steps only"
                 f"{', chosen in the run at commit ' + tuning['recorded']['commit'] if sft_note else ''}): "
                 f"{tuning['dev']['contexts']['mt_bench']} MT-Bench training questions without a reference answer "
                 f"outside the judge's fit and {tuning['dev']['contexts']['healthbench']} single-turn HealthBench items; "
                 "training: MT-Bench questions with reference answers, the other single-turn HealthBench items, "
                 f"GSM8K train{'; GSM8K test for accuracy' if measured else ''}"),
        "sizes": (f"each SFT arm {n_rows} rows, {chosen['max_steps']} steps at learning rate {chosen['learning_rate']:g} "
                  f"(constant), batch 8, max_length 512 (keep_end); held-out contexts end with the base model's greedy "
                  f"answer ({p['response_tokens']} tokens), shared by all models; {p['samples']} user turns of at most "
                  f"{p['max_new_tokens']} tokens per context at T={temps}"
                  + (f"; GSM8K: first {g['limit']} test items" if measured else "")),
        "seeds": f"seed {SETTINGS['seed']} for the split, the arms, training and sampling (one seed)",
        "judge": repro.judge_line(judge),
    }  # fmt: skip
    main = repro.Table(
        caption=f"Held-out genuine follow-up rate (%, 95% interval clustered by context, n turns) at T={temps}"
                + (", and GSM8K accuracy" if measured else " (GSM8K accuracy not measured at SCALE=cpu)"),
        columns=["model", f"HealthBench multi-turn ({n_hb} contexts)", f"MT-Bench held-out ({n_mtb} contexts)",
                 *([f"GSM8K test accuracy (n={g['limit']})"] if measured else [])],
        rows=[[NAMES[k], repro.rate_cell(hb[k]), repro.rate_cell(mtb[k]),
               *(["not measured" if k not in acc_only or acc_only[k]["accuracy"] is None
                  else f"{100 * acc_only[k]['accuracy']:.1f}"] if measured else [])] for k in probes],
    )  # fmt: skip
    arm_table = repro.Table(
        caption=f"SFT data arms of the same budget ({n_rows} rows, {chosen['max_steps']} steps, learning rate "
                f"{chosen['learning_rate']:g}): raw, judge-corrected and generic-floor rate (%), and the paired "
                "difference from the base model on the same held-out contexts (points, 95% cluster-bootstrap "
                "interval, p); an effect is claimed only where the interval excludes 0",
        columns=["arm", "dataset", "raw", "corrected", "generic floor", "difference from base"],
        rows=[[NAMES[a], d, repro.interval_cell(e["raw"]), repro.interval_cell(e["corrected"]),
               repro.interval_cell(e["generic_floor"]), (e["vs_base"] or {}).get("reading", "n/a")]
              for a, entry in summary["arms"].items() for d, e in [*entry["by_dataset"].items(),
                                                                    ("overall", entry["overall"])]],
    )  # fmt: skip
    compared = repro.Table(
        caption="Each trained model against the base model on the same held-out contexts: the paired difference of the "
                "genuine rate (points, 95% cluster-bootstrap interval over contexts, p); an effect is claimed only "
                "where the interval excludes 0",
        columns=["model", "dataset", "difference from base"],
        rows=[[NAMES[k], d, (differences[k]["by_dataset"].get(d) or {}).get("reading", "n/a")]
              for k in differences for d in DATASETS],
    )  # fmt: skip
    floors = repro.Table(
        caption="Raw rate, judge-corrected rate (Rogan-Gladen, from the judge's error on labelled held-out turns) and "
                "generic floor (share still judged genuine after the context's answer is swapped for another "
                "context's), %, 95% intervals, for every model",
        columns=["model", "dataset", "raw", "corrected", "generic floor"],
        rows=[[NAMES[k], d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")),
               repro.interval_cell(e.get("generic_floor"))] for k, by in estimates.items() for d, e in by.items()],
    )  # fmt: skip
    grid = repro.Table(
        caption=f"SFT learning rate and steps chosen on dev contexts (never the held-out ones){sft_note}: each grid "
                f"point trained "
                f"on {tuning['trained_on']['rows']} rows (a third of each arm) and probed on the dev contexts, "
                f"{tuning['dev']['samples']} turns per context; score = dev rate - dev generic floor (%)",
        columns=["learning rate", "steps", "dev rate", "dev generic floor", "score", "chosen"],
        rows=[["base model", "-", repro.rate_cell(tuning["dev"]["base"]["raw"]),
               repro.interval_cell(tuning["dev"]["base"]["generic_floor"]),
               f"{100 * tuning['dev']['base']['score']:.1f}", ""]]
             + [[f"{pt['learning_rate']:g}", pt["max_steps"], repro.rate_cell(pt["raw"]),
                 repro.interval_cell(pt["generic_floor"]), f"{100 * pt['score']:.1f}",
                 "yes" if _point_key(pt) == _point_key(chosen) else ""] for pt in tuning["points"]],
    )  # fmt: skip
    rl_chosen = rl_tuning["chosen"]
    rl_grid = repro.Table(
        caption=f"Follow-up RL learning rate chosen on the same dev contexts (never the held-out ones){rl_note}: one "
                f"RL run per rate (the recipe's {SETTINGS['rl_recipe']} otherwise, with "
                f"{', '.join(rl_tuning['overrides'])}), "
                "probed on dev; score = dev rate - dev "
                "generic floor (%)",
        columns=["learning rate", "dev rate", "dev generic floor", "score", "chosen"],
        rows=[[f"{pt['learning_rate']:g}", repro.rate_cell(pt["raw"]), repro.interval_cell(pt["generic_floor"]),
               f"{100 * pt['score']:.1f}", "yes" if _point_key(pt) == _point_key(rl_chosen) else ""]
              for pt in rl_tuning["points"]],
    )  # fmt: skip
    calib = repro.Table(
        caption="Calibrated (prediction-powered) rate from blind labels of about 30 held-out turns per model (%, 95% "
                "interval), beside the judge's raw rate; without labels, the command that writes them",
        columns=["model", "labels", "raw (judge)", "calibrated: HealthBench", "calibrated: MT-Bench",
                 "calibrated: overall", "to label"],
        rows=[[NAMES[k], c["status"], repro.interval_cell(estimates[k]["overall"].get("raw")),
               *[repro.interval_cell((c.get("by_dataset") or {}).get(d)) for d in DATASETS],
               repro.interval_cell(c.get("overall")), "" if c["n_labels"] else f"`{c['command']}`"]
              for k, c in calibrated.items()],
    )  # fmt: skip
    t = f"t{float(p['temperatures'][0])}"
    label_names = sorted({lab for v in probes.values() for d in DATASETS
                          for lab in v["genuine_rate"].get(d, {}).get(t, {}).get("none", {}).get("labels", {})})  # fmt: skip
    labels = repro.Table(
        caption="Judge labels of the held-out turns (% of turns per model and dataset)",
        columns=["model", "dataset", *label_names],
        rows=[[NAMES[k], d, *[f'{100 * v["genuine_rate"][d][t]["none"]["labels"].get(lab, 0.0):.1f}'
                              for lab in label_names]]
              for k, v in probes.items() for d in DATASETS if d in v["genuine_rate"]],
    )  # fmt: skip
    stats = repro.Table(
        caption="Signs of judge gaming in the held-out turns: mean words, share of distinct turns, share ending in '?', "
                "and the most common turn with its share",
        columns=["model", "dataset", "mean words", "distinct", "ends in ?", "most common turn", "its share"],
        rows=[[NAMES[k], d, s.get("mean_words"), s.get("distinct"), s.get("asks"), s.get("top_turn"),
               s.get("top_share")]
              for k, v in summary["turn_stats"].items() for d, s in v.items()],
    )  # fmt: skip
    reward = repro.Table(
        caption=f"Follow-up RL reward curve (GRPO, reward from the `{TRAINING_JUDGE}` judge, contrastive; per logged step)",
        columns=["step", "mean reward", "reward std", "genuine share", "mean completion tokens"],
        rows=[[c["step"], c.get("reward"), c.get("reward_std"), c.get("followup/genuine_rate"),
               c.get("completions/mean_length")] for c in curve],
    )  # fmt: skip
    shown = repro.Table(
        caption="Held-out user turns of every trained model (5 per dataset), judged by the validated judge (end of the "
                "context shown; judge-gaming check)",
        columns=["model", "dataset", "item", "end of the assistant answer", "model's user turn", "judge label"],
        rows=[[NAMES[k], r["dataset"], str(r["item_id"])[:10], _short(r["messages"][-1]["content"], 100),
               " ".join(r["user_turn"].split())[:200], r["label"]]
              for k in models if k != "base" for r in _shown_turns(out / f"probe_{k}")],
    )  # fmt: skip
    cal_table = repro.Table(
        caption="Each trained model against the base model, read by blind readers: the calibrated (PPI++) difference "
                "paired by context (points, 95% interval, p), beside the judge's difference and the rise in generic "
                "floor; fewer than 10 labelled contexts (HealthBench: 9) are not estimable",
        columns=["model", "dataset", "judge: difference from base", "calibrated: difference from base",
                 "generic floor rise (points)"],
        rows=[[NAMES[k], d, ((differences[k]["overall"] if d == "overall" else differences[k]["by_dataset"].get(d))
                             or {}).get("reading", "n/a"),
               (((cal_diffs.get(k) or {}).get("overall") if d == "overall"
                 else ((cal_diffs.get(k) or {}).get("by_dataset") or {}).get(d)) or {}).get("reading", "no labels"),
               "n/a" if summary["floor_rise"][k][d] is None else f"{100 * summary['floor_rise'][k][d]:+.1f}"]
              for k in differences for d in (*DATASETS, "overall")],
    )  # fmt: skip
    # Targets are read off the calibrated differences (pooled over the 29 held-out contexts: HealthBench's 9 alone are
    # not estimable), minus the rise in generic floor, at the interval's lower end.
    targets = [
        calibrated_target("template_filtered", "collab SFT gain on the held-out contexts, read by blind readers "
                          "(judge-filtered template arm, the method; paper: +17.7 points on HealthBench)", cal_diffs,
                          summary["floor_rise"]["template_filtered"]["overall"], 0.15),
        calibrated_target("rl", "follow-up RL above base on the held-out contexts, read by blind readers "
                          f"(reward {summary['rl']['reward_first_quarter']} -> {summary['rl']['reward_last_quarter']}, "
                          "first -> last quarter of steps)", cal_diffs, summary["floor_rise"]["rl"]["overall"], 1e-9),
    ]  # fmt: skip
    src = arms["template_filtered"]["sources"]
    labelled = [k for k, c in calibrated.items() if c["n_labels"]]
    text = [
        (f"SFT data arms, {n_rows} rows each (the size of the real arm), loss on the user turns after an answer: "
         f"**real** = {n_rows} MT-Bench training conversations (question, GPT-4 reference answer, the real second "
         "question); HealthBench adds none, since all 9 of its multi-turn items are the held-out set. **template, "
         f"unfiltered** and **template, judge-filtered** = the same {n_rows} GSM8K-train and single-turn HealthBench "
         f"contexts ({', '.join(f'{v} {k}' for k, v in src.items())}) with their reference answers, followed by one "
         f"of {SETTINGS['template_candidates']} template follow-ups: drawn at random, or the one the "
         f"`{TRAINING_JUDGE}` judge, contrastively, calls genuine with most confidence (the judge of training "
         f"signals, refitted with trained models' turns; the probes score with `{repro.JUDGE}`, and follow-up RL's "
         f"reward is the `{TRAINING_JUDGE}` judge's, contrastive, too). The real arm's contexts are "
         "MT-Bench math, reasoning and coding questions, the template arms' GSM8K and HealthBench: arm and context "
         "source are not separable here."),
        (f"Learning rate and steps were chosen on dev contexts ({tuning['dev']['contexts']['mt_bench']} MT-Bench training "
         f"questions, {tuning['dev']['contexts']['healthbench']} single-turn HealthBench items, none held out, none in "
         f"the judge's fit){sft_note} from the grid {tuning['grid']}: {chosen['learning_rate']:g} and "
         f"{chosen['max_steps']} steps (dev score {100 * chosen['score']:.1f} points; base "
         f"{100 * tuning['dev']['base']['score']:.1f}). The grid trains on a mix of a third of each arm, so no arm's "
         "data made the choice; with "
         f"{sum(tuning['dev']['contexts'].values())} dev contexts and {tuning['dev']['samples']} turns each, close "
         "scores are within noise. Follow-up RL's learning rate was chosen the same way"
         f"{' (in that run; this run trains only that rate)' if rl_note else ''} from "
         f"{rl_tuning['grid']['learning_rate']}: {rl_chosen['learning_rate']:g} (dev score "
         f"{100 * rl_chosen['score']:.1f} points); everything else is the recipe's but "
         f"{', '.join(SETTINGS['rl']['overrides'])} (half its steps, for time), and it is reported as measured."),
        (f"The judge is the validated `{repro.JUDGE}` judge (test-split kappa {judge['kappa']:.2f}, false-positive rate "
         f"{judge['false_positive_rate']:.2f}); it calls {_share(judge['judge_genuine_rate'])} of the labelled test "
         f"turns genuine where the annotators' labels say {_share(judge['annotator_genuine_rate'])} (independent "
         "AI-agent annotators following a written guideline, blind). Rates it gives are movement toward its notion of a "
         "follow-up; the generic floor (the same turn judged after another context's answer) shows how much of a rate "
         "any answer would earn, and the calibrated rates are where readers' labels enter."),
        ("Calibrated rates: " + (f"labels for {', '.join(NAMES[k] for k in labelled)}; " if labelled else "")
         + ("no labels yet for " + ", ".join(NAMES[k] for k in calibrated if k not in labelled)
            + ": run each model's `fic review ... --sample 30` (table above), label blind, then rerun the part's "
              "summary (`rm OUT/collab/section.json` and `python reproduce/run.py --parts collab`; every step resumes)"
            if len(labelled) < len(calibrated) else "every model labelled")),
        (f"Intervals are clustered by context (the {p['samples']} turns of a context are not independent; with "
         f"{n_hb} HealthBench contexts they are wide), and every comparison with the base model is a paired difference "
         "over the same contexts. The held-out contexts end with the base model's own greedy answer, written once and "
         "copied into every probe; none of them is in the judge's fit. "
         + ("GSM8K accuracy is each model's own greedy answer on test items outside the judge's fit, measured for the "
            "base model only: it scored 0 of 20 in the run of 2026-12-02, so a trained model could not show a loss "
            "there (for time)." if measured else
            "GSM8K accuracy is not measured in this part at SCALE=cpu (for time): the probe part reports the base "
            "model's GSM8K accuracy, and in the run of 2026-12-02 the base model scored 0 of 20 here, so a trained "
            "model could not show a loss there; SCALE=gpu measures the base model's.")),
    ]  # fmt: skip
    for k in models:
        st = summary["turn_stats"][k].get("healthbench")
        if k != "base" and st and st["top_share"] >= 0.25:
            text.append(
                f"**Read the {NAMES[k]} rate with its turns.** Its most common held-out HealthBench turn is "
                f'"{st["top_turn"]}" ({100 * st["top_share"]:.0f}% of its turns; {100 * st["distinct"]:.0f}% of '
                "its turns are distinct): compare its rate with its generic floor."
            )
    return repro.Section(summary=summary, about=about,
                         tables=[main, arm_table, compared, floors, grid, rl_grid, calib, cal_table, labels, stats,
                                 reward, shown],
                         text=text, targets=targets)  # fmt: skip


def _recorded_note(tuning: dict) -> str:
    """Where a recorded choice (`recorded_choice`) was made, for the report; empty for a choice made in this run."""
    rec = tuning.get("recorded")
    if not rec:
        return ""
    return (f" in the run at commit {rec['commit']} (recorded in {rec['file']}; this run trains only the chosen "
            "point, for time; SCALE=gpu reruns the choice)")  # fmt: skip


def _share(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"
