"""Collaboration post-training (Table 2): collab SFT and follow-up RL from SmolLM2, before and after.

Steps (each resumes: fic commands in their `--out` folders, `train` skips a saved model):

1. Split the data (`data/`): HealthBench's multi-turn items and a fixed MT-Bench subset are held out; training reads
   only the rest (single-turn HealthBench, the other MT-Bench items, GSM8K train).
2. Base probe on the held-out contexts: the base model answers each held-out context once (greedy); those answers
   are copied into every later probe's `responses.jsonl`, so before and after judge turns written after the same
   contexts, with the same judge, temperatures and seeds.
3. Collab SFT data (recipe `reproduce_collab_sft`, summary `sft.train_data`): MT-Bench's real second turns of the
   training questions (GPT-4 reference answer between the turns) and template follow-ups ("Why is it {x}?", "What
   do you mean by {w}?", filled from the answer; `fic.data.followups`) after the GSM8K-train and single-turn
   HealthBench items with their reference answers, kept by the same `learned` judge that scores the held-out turns.
   No follow-ups sampled from the base model are in it.
4. Collab SFT and follow-up RL, both from SmolLM2; probes of both on the held-out contexts; GSM8K test accuracy
   of each model's own greedy answers.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import repro

TITLE = "Collaboration post-training (Table 2): collab SFT and follow-up RL"

HELDOUT_MTB_CATEGORIES = ("writing", "roleplay", "extraction", "stem", "humanities")  # no GPT-4 references there

SETTINGS = {
    "model": repro.MODEL,
    "judge": repro.JUDGE,
    "judge_version": repro.judge_version(),
    "seed": 0,
    "heldout": {"healthbench": "all multi-turn items of oss_eval_first30", "mt_bench_per_category": 4,
                "mt_bench_categories": list(HELDOUT_MTB_CATEGORIES)},
    "probe": {"temperatures": [0.7], "samples": 4, "max_new_tokens": 48, "response_tokens": 128, "batch_size": 32},
    "gsm8k": {"limit": 20, "response_tokens": 192, "items": "the first 20 test items outside the judge's fit"},
    "gsm8k_train_short": 300,  # training contexts: the GSM8K-train items with the shortest question + answer
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


def mt_bench_heldout_ids(questions: list[dict]) -> set[int]:
    """The held-out MT-Bench question ids: 4 per category of `HELDOUT_MTB_CATEGORIES`, drawn with the part's seed.
    `scripts/train_judge_classifier.py` keeps these items out of the judge's fit."""
    rng = random.Random(SETTINGS["seed"])
    held_ids = set()
    for category in HELDOUT_MTB_CATEGORIES:
        ids = sorted(r["question_id"] for r in questions if r["category"] == category)
        held_ids |= set(rng.sample(ids, SETTINGS["heldout"]["mt_bench_per_category"]))
    return held_ids


def split_data(data: Path) -> dict[str, Path]:
    """Held-out and training copies of HealthBench and MT-Bench under `data/` (file names say the split)."""
    hb = _rows(repro.SHARED / "healthbench" / "oss_eval_first30.jsonl")
    multi = [r for r in hb if len(r["prompt"]) > 1]
    single = [r for r in hb if len(r["prompt"]) == 1]
    mtb = _rows(repro.SHARED / "mt_bench" / "question.jsonl")
    held_ids = mt_bench_heldout_ids(mtb)
    paths = {
        "hb_test": _write(data / "healthbench_multiturn" / "test.jsonl", multi),
        "hb_train": _write(data / "healthbench_singleturn" / "train.jsonl", single),
        "mtb_test": _write(data / "mt_bench_heldout" / "test.jsonl", [r for r in mtb if r["question_id"] in held_ids]),
        "mtb_train": _write(data / "mt_bench_train" / "train.jsonl",
                            [r for r in mtb if r["question_id"] not in held_ids]),
    }  # fmt: skip
    # Training contexts cost prefill and training tokens on 2 cores: the shortest GSM8K-train items, in file order.
    gsm8k = _rows(repro.SHARED / "gsm8k" / "train.jsonl")
    short = sorted(range(len(gsm8k)), key=lambda i: (len(gsm8k[i]["question"]) + len(gsm8k[i]["answer"]), i))
    keep = sorted(short[: SETTINGS["gsm8k_train_short"]])
    paths["gsm8k_train"] = _write(data / "gsm8k_short" / "train.jsonl", [gsm8k[i] for i in keep])
    # MT-Bench's GPT-4 reference answers, beside the training questions (real conversations need them).
    shutil.copy(repro.SHARED / "mt_bench" / "reference_answer_gpt-4.jsonl", paths["mtb_train"].parent)
    return paths


