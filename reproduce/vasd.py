"""Part 3 of `make reproduce`: View-Asymmetric Self-Distillation (Found in Conversation) on SmolLM2-135M-Instruct.

Steps (each resumes: a saved model or a finished `fic lic` folder is not redone):

1. `sft/`: a short single-turn SFT of SmolLM2 on `fic.data.synthetic` arithmetic tasks (train split), every
   single-turn phrasing and the CONCAT form, answer format "The answer is N." (the base model writes long
   explanations and gets these tasks wrong, see the candidates below). Run as `python reproduce/vasd.py sft ...`.
2. `data/test.json`: held-out test-split tasks in the Lost-in-Conversation file format (task `math`, gsm8k checker:
   the final number equals the answer), read by `fic lic --data lost_in_conversation:PATH`.
3. `lic_before/`, `lic_before_sampled/`: `fic lic` FULL / CONCAT / SHARDED on the SFT model (greedy; and sampled
   runs for A90 / U90-10).
4. `vasd/`: `recipes/reproduce_vasd.yaml` from the SFT model: frozen base teacher (the SFT model), student plays the
   sharded conversation itself, single-turn replay.
5. `lic_after/`, `lic_after_sampled/`: the same `fic lic` runs on the distilled model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import repro  # noqa: E402
from repro import Section, Table, Target  # noqa: E402

TITLE = "View-Asymmetric Self-Distillation (Found in Conversation): sharded arithmetic on SmolLM2"

SETTINGS = {
    "model": repro.MODEL,
    "task": {"family": "fic.data.synthetic arithmetic", "steps": 1, "shards": 3},
    "candidates": {"n": 12, "max_new_tokens": 24, "seed": 1,
                   "tasks": ["arithmetic-2-updates", "arithmetic-1-update", "sum-of-two"]},
    "sft": {"tasks": 400, "seed": 10, "steps": 40, "batch_size": 16, "learning_rate": 1e-4, "frozen_layers": 15,
            "torch_seed": 0},
    "vasd": {"recipe": "reproduce_vasd", "overrides": [],  # the recipe's values, kept here so settings.json has them
             "recipe_values": {"single_turn_mix": 0.5, "per_device_train_batch_size": 8, "max_steps": 30,
                               "learning_rate": 5e-5, "lmbda": 0.0, "beta": 0.0, "teacher_mode": "base"}},
    "eval": {"n": 100, "seed": 1, "max_new_tokens": 10, "batch_size": 16,
             "sampled": {"n": 20, "runs": 3, "temperature": 0.7, "seed": 0}},
}  # fmt: skip

CANDIDATE_ABOUT = {
    "arithmetic-2-updates": "fic.data.synthetic arithmetic, start value + 2 updates (4 shards)",
    "arithmetic-1-update": "fic.data.synthetic arithmetic, start value + 1 update (3 shards)",
    "sum-of-two": "'What is A + B?' (A, B in 2..30), shards: the ask, the first number, the second (3 shards)",
}


def candidate_tasks(name: str, n: int, seed: int) -> list[tuple[str, str, list[str], str]]:
    """(id, full prompt, shards, answer) of a candidate task family, test split / held-out seed."""
    import random

    from fic.data.synthetic import make_tasks

    if name.startswith("arithmetic-"):
        steps = 2 if name == "arithmetic-2-updates" else 1
        return [(t.id, t.full_prompt, list(t.shards), t.answer) for t in make_tasks(n, seed=seed, split="test",
                                                                                     steps=steps)]  # fmt: skip
    if name == "sum-of-two":
        rng = random.Random(f"sum|{seed}")
        items = []
        for i in range(n):
            a, b = rng.randint(2, 30), rng.randint(2, 30)
            items.append((f"sum-{seed}-{i}", f"What is {a} + {b}?", ["I need the sum of two numbers. What is it?",
                          f"The first number is {a}.", f"The second number is {b}."], str(a + b)))  # fmt: skip
        return items
    raise ValueError(f"unknown candidate {name!r}")


def _test_tasks():
    from fic.data.synthetic import make_tasks

    ev = SETTINGS["eval"]
    return make_tasks(ev["n"], seed=ev["seed"], split="test", steps=SETTINGS["task"]["steps"])


def write_lic_file(tasks, path: Path) -> Path:
    """Tasks (`SyntheticTask`s or (id, full prompt, shards, answer) tuples) as a Lost-in-Conversation `math` file:
    question = the canonical single-turn phrasing, the shards, and `#### ANSWER` (checked like GSM8K: the final
    number of a reply equals the answer)."""
    items = [t if isinstance(t, tuple) else (t.id, t.full_prompt, list(t.shards), t.answer) for t in tasks]
    rows = [
        {"task_id": i, "task": "math", "question": q, "answer": f"#### {a}",
         "shards": [{"shard_id": k, "shard": s} for k, s in enumerate(shards)]}
        for i, q, shards, a in items
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return path


def sft(out_dir: Path) -> None:
    """Single-turn SFT of SmolLM2 on synthetic train-split tasks (completion-only loss), saved to `out_dir`.

    The bottom `frozen_layers` decoder layers and the (tied) embeddings stay frozen and the logits are computed on
    the completion positions only: about half the compute of full fine-tuning, which is what fits on 2 CPU cores.
    """
    import random
    import time

    import torch

    from fic.data.synthetic import make_tasks, tokenized_single_turn_rows
    from fic.modeling import load_model, load_tokenizer

    cfg = SETTINGS["sft"]
    torch.manual_seed(cfg["torch_seed"])
    tokenizer = load_tokenizer(repro.MODEL)
    model = load_model(repro.MODEL, dtype="float32")
    tasks = make_tasks(cfg["tasks"], seed=cfg["seed"], split="train", steps=SETTINGS["task"]["steps"])
    rows = tokenized_single_turn_rows(tokenizer, tasks)
    random.Random(cfg["seed"]).shuffle(rows)
    model.requires_grad_(False)
    for layer in model.model.layers[cfg["frozen_layers"] :]:
        layer.requires_grad_(True)
    model.model.norm.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["learning_rate"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / cfg["steps"]))
    pad = tokenizer.pad_token_id
    model.train()
    start = time.time()
    for step in range(cfg["steps"]):
        batch = [rows[(step * cfg["batch_size"] + i) % len(rows)] for i in range(cfg["batch_size"])]
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.tensor([r["input_ids"] + [pad] * (width - len(r["input_ids"])) for r in batch])
        mask = torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in batch])
        labels_mask = torch.tensor([r["completion_mask"] + [0] * (width - len(r["input_ids"])) for r in batch])
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        select = labels_mask[:, 1:].bool()  # position t predicts token t+1
        logits = model.lm_head(hidden[:, :-1][select])
        loss = torch.nn.functional.cross_entropy(logits.float(), ids[:, 1:][select])
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 5 == 0 or step == cfg["steps"] - 1:
            print(f"sft step {step + 1}/{cfg['steps']} loss {loss.item():.4f} ({time.time() - start:.0f} s)",
                  flush=True)  # fmt: skip
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)  # config.json last-ish: its presence marks the model saved


def _lic(model: Path | str, data: Path, out: Path, log: Path, n: int, sampled: bool, max_new_tokens=None) -> dict:
    ev = SETTINGS["eval"]
    args = ["lic", "--model", str(model), "--data", f"lost_in_conversation:{data}", "--limit", n,
            "--max-new-tokens", max_new_tokens or ev["max_new_tokens"], "--batch-size", ev["batch_size"], "--out", str(out)]  # fmt: skip
    if sampled:
        s = ev["sampled"]
        args += ["--runs", s["runs"], "--temperature", s["temperature"], "--seed", s["seed"]]
    if not (out / "summary.json").exists():
        repro.fic(args, log)
    return repro.read_json(out / "summary.json")


def _views(summary: dict) -> dict:
    return {f"p_{m}": summary["modes"][m]["P"] for m in ("full", "concat", "sharded")}


def _lic_metrics(summary: dict) -> dict:
    return {m: {k: summary["modes"][m][k] for k in ("P", "A90", "U90_10", "episodes")} for m in summary["modes"]}


def run(out: Path) -> Section:
    out = Path(out).resolve()
    logs = out / "logs"
    ev = SETTINGS["eval"]
    cand = SETTINGS["candidates"]
    candidates = []
    for name in cand["tasks"]:
        path = write_lic_file(candidate_tasks(name, cand["n"], cand["seed"]), out / "data" / f"candidate-{name}.json")
        summ = _lic(repro.MODEL, path, out / "candidates" / name, logs / "candidates.log", cand["n"], False,
                    cand["max_new_tokens"])  # fmt: skip
        candidates.append({"task": CANDIDATE_ABOUT[name], "model": "SmolLM2-135M-Instruct as shipped",
                           "n": cand["n"], "max_new_tokens": cand["max_new_tokens"], **_views(summ)})  # fmt: skip
    sft_dir = out / "sft"
    if not (sft_dir / "config.json").exists():
        repro._run([sys.executable, str(HERE / "vasd.py"), "sft", str(sft_dir)], logs / "sft.log", "vasd sft")
    data = write_lic_file(_test_tasks(), out / "data" / "test.json")
    before = _lic(sft_dir, data, out / "lic_before", logs / "lic_before.log", ev["n"], False)
    before_s = _lic(sft_dir, data, out / "lic_before_sampled", logs / "lic_before.log", ev["sampled"]["n"], True)
    vasd_dir = repro.train(SETTINGS["vasd"]["recipe"], [f"model_name_or_path={sft_dir}",
                            *SETTINGS["vasd"]["overrides"]], out / "vasd", logs / "vasd.log")  # fmt: skip
    after = _lic(vasd_dir, data, out / "lic_after", logs / "lic_after.log", ev["n"], False)
    after_s = _lic(vasd_dir, data, out / "lic_after_sampled", logs / "lic_after.log", ev["sampled"]["n"], True)
    train_summary = {}
    for name in ("eval_summary.json", "train_summary.json"):
        if (vasd_dir / name).exists():
            train_summary = repro.read_json(vasd_dir / name)
            break
    candidates.append({"task": CANDIDATE_ABOUT["arithmetic-1-update"] + " (chosen)",
                       "model": "after the single-turn SFT", "n": ev["n"], "max_new_tokens": ev["max_new_tokens"],
                       **_views(before)})  # fmt: skip
    return _section(before, after, before_s, after_s, train_summary, candidates)


def _section(before, after, before_s, after_s, train_summary, candidates) -> Section:
    ev, s = SETTINGS["eval"], SETTINGS["eval"]["sampled"]
    b, a = _views(before), _views(after)
    recovery = a["p_sharded"] / b["p_full"] if b["p_full"] else 0.0
    eps = 1e-9
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    targets = [
        Target("competent single turn", "P_full >= 0.40 (after a short single-turn SFT)", pct(b["p_full"]),
               b["p_full"] >= 0.4 - eps),
        Target("multi-turn loss", "P_sharded <= 0.8 x P_full (before)",
               f"{pct(b['p_sharded'])} vs 0.8 x {pct(b['p_full'])} = {pct(0.8 * b['p_full'])}",
               b["p_sharded"] <= 0.8 * b["p_full"] + eps),
        Target("CONCAT like FULL", "|P_concat - P_full| <= 5 points (before)",
               f"{pct(b['p_concat'])} vs {pct(b['p_full'])}", abs(b["p_concat"] - b["p_full"]) <= 0.05 + eps),
        Target("recovery", "P_sharded(after) / P_full(before) >= 0.92", f"{recovery:.3f}", recovery >= 0.92 - eps),
        Target("FULL kept", "P_full(after) >= P_full(before) - 2 points", f"{pct(a['p_full'])} vs {pct(b['p_full'])}",
               a["p_full"] >= b["p_full"] - 0.02 - eps),
        Target("CONCAT kept", "P_concat(after) >= P_concat(before) - 2 points",
               f"{pct(a['p_concat'])} vs {pct(b['p_concat'])}", a["p_concat"] >= b["p_concat"] - 0.02 - eps),
    ]  # fmt: skip
    views = Table(
        f"P per view, greedy, {ev['n']} held-out test-split tasks (SFT model before, VASD model after)",
        ["view", "before (SFT)", "after (VASD)", "change (points)"],
        [[m.upper(), pct(b[f"p_{m}"]), pct(a[f"p_{m}"]), f"{100 * (a[f'p_{m}'] - b[f'p_{m}']):+.1f}"]
         for m in ("full", "concat", "sharded")] + [["recovery P_sharded/P_full(before)",
         f"{b['p_sharded'] / b['p_full']:.3f}" if b["p_full"] else "n/a", f"{recovery:.3f}", ""]],
    )  # fmt: skip
    lic_rows = []
    for label, summ in (("before", before_s), ("after", after_s)):
        for m in ("full", "concat", "sharded"):
            mm = summ["modes"][m]
            lic_rows.append([label, m.upper(), pct(mm["P"]), pct(mm["A90"]), pct(mm["U90_10"]), mm["episodes"]])
    lic = Table(
        f"Lost-in-Conversation metrics, {s['n']} held-out tasks x {s['runs']} sampled runs (T={s['temperature']})",
        ["model", "mode", "P", "A90", "U90-10", "episodes"], lic_rows,
    )  # fmt: skip
    cands = Table(
        "Task candidates measured first (greedy)",
        ["candidate", "model", "n", "max new tokens", "P_full", "P_concat", "P_sharded"],
        [[c["task"], c["model"], c["n"], c["max_new_tokens"], pct(c["p_full"]), pct(c["p_concat"]),
          pct(c["p_sharded"])] for c in candidates],
    )  # fmt: skip
    summary = {
        "task": "fic.data.synthetic arithmetic, 1 update step (3 shards: question, start value, update), "
                "after a short single-turn SFT of SmolLM2",
        "before": b, "after": a, "recovery": recovery, "n": ev["n"],
        "lic": {"before": _lic_metrics(before_s), "after": _lic_metrics(after_s), "greedy_before": _lic_metrics(before),
                "greedy_after": _lic_metrics(after), "sampled": s},
        "candidates": candidates,
        "targets_met": {t.name: t.met for t in targets},
        "vasd_train": _vasd_train(train_summary),
    }  # fmt: skip
    cfg = SETTINGS["sft"]
    about = {
        "model": "SmolLM2-135M-Instruct (smollm2), after a short single-turn SFT "
                 f"({cfg['steps']} steps x {cfg['batch_size']} rows, lr {cfg['learning_rate']}, bottom "
                 f"{cfg['frozen_layers']} layers and embeddings frozen); VASD with recipe reproduce_vasd",
        "data": "fic.data.synthetic arithmetic word problems (1 update step, 3 shards), train split for SFT and VASD, "
                "test split (disjoint by content hash) for evaluation; rule user reveals shards verbatim",
        "sizes": f"SFT {cfg['tasks']} tasks x 4 phrasings; eval {ev['n']} tasks greedy, {s['n']} x {s['runs']} sampled",
        "seeds": f"SFT tasks seed {cfg['seed']}, test tasks seed {ev['seed']}, torch seed {cfg['torch_seed']}, "
                 f"sampling seed {s['seed']}",
    }  # fmt: skip
    text = [
        "The base SmolLM2-135M-Instruct writes long explanations and gets these word problems wrong in every view "
        "(candidates table), so a short single-turn SFT comes first; its model is the *before* model and VASD's "
        "frozen teacher. FULL is the canonical phrasing, CONCAT all shards in one message as a list, SHARDED one "
        "shard per turn (an episode is correct at its first correct answer attempt).",
        "VASD settings (recipe `reproduce_vasd`): full fine-tuning, fp32, 30 steps x 8 rows, lr 5e-5 constant, "
        "forward KL (`beta` 0) at temperature 1 on the frozen SFT teacher's sampled response in the single-turn view "
        "(`lmbda` 0), the student's own greedy replies to the earlier shards, and `single_turn_mix` 0.5: half of "
        "the rows replay the single-turn view against the teacher. Tried before it (make reproduce of 2026-12-01): "
        "`single_turn_mix` 0.3, which closed the multi-turn gap too (P_sharded 0.21 -> 0.72) but eroded the "
        "single-turn views (P_full 0.77 -> 0.59, P_concat 0.80 -> 0.67), the erosion DESIGN.md records for too "
        "little single-turn replay.",
        "P_full and P_concat are counted as kept when they drop by at most 2 points (a rise is not a miss). "
        "A90 and U90-10 come from the sampled runs; with one greedy run per task A90 equals P and U90-10 is 0.",
    ]
    return Section(summary=summary, about=about, tables=[views, lic, cands], text=text, targets=targets)


def _vasd_train(train_summary: dict) -> dict:
    """What VASD trained on. The trainer's `rows` is the size of the synthetic train set it was given
    (`synthetic_tasks`); training saw `max_steps` x `per_device_train_batch_size` of them (one process, no gradient
    accumulation), which is `rows_trained`."""
    values = SETTINGS["vasd"]["recipe_values"]
    out = {"rows_trained": values["max_steps"] * values["per_device_train_batch_size"],
           "steps": values["max_steps"], "batch_size": values["per_device_train_batch_size"]}  # fmt: skip
    if "rows" in train_summary:
        out["rows_available"] = train_summary["rows"]
    out.update({k: train_summary[k] for k in ("train_loss", "wall_s") if k in train_summary})
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sft":
        sft(Path(sys.argv[2]))
    else:
        raise SystemExit("usage: python reproduce/vasd.py sft OUT_DIR")