def _probe(out: Path, name: str, model: str, datasets: list[str], log: Path, seed_from: Path | None = None) -> dict:
    """`fic probe` of `model` on the held-out contexts into `out/probe_NAME`; `seed_from`: a probe folder whose
    greedy answers (responses.jsonl) become this probe's contexts, so every model is judged after the same answers."""
    folder = out / f"probe_{name}"
    if seed_from is not None and not (folder / "responses.jsonl").exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(seed_from / "responses.jsonl", folder / "responses.jsonl")
    p = SETTINGS["probe"]
    repro.fic(["probe", "--model", model, "--datasets", ",".join(datasets), "--temperatures",
                ",".join(map(str, p["temperatures"])), "--samples", p["samples"], "--judge", repro.JUDGE,
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


def _overrides(paths: dict[str, Path], kind: str) -> list[str]:
    held = f"eval.datasets=[healthbench:{paths['hb_test']},mt_bench:{paths['mtb_test']}]"
    if kind == "sft":
        return [held, f"train_datasets=[mt_bench:{paths['mtb_train']}]",
                f"followup_contexts=[gsm8k:{paths['gsm8k_train']},healthbench:{paths['hb_train']}]"]  # fmt: skip
    return [held, f"contexts=[gsm8k:{paths['gsm8k_train']}]"]


def _train(recipe: str, overrides: list[str], output_dir: Path, log: Path) -> Path:
    """`train.py --plan` with the held-out sets as eval data (it fails on any train/held-out overlap), then training
    without in-training evaluation (the probes below measure before and after)."""
    repro.plan(recipe, overrides, log)
    return repro.train(recipe, [*overrides, "eval.datasets=[]"], output_dir, log)


def _share(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def run(out: Path) -> repro.Section:
    out = Path(out)
    logs = out / "logs"
    paths = split_data(out / "data")
    held = [f"healthbench:{paths['hb_test']}", f"mt_bench:{paths['mtb_test']}"]

    # The held-out measurements first, GSM8K (for reference) last.
    base = _probe(out, "base", repro.MODEL, held, logs / "probe_base.log")
    sft_dir = _train(SETTINGS["sft_recipe"], _overrides(paths, "sft"), out / "sft", logs / "train_sft.log")
    sft = _probe(out, "sft", str(sft_dir), held, logs / "probe_sft.log", seed_from=out / "probe_base")
    rl_dir = _train(SETTINGS["rl_recipe"], _overrides(paths, "rl"), out / "rl", logs / "train_rl.log")
    rl = _probe(out, "rl", str(rl_dir), held, logs / "probe_rl.log", seed_from=out / "probe_base")
    models = {"base": repro.MODEL, "sft": str(sft_dir), "rl": str(rl_dir)}
    acc = {k: _gsm8k(out, k, m, logs / f"gsm8k_{k}.log") for k, m in models.items()}
    return _section(out, paths, {"base": base, "sft": sft, "rl": rl}, acc)


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


def _shown_turns(folder: Path, per_dataset: int = 10) -> list[dict]:
    """20 held-out turns of a probe: the first sample of each context first, then the next samples, 10 per dataset."""
    rows = _rows(folder / "samples.jsonl")
    shown = []
    for dataset in ("healthbench", "mt_bench"):
        t = float(SETTINGS["probe"]["temperatures"][0])
        mine = [r for r in rows if r["dataset"] == dataset and r["perturbation"] == "none" and r["temperature"] == t]
        mine.sort(key=lambda r: (r["sample"], str(r["item_id"])))
        shown += mine[:per_dataset]
    return shown


def _differences(base: list[dict], other: list[dict]) -> dict:
    """`fic.followup_summary.compare(base, other)` with the fields summary.json keeps."""
    from fic.followup_summary import compare

    keep = ("diff", "low", "high", "p", "n_items", "detectable", "reading")
    out = compare(base, other)
    return {"overall": {k: out["overall"][k] for k in keep} if out["overall"] else None,
            "by_dataset": {d: {k: c[k] for k in keep} for d, c in out["by_dataset"].items() if c}}  # fmt: skip


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else "..." + text[-n:]


def _section(out: Path, paths: dict[str, Path], probes: dict[str, dict], acc: dict[str, dict]) -> repro.Section:
    judge = repro.judge_about()
    p, g = SETTINGS["probe"], SETTINGS["gsm8k"]
    hb = {k: _cell(v, "healthbench") for k, v in probes.items()}
    mtb = {k: _cell(v, "mt_bench") for k, v in probes.items()}
    acc_only = {k: {"accuracy": v.get("accuracy"), "n": v.get("n")} for k, v in acc.items()}
    rows = {k: _rows(out / f"probe_{k}" / "samples.jsonl") for k in probes}
    differences = {k: _differences(rows["base"], rows[k]) for k in ("sft", "rl")}
    estimates = {k: {d: repro.estimate(v["by_dataset"].get(d)) for d in ("healthbench", "mt_bench")}
                 for k, v in probes.items()}  # fmt: skip
    sft_eval = repro.read_json(out / "sft" / "eval_summary.json")
    rl_eval = repro.read_json(out / "rl" / "eval_summary.json")
    curve = rl_eval.get("reward_curve", [])
    summary = {
        "sft": {"before": hb["base"], "after": hb["sft"],
                "mt_bench": {"before": mtb["base"], "after": mtb["sft"]},
                "gsm8k_accuracy": {"before": acc_only["base"], "after": acc_only["sft"]},
                "train_data": sft_eval.get("data"), "train_loss": sft_eval.get("train_loss"),
                "train_wall_s": sft_eval.get("wall_s")},
        "rl": {"before": hb["base"], "after": hb["rl"],
               "mt_bench": {"before": mtb["base"], "after": mtb["rl"]},
               "gsm8k_accuracy": {"before": acc_only["base"], "after": acc_only["rl"]},
               "reward_curve": curve, "reward_first_quarter": rl_eval["before"].get("mean_reward"),
               "reward_last_quarter": rl_eval["after"].get("mean_reward"),
               "train_contexts": rl_eval.get("train_contexts"), "train_wall_s": rl_eval.get("wall_s")},
        "heldout": {"healthbench_contexts": len(_rows(paths["hb_test"])), "mt_bench_contexts": len(_rows(paths["mtb_test"])),
                    "temperature": p["temperatures"], "samples": p["samples"]},
        "turn_stats": {k: {d: _turn_stats(out / f"probe_{k}", d) for d in ("healthbench", "mt_bench")}
                       for k in probes},
        "differences": differences,
        "estimates": estimates,
    }  # fmt: skip
    n_hb, n_mtb = summary["heldout"]["healthbench_contexts"], summary["heldout"]["mt_bench_contexts"]
    temps = ", ".join(map(str, p["temperatures"]))
    about = {
        "model": f"SmolLM2-135M-Instruct ({repro.MODEL}), fp32 on CPU; collab SFT and follow-up RL both start from it",
        "data": (f"held out: the {n_hb} multi-turn HealthBench items of oss_eval_first30 and {n_mtb} MT-Bench questions "
                 f"({SETTINGS['heldout']['mt_bench_per_category']} per category of "
                 f"{', '.join(HELDOUT_MTB_CATEGORIES)}); training: recipes `{SETTINGS['sft_recipe']}` and "
                 f"`{SETTINGS['rl_recipe']}` on GSM8K train, single-turn HealthBench and the other MT-Bench "
                 "questions; GSM8K test for accuracy"),
        "sizes": (f"held-out contexts end with the base model's greedy answer ({p['response_tokens']} tokens), shared "
                  f"by all three models; {p['samples']} user turns of at most {p['max_new_tokens']} tokens per context "
                  f"at T={temps}; GSM8K: first {g['limit']} test items, answers of {g['response_tokens']} tokens"),
        "seeds": f"seed {SETTINGS['seed']} for the split, training and sampling",
        "judge": repro.judge_line(judge),
    }  # fmt: skip
    names = {"base": "SmolLM2 (base)", "sft": "collab SFT", "rl": "follow-up RL"}
    main = repro.Table(
        caption=f"Held-out genuine follow-up rate (%, 95% interval clustered by context, n turns) at T={temps}, and "
                "GSM8K accuracy",
        columns=["model", f"HealthBench multi-turn ({n_hb} contexts)", f"MT-Bench held-out ({n_mtb} contexts)",
                 f"GSM8K test accuracy (n={g['limit']})"],
        rows=[[names[k], repro.rate_cell(hb[k]), repro.rate_cell(mtb[k]),
               "n/a" if acc_only[k]["accuracy"] is None else f"{100 * acc_only[k]['accuracy']:.1f}"]
              for k in probes],
    )  # fmt: skip
    compared = repro.Table(
        caption="Each trained model against the base model on the same held-out contexts: the paired difference of the "
                "genuine rate (points, 95% cluster-bootstrap interval over contexts, p); an effect is claimed only "
                "where the interval excludes 0",
        columns=["model", "dataset", "difference from base"],
        rows=[[names[k], d, (differences[k]["by_dataset"].get(d) or {}).get("reading", "n/a")]
              for k in ("sft", "rl") for d in ("healthbench", "mt_bench")],
    )  # fmt: skip
    floors = repro.Table(
        caption="Raw rate, judge-corrected rate (Rogan-Gladen, from the judge's error on labelled held-out turns) and "
                "generic floor (share still judged genuine after the context's answer is swapped for another "
                "context's), %, 95% intervals",
        columns=["model", "dataset", "raw", "corrected", "generic floor"],
        rows=[[names[k], d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")), repro.interval_cell(e.get("generic_floor"))]
              for k, by in estimates.items() for d, e in by.items()],
    )  # fmt: skip
    t = f"t{float(p['temperatures'][0])}"
    label_names = sorted({lab for v in probes.values() for d in ("healthbench", "mt_bench")
                          for lab in v["genuine_rate"].get(d, {}).get(t, {}).get("none", {}).get("labels", {})})  # fmt: skip
    labels = repro.Table(
        caption="Judge labels of the held-out turns (% of turns per model and dataset)",
        columns=["model", "dataset", *label_names],
        rows=[[names[k], d, *[f'{100 * v["genuine_rate"][d][t]["none"]["labels"].get(lab, 0.0):.1f}'
                              for lab in label_names]]
              for k, v in probes.items() for d in ("healthbench", "mt_bench")],
    )  # fmt: skip
    stats = repro.Table(
        caption="Signs of judge gaming in the held-out turns: mean words, share of distinct turns, share ending in '?', "
                "and the most common turn with its share",
        columns=["model", "dataset", "mean words", "distinct", "ends in ?", "most common turn", "its share"],
        rows=[[names[k], d, s.get("mean_words"), s.get("distinct"), s.get("asks"), s.get("top_turn"),
               s.get("top_share")]
              for k, v in summary["turn_stats"].items() for d, s in v.items()],
    )  # fmt: skip
    reward = repro.Table(
        caption=f"Follow-up RL reward curve (GRPO, reward from the `{repro.JUDGE}` judge; per logged step)",
        columns=["step", "mean reward", "reward std", "genuine share", "mean completion tokens"],
        rows=[[c["step"], c.get("reward"), c.get("reward_std"), c.get("followup/genuine_rate"),
               c.get("completions/mean_length")] for c in curve],
    )  # fmt: skip
    shown = repro.Table(
        caption="20 held-out user turns of the follow-up RL model, judged by the validated judge (end of the context "
                "shown; judge-gaming check)",
        columns=["dataset", "item", "end of the assistant answer", "RL model's user turn", "judge label"],
        rows=[[r["dataset"], str(r["item_id"])[:10], _short(r["messages"][-1]["content"], 120),
               " ".join(r["user_turn"].split())[:240], r["label"]] for r in _shown_turns(out / "probe_rl")],
    )  # fmt: skip
    data = sft_eval.get("data") or {}
    d_sft = differences["sft"]["by_dataset"].get("healthbench") or {}
    d_rl = differences["rl"]["by_dataset"].get("healthbench") or {}
    targets = [
        repro.Target("collab SFT gain on held-out HealthBench",
                     ">= +15 points (paper: +17.7), with an interval that excludes 0",
                     f"{d_sft.get('reading', 'n/a')} ({repro.rate_cell(hb['base'])} -> {repro.rate_cell(hb['sft'])})",
                     bool(d_sft) and d_sft["diff"] >= 0.15 and d_sft["detectable"]),
        repro.Target("follow-up RL above base on held-out HealthBench",
                     "after - before with an interval above 0, with its reward curve",
                     f"{d_rl.get('reading', 'n/a')} ({repro.rate_cell(hb['base'])} -> {repro.rate_cell(hb['rl'])}); "
                     f"reward {summary['rl']['reward_first_quarter']} -> {summary['rl']['reward_last_quarter']} "
                     "(first -> last quarter of steps)", bool(d_rl) and d_rl["low"] > 0),
    ]  # fmt: skip
    text = [
        (f"Collab SFT data ({data.get('conversations')} conversations, loss on the user turns after an answer): "
         f"{(data.get('real') or {}).get('kept')} real MT-Bench training conversations (question, GPT-4 reference "
         f"answer, the real second question) and {(data.get('template') or {}).get('kept')} template follow-ups kept "
         f"by the `{repro.JUDGE}` judge out of {(data.get('template') or {}).get('contexts')} GSM8K-train and "
         f"single-turn HealthBench contexts ({SETTINGS['sft_recipe']}: labels {(data.get('template') or {}).get('labels')}). "
         f"{data.get('dropped_heldout_overlap', 0)} training conversations opened a held-out context and were dropped."),
        (f"The judge is the validated `{repro.JUDGE}` judge (test-split kappa {judge['kappa']:.2f}, false-positive rate "
         f"{judge['false_positive_rate']:.2f}), but it under-calls genuine follow-ups (it calls "
         f"{_share(judge['judge_genuine_rate'])} of the labelled test turns genuine where the annotators' labels say "
         f"{_share(judge['annotator_genuine_rate'])}; the labels are by independent AI-agent annotators following a "
         "written guideline, blind). The SFT data it kept, and the RL reward it gives, teach "
         "what it recognises: the after-training rates measure movement toward that judge's notion of a follow-up, "
         "read against the 20 turns shown and the label table, not a rate any reader has confirmed."),
        (f"Intervals are clustered by context (the {p['samples']} turns of a context are not independent; with "
         f"{n_hb} HealthBench contexts they are wide), and every comparison with the base model is a paired difference "
         "over the same contexts. The held-out contexts end with the base model's own greedy answer, written once and "
         "copied into every probe (same contexts, same judge, same seeds for all three models); none of them is in "
         "the judge's fit. GSM8K accuracy is each model's own greedy answer on test items outside the judge's fit."),
    ]  # fmt: skip
    for k in ("sft", "rl"):
        st = summary["turn_stats"][k]["healthbench"]
        if st and st["top_share"] >= 0.25:
            text.append(
                f"**Read the {names[k]} rate with its turns.** Its most common held-out HealthBench turn is "
                f'"{st["top_turn"]}" ({100 * st["top_share"]:.0f}% of its turns; {100 * st["distinct"]:.0f}% of '
                "its turns are distinct): a generic follow-up the judge accepts after any answer. The gain is "
                "mostly the model learning to ask such a question under the user header, not to build on what the "
                "answer said; the generic template follow-ups in the SFT data are where it comes from."
            )
    return repro.Section(summary=summary, about=about, tables=[main, compared, floors, labels, stats, reward, shown],
                         text=text,
                          targets=targets)  # fmt: skip
