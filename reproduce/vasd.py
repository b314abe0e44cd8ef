"""Part 3 of `make reproduce`: View-Asymmetric Self-Distillation (Found in Conversation) on SmolLM2-135M-Instruct,
with a dev/test split, three VASD seeds and a same-budget self-SFT control at the same three seeds.

Split. The candidate task families' held-out tasks (the `test` content-hash split of `fic.data.synthetic`, disjoint
from every training task; for `sum-of-two` all pairs (A, B)) are cut in two by a second hash of the task content
(`split_side`, salt `SPLIT_SALT`): **dev** and **test**. Every choice below reads dev numbers only; the test tasks are
scored once, after every choice, and never feed one (`tests/test_reproduce_vasd.py` checks which task ids each
choice saw).

Choices, made by code from dev numbers and recorded with them in `summary.json` (`vasd.dev`):

1. Start model (`choose_start`): the three candidates on dev with SmolLM2 as shipped. The single-turn SFT is skipped
   only if an arithmetic candidate already qualifies (`qualifies`: P_full >= 0.40, |P_concat - P_full| <= 10 points,
   P_sharded <= 0.8 x P_full). (The base model writes long explanations; it failed every candidate last time.)
2. Task (`choose_task`): the two arithmetic candidates (1 update, 3 shards; 2 updates, 4 shards), both in the SFT's
   training mix, on dev with the start model; the qualifying one with the largest gap P_full - P_sharded (none
   qualifying: the largest gap, recorded as not qualified).
3. `single_turn_mix` (`choose_mix`): VASD at each of `MIXES` (seed 0) on the chosen task, scored on dev. Among the
   mixes that keep P_full and P_concat within `keep_margin` (5 points) of the start model on dev, the highest
   P_sharded (ties: the larger mix); if none keeps both, the smallest worst drop. At SCALE=gpu (`CHOOSE_IN_RUN`) this
   runs inside the run. At SCALE=cpu, the default, it is not rerun (for time): the fresh-clone run at 7eebd76 made it
   on the same dev tasks (task arithmetic-1-update, start model sft: 0.5, neither mix keeping both views) and
   `reproduce/dev_choices.json` (`vasd_mix`) records its numbers; the report shows them with that commit and file
   (`dev.mix.recorded`). If this run's task or start model differs from the recorded one, the run warns and chooses
   the mix itself (`dev.mix.recorded_not_used` says why): the recorded mix applies only to the task it was chosen on.

Test. The start model, VASD at the chosen mix with seeds 0, 1, 2 (the seed sets the training tasks, the replay
draws, the teacher samples and torch; when the mix is chosen in the run, seed 0 is the dev run's model, otherwise it
is trained with the other seeds by the same training call, so it is the same model) and the control are scored
greedily (FULL, CONCAT, SHARDED) on the test tasks; sampled runs give the Lost-in-Conversation A90 / U90-10. The
control runs at seeds 0, 1, 2 at both scales (`seeds_of`, `control_seeds`; until this version SCALE=cpu ran it at
seed 0 only, which left its seed variance out of every interval).

Control (self-SFT): the same trainer, recipe, rows, steps, batch, learning rate and mix with `mode=sequence
temperature=0.0` (so the same training tasks and replay draws per seed): the frozen start model answers each task's
single-turn prompt greedily and the student is trained with the log-likelihood of that answer in the sharded view it
plays itself (and in the single-turn view on replay rows). It differs from VASD only in the loss: one greedy target
instead of the teacher's whole distributions on a sampled response. Plain multi-turn SFT on the sharded view with the
model's own single-turn answers; no trainer change.

Estimates. A trained model's score varies with the seed as well as with the tasks, so every interval of a trained
arm comes from a two-level bootstrap (`fic.bootstrap.seed_task_bootstrap`): each replicate draws the seeds with
replacement and the test tasks with replacement, the same draw for every arm, so differences are paired by task and,
between VASD and the control (same training tasks and replay draws per seed), by seed; the start model is one model,
the same in every seed draw. Differences are `{diff, low, high, p}` (pooled rates, b - a); the per-seed differences
from the start model and the start model's own comparisons have one seed, where the bootstrap is the paired task
bootstrap of `fic.estimates.paired_difference`; the start model's rates have item-clustered Wilson intervals
(`fic.estimates.cluster_rate`). Seed spread: mean, sd, min and max of the per-seed P.

Recovery, defined once for the whole project (`fic.metrics.recovery`), is the share of the multi-turn gap that
training closed: (P_sharded(after) - P_sharded(before)) / (P_full(before) - P_sharded(before)), pooled over the seeds
and tasks, with the same two-level interval (None, with the reason, when there is no gap before training). The
paper's ">= 92% of single-turn performance recovered" is a ratio, P_sharded(after) / P_full >= 0.92 (read here, as
this project always has, against the start model's P_full). The report does not print that ratio beside recovery
(one name, one idea); it reads the paper's target on the gap-closed scale: with this run's before scores F and S,
P_sharded(after) >= 0.92 F is the same statement as recovery >= (0.92 F - S) / (F - S)
(`fic.metrics.recovery_target`, e.g. 0.90 at F = 0.55, S = 0.10), and the target is met when the lower end of the
recovery interval reaches that value. (The threshold uses the before scores' point estimates; their uncertainty is
in the recovery interval.) Before this version the report called P_sharded(after) / P_full(before) "recovery";
the committed results (reproduce/results, F = 0.55, S = 0.10) show that ratio, 0.384, which is recovery 0.25
against a target of 0.90. The other targets are read on the intervals too: "kept" is the lower end of after - before
above -`keep_margin` (non-inferiority at 5 points; the old 2-point tolerance was below one standard error at
n=100).

Time (2 cores, one process at a time under the shared lock; the history first, the current SCALE=cpu sizes at the
end). `reproduce/results/summary.json` records 22.27 min for the whole part and `vasd_train.wall_s` 610.7 s for 30
steps x 8 rows of VASD (~20 s a step with the model load); it records no other step. The steps were timed again for this version (`TIME`, seconds, under the lock, SmolLM2 and
this part's SFT model; `estimated_seconds()` redoes the sums):

    fic lic greedy, n tasks (FULL + CONCAT + SHARDED, <= 10 tokens): 48.7 s at n=48   -> L(n)  = 10 + 0.8 n (*)
    fic lic sampled, 3 runs at T=0.7:                                 22.4 s at n=10   -> Ls(n) = 10 + 1.25 n
    candidates on the base model (3 x 12 dev tasks, 24 tokens):       49.5 s           -> 50
    single-turn SFT (40 steps x 16 rows):                              89.3 s           -> 90
    VASD from the SFT model, 5 steps x 8 rows: 50.8 s (8.3 s load)    ~8.6 s a step    -> V(s) = 9 + 8.6 s
    self-SFT (mode=sequence, no teacher forward)                       ~0.87 of a step -> C(s) = 9 + 7.5 s

(*) a timing run of the SFT model on 48 test-split tasks; nothing here was chosen from its scores.

The earlier part under today's figures: 50 + 90 + 2 x L(100) + 2 x Ls(20) + V(30) = 50 + 90 + 180 + 70 + 267 =
657 s, about half the recorded 1336 s: the recorded run was about 2x slower throughout (presumably the 2-core machine
was shared then; the same training code, timed alone, takes 8.6 s a VASD step, not 20). At the recorded speed this
part would take about 50 min; sizes are chosen for today's speed, with every command under the lock. With 8 steps,
40 dev tasks per arithmetic candidate, 100 test tasks and 10 sampled tasks (the sizes before the cut below):

    candidates (base)  50 + SFT 90 + start model on dev L(80) 74                             =  214 s
    dev mix choice:    2 x V(8) (77.8) + 2 x L(40) (42)                                      =  240 s
    seeds 1, 2:        2 x V(8);  self-SFT: 3 x C(8) (69)                                    =  363 s
    test, greedy:      7 models x L(100) (90)                                                =  630 s
    sampled LiC:       start model and VASD seed 0, 2 x Ls(10) (22.5)                        =   45 s
                                                                              total           = 1491 s = 24.9 min

Controls were kept and sizes dropped to fit: 8 steps x 8 rows per training run instead of 30 (seven runs instead of
one), 40 dev tasks, 10 sampled tasks (was 20), 100 test tasks as before. If the 2-update task is chosen, a VASD step
costs ~1.35x (one more rollout turn, longer prompts; 11.8 s measured) and a lic task an estimated ~1.3x (one more
shard): about +5 min.

The fresh-clone `make reproduce` of 2026-12-02 ran these sizes in 29.3 min (the machine ran ~1.6x slower that day;
each greedy test run of 100 tasks took 1.2-1.5 min, each training run 1.7-2.0 min). To fit the whole run into 90
minutes on such a day, the test tasks went from 100 to 80 (7 x 20 tasks, -2.8 min at that speed; the recovery
interval widens by about sqrt(100/80) = 1.12x).

The fresh clone of 2026-12-03 (commit 7eebd76) took 36.1 min for this part at those sizes. SCALE=cpu now cuts, at
that day's speed:

    the mix choice, recorded instead of rerun: VASD at 0.3 (2.5 min training + 0.8 dev scoring), dev scoring at
      0.5 (0.9 min); VASD seed 0 at 0.5 is still trained, with the other seeds               = 4.2 min
    the control's seeds 1 and 2: 2 x 2.2 min training + 2 x ~1.3 min test                     = ~7 min
    test tasks 80 -> 60: the 5 remaining greedy test runs (1.1-1.4 min each at 80 tasks) lose a quarter of their
      tasks; the intervals widen by about sqrt(80/60) = 1.15x                                  = ~1.5 min

about 23 min at that day's speed. Under `TIME` (`estimated_seconds()`): 50 + 90 + L(80) 74 + 3 x V(8) 233 + C(8) 69
+ 5 x L(60) 290 + 2 x Ls(10) 45 = 851 s = 14.2 min, against 1379 s = 23.0 min with the choice in the run, three
control seeds and 80 test tasks (what SCALE=gpu runs). The fresh clone at 95e5153 (a faster hour: reference step
3.34 s, `reproduce/speed.py`) ran the part at these sizes in 13.6 min.

The control's seeds 1 and 2 are back at SCALE=cpu (seed variance belongs in the intervals, and VASD - self-SFT is
paired by seed only when both have the same seeds). Each adds a training run and a greedy test run: under `TIME`
C(8) 69 + L(60) 58 = 127 s, so 2 x 127 = +254 s and the part's estimate goes from 851 s to 1105 s = 18.4 min. From
measured runs: at 95e5153's speed the control's seed-0 training took 71.8 s (`vasd_train.runs`) and a 60-task test
run about a minute, so about +4.3 min (13.6 -> ~18 min); at 7eebd76's slower day 2 x (2.2 + ~1.3) min = ~7 min (to
~30 min). The whole `make reproduce` (45.6 min at 95e5153) stays inside its 90 minutes. The two-level bootstrap
itself costs well under a second per interval (numpy, 2000 replicates). Measured on 2026-12-04 (`reproduce/results`,
one pass of the parts, not a fresh clone): 19.8 min with the three control seeds.
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

TITLE = "View-Asymmetric Self-Distillation (Found in Conversation): sharded arithmetic on SmolLM2"

SPLIT_SALT = "vasd-dev-test-v1"
ARITHMETIC = {"arithmetic-1-update": 1, "arithmetic-2-updates": 2}  # candidate -> fic.data.synthetic update steps
CANDIDATES = ("arithmetic-2-updates", "arithmetic-1-update", "sum-of-two")
MIXES = (0.3, 0.5)
SEEDS = (0, 1, 2)
SCALE = repro.scale()
# SCALE=gpu chooses `single_turn_mix` inside the run; SCALE=cpu reads the choice the fresh-clone run made on the same
# dev tasks from reproduce/dev_choices.json (`vasd_mix`), unless this run's task or start model differs from it.
CHOOSE_IN_RUN = repro.chooses_in_run()
KINDS = {"vasd": [], "self_sft": ["mode=sequence", "temperature=0.0"]}  # the control differs only in its loss

SETTINGS = {
    "model": repro.MODEL,
    "scale": SCALE,
    "split": {"salt": SPLIT_SALT, "pool": "fic.data.synthetic test split (content hash), seed 1; sum-of-two: all "
              "pairs A, B in 2..30", "seed": 1, "sides": ["dev", "test"]},
    "candidates": {"tasks": list(CANDIDATES), "base_n": 12, "base_max_new_tokens": 24, "dev_n": 40,
                   "rule": "P_full >= 0.40, |P_concat - P_full| <= 0.10, P_sharded <= 0.8 P_full; largest gap"},
    "sft": {"tasks": 400, "task_steps": [1, 2], "seed": 10, "steps": 40, "batch_size": 16, "learning_rate": 1e-4,
            "frozen_layers": 15, "torch_seed": 0},
    "vasd": {"recipe": "reproduce_vasd", "overrides": ["max_steps=8"], "mixes": list(MIXES), "mix_seed": 0,
             "seeds": list(SEEDS), "control_seeds": list(SEEDS), "keep_margin": 0.05,
             "controls": {k: v for k, v in KINDS.items()},
             # the recipe's values (tests/test_reproduce.py checks them against the recipe); overrides win
             "recipe_values": {"single_turn_mix": 0.5, "per_device_train_batch_size": 8, "max_steps": 30,
                               "learning_rate": 5e-5, "lmbda": 0.0, "beta": 0.0, "teacher_mode": "base"}},
    "eval": {"test_n": 80 if SCALE == "gpu" else 60, "max_new_tokens": 10, "batch_size": 16,
             "paper_sharded_over_full": 0.92,
             "sampled": {"n": 10, "runs": 3, "temperature": 0.7, "seed": 0}},
}  # fmt: skip

# Seconds per unit on the 2-core machine (module docstring): the size arithmetic of `estimated_seconds`.
TIME = {"train_load": 9, "vasd_step": 8.6, "self_sft_step": 7.5, "lic_load": 10, "lic_task": 0.8,
        "lic_sampled_task": 1.25, "candidates_base": 50, "sft": 90}  # fmt: skip

VIEWS = ("full", "concat", "sharded")


def seeds_of(kind: str) -> list[int]:
    """The seeds a kind is trained and tested at: VASD at `SETTINGS["vasd"]["seeds"]`, the self-SFT control at
    `control_seeds` (the same three at both scales)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    return list(SETTINGS["vasd"]["seeds" if kind == "vasd" else "control_seeds"])


def split_side(key: str) -> str:
    """`dev` or `test` for a task's content key: one bit of a salted hash, so the two sides never share a task."""
    return "dev" if hashlib.sha256(f"{SPLIT_SALT}|{key}".encode()).digest()[0] % 2 == 0 else "test"


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


def sft(out_dir: Path) -> None:
    """Single-turn SFT of SmolLM2 on synthetic train-split tasks of both arithmetic candidates (completion-only
    loss), saved to `out_dir`.

    The bottom `frozen_layers` decoder layers and the (tied) embeddings stay frozen and the logits are computed on
    the completion positions only: about half the compute of full fine-tuning, which is what fits on 2 CPU cores.
    """
    import time

    import torch

    from fic.data.synthetic import make_tasks, tokenized_single_turn_rows
    from fic.modeling import load_model, load_tokenizer

    cfg = SETTINGS["sft"]
    torch.manual_seed(cfg["torch_seed"])
    tokenizer = load_tokenizer(repro.MODEL)
    model = load_model(repro.MODEL, dtype="float32")
    per = cfg["tasks"] // len(cfg["task_steps"])
    tasks = [t for steps in cfg["task_steps"] for t in make_tasks(per, seed=cfg["seed"], split="train", steps=steps)]
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


# ---------------------------------------------------------------------------------------------- measuring


def _lic(model, data: Path, out: Path, log: Path, n: int, max_new_tokens: int, sampled: bool = False) -> dict:
    """`fic lic` on the first `n` tasks of `data` (resumes in `out`); returns {mode: {task_id: [correct per run]}}."""
    ev = SETTINGS["eval"]
    args = ["lic", "--model", str(model), "--data", f"lost_in_conversation:{data}", "--limit", n,
            "--max-new-tokens", max_new_tokens, "--batch-size", ev["batch_size"], "--out", str(out)]  # fmt: skip
    if sampled:
        s = ev["sampled"]
        args += ["--runs", s["runs"], "--temperature", s["temperature"], "--seed", s["seed"]]
    if not (out / "summary.json").exists():
        repro.fic(args, log)
    return outcomes(repro.read_jsonl(out / "episodes.jsonl"))


def outcomes(episodes: list[dict]) -> dict[str, dict[str, list[bool]]]:
    """Episode rows of `fic lic` as {mode: {task_id: [correct of each run]}}."""
    out: dict[str, dict[str, list[bool]]] = {m: {} for m in VIEWS}
    for row in sorted(episodes, key=lambda r: r["run"]):
        out.setdefault(row["mode"], {}).setdefault(row["task_id"], []).append(bool(row["correct"]))
    return out


def subset(result: dict, prefix: str) -> dict:
    """The tasks of one candidate (ids `PREFIX|...`) of a run's outcomes."""
    return {m: {t: v for t, v in by_task.items() if t.startswith(prefix + "|")} for m, by_task in result.items()}


def views(result: dict) -> dict:
    """{p_full, p_concat, p_sharded, n}: the share of correct episodes per view, pooled over runs."""
    out = {}
    for m in VIEWS:
        flags = [f for v in result.get(m, {}).values() for f in v]
        out[f"p_{m}"] = sum(flags) / len(flags) if flags else 0.0
    out["n"] = len(result.get("full", {}))
    return out


# ---------------------------------------------------------------------------------------------- choices


def qualifies(v: dict) -> bool:
    """A setting worth distilling: competent single turn, CONCAT like FULL (so a SHARDED gap is about the turns)
    and a multi-turn gap."""
    eps = 1e-9
    return (v["p_full"] >= 0.4 - eps and abs(v["p_concat"] - v["p_full"]) <= 0.10 + eps
            and v["p_sharded"] <= 0.8 * v["p_full"] + eps)  # fmt: skip


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


def choose_mix(before: dict, after: dict[float, dict], margin: float) -> dict:
    """`single_turn_mix` from dev: among mixes keeping P_full and P_concat within `margin` of `before`, the highest
    P_sharded (ties: the larger mix); if none keeps both, the smallest worst drop (ties: the larger mix)."""
    eps = 1e-9

    def drop(mix):
        return max(before["p_full"] - after[mix]["p_full"], before["p_concat"] - after[mix]["p_concat"])

    keep = [m for m in after if drop(m) <= margin + eps]
    pick = max(keep, key=lambda m: (after[m]["p_sharded"], m)) if keep else min(after, key=lambda m: (drop(m), -m))
    return {"rule": f"highest dev P_sharded among mixes keeping dev P_full and P_concat within {margin:.2f} of the "
                    "start model (none keeping: smallest worst drop)",
            "chosen": pick, "kept": keep, "before": before, "numbers": {str(m): after[m] for m in after},
            "seed": SETTINGS["vasd"]["mix_seed"]}  # fmt: skip


def _recorded_mismatch(task: str, start_model: str) -> str | None:
    """Why the recorded `vasd_mix` does not apply to this run (None if it does): it was chosen on one task's dev
    tasks with one start model."""
    rec = repro.recorded_choice("vasd_mix")
    wrong = [f"{key} {rec.get(key)!r}, this run {ours!r}" for key, ours in (("task", task), ("start_model", start_model))
             if rec.get(key) != ours]  # fmt: skip
    return f"recorded for {'; '.join(wrong)}" if wrong else None


def recorded_mix(task: str, start_model: str) -> dict | None:
    """The `single_turn_mix` choice recorded in reproduce/dev_choices.json (`vasd_mix`, with `recorded` naming its
    commit and file), or None with a warning when it was made for another task or start model (then the run
    chooses the mix itself)."""
    mismatch = _recorded_mismatch(task, start_model)
    if mismatch:
        print(f"warning: vasd: the recorded single_turn_mix does not apply ({mismatch}); choosing it in this run",
              file=sys.stderr, flush=True)  # fmt: skip
        return None
    rec = repro.recorded_choice("vasd_mix")
    return {**rec, "chosen": float(rec["chosen"]), "kept": [float(k) for k in rec["kept"]]}


# ---------------------------------------------------------------------------------------------- the part


def _train(kind: str, start, steps: int, mix: float, seed: int, out: Path, logs: Path) -> Path:
    name = f"{kind}-mix{mix}-seed{seed}"
    overrides = [f"model_name_or_path={start}", f"synthetic_task_steps={steps}", f"single_turn_mix={mix}",
                 f"seed={seed}", *SETTINGS["vasd"]["overrides"], *KINDS[kind]]  # fmt: skip
    return repro.train(SETTINGS["vasd"]["recipe"], overrides, out / "train" / name, logs / f"train-{name}.log")


def _train_summary(model_dir: Path) -> dict:
    for name in ("eval_summary.json", "train_summary.json"):
        if (model_dir / name).exists():
            return repro.read_json(model_dir / name)
    return {}


def run(out: Path) -> Section:
    from vasd_report import section  # imported here, not at the top: vasd_report imports this module

    out = Path(out).resolve()
    logs, data = out / "logs", out / "data"
    c, ev, v = SETTINGS["candidates"], SETTINGS["eval"], SETTINGS["vasd"]
    seen: dict[str, list[str]] = {}  # which task ids each choice read (the test checks none is a test task)

    # 1. start model: the candidates on dev with the base model
    base_items = {name: family_tasks(name, "dev", c["base_n"]) for name in CANDIDATES}
    path = write_lic_file([i for items in base_items.values() for i in items], data / "dev-candidates-base.json")
    base = _lic(repro.MODEL, path, out / "dev" / "candidates-base", logs / "dev.log", 3 * c["base_n"],
                c["base_max_new_tokens"])  # fmt: skip
    seen["start"] = sorted(base["full"])
    start_choice = choose_start({name: views(subset(base, name)) for name in CANDIDATES})
    start = repro.MODEL
    if start_choice["sft"]:
        start = out / "sft"
        if not (start / "config.json").exists():
            repro._run([sys.executable, str(HERE / "vasd.py"), "sft", str(start)], logs / "sft.log", "vasd sft")

    # 2. task: both arithmetic candidates on dev with the start model
    dev_items = {name: family_tasks(name, "dev", c["dev_n"]) for name in ARITHMETIC}
    path = write_lic_file([i for items in dev_items.values() for i in items], data / "dev-candidates-start.json")
    dev_start = _lic(start, path, out / "dev" / "candidates-start", logs / "dev.log", 2 * c["dev_n"],
                     ev["max_new_tokens"])  # fmt: skip
    seen["task"] = sorted(dev_start["full"])
    task_choice = choose_task({name: views(subset(dev_start, name)) for name in ARITHMETIC})
    task = task_choice["chosen"]
    steps = ARITHMETIC[task]

    # 3. single_turn_mix: VASD at each mix (seed 0), scored on the chosen task's dev tasks (SCALE=gpu); at SCALE=cpu
    # the choice recorded by the fresh-clone run on the same dev tasks, if it was made for this task and start model
    start_model = "sft" if start_choice["sft"] else "base"
    models: dict[tuple, Path] = {}
    mix_choice = None if CHOOSE_IN_RUN else recorded_mix(task, start_model)
    if mix_choice is None:
        dev_file = write_lic_file(dev_items[task], data / f"dev-{task}.json")
        dev_after = {}
        for mix in MIXES:
            models["vasd", mix, v["mix_seed"]] = _train("vasd", start, steps, mix, v["mix_seed"], out, logs)
            result = _lic(models["vasd", mix, v["mix_seed"]], dev_file,
                          out / "dev" / f"vasd-mix{mix}-seed{v['mix_seed']}", logs / "dev.log", c["dev_n"],
                          ev["max_new_tokens"])  # fmt: skip
            seen[f"mix {mix}"] = sorted(result["full"])
            dev_after[mix] = views(result)
        mix_choice = choose_mix(views(subset(dev_start, task)), dev_after, v["keep_margin"])
        if not CHOOSE_IN_RUN:
            mix_choice["recorded_not_used"] = _recorded_mismatch(task, start_model)
    mix = mix_choice["chosen"]

    # 4. the seeds of VASD and of the control at the chosen mix (VASD seed 0 is the dev run's model when the mix was
    # chosen in this run; the training call is the same either way)
    for kind in KINDS:
        for seed in seeds_of(kind):
            if (kind, mix, seed) not in models:
                models[kind, mix, seed] = _train(kind, start, steps, mix, seed, out, logs)

    # 5. test: scored once, after every choice
    test_items = family_tasks(task, "test", ev["test_n"])
    test_file = write_lic_file(test_items, data / f"test-{task}.json")
    test = {"before": _lic(start, test_file, out / "test" / "before", logs / "test.log", ev["test_n"],
                           ev["max_new_tokens"])}  # fmt: skip
    for kind in KINDS:
        for seed in seeds_of(kind):
            test[kind, seed] = _lic(models[kind, mix, seed], test_file, out / "test" / f"{kind}-seed{seed}",
                                    logs / "test.log", ev["test_n"], ev["max_new_tokens"])  # fmt: skip
    s = ev["sampled"]
    sampled = {"before": _lic(start, test_file, out / "test_sampled" / "before", logs / "test.log", s["n"],
                              ev["max_new_tokens"], sampled=True),
               "after": _lic(models["vasd", mix, SEEDS[0]], test_file, out / "test_sampled" / f"vasd-seed{SEEDS[0]}",
                             logs / "test.log", s["n"], ev["max_new_tokens"], sampled=True)}  # fmt: skip
    training = {f"{kind}-mix{m}-seed{seed}": _train_summary(path) for (kind, m, seed), path in models.items()}
    measured = {
        "split": {"dev": sorted({i[0] for items in [*base_items.values(), *dev_items.values()] for i in items}),
                  "test": [i[0] for i in test_items]},
        "choices": {"start": start_choice, "task": task_choice, "mix": mix_choice}, "seen": seen,
        "start_model": start_model, "test": test, "sampled": sampled,
        "training": training,
    }  # fmt: skip
    return section(measured)


def estimated_seconds(settings: dict = SETTINGS, time: dict = TIME, choose_in_run: bool | None = None) -> float:
    """The part's wall time from `TIME` (the arithmetic of the module docstring), for the 1-update task; with the
    `single_turn_mix` chosen in the run (VASD at each mix, seed 0, scored on dev; one of them is the chosen mix's
    seed 0) or read from dev_choices.json (`choose_in_run` False; default: `CHOOSE_IN_RUN`)."""
    choose_in_run = CHOOSE_IN_RUN if choose_in_run is None else choose_in_run
    c, ev, v = settings["candidates"], settings["eval"], settings["vasd"]
    steps = dict(item.split("=", 1) for item in v["overrides"]).get("max_steps", v["recipe_values"]["max_steps"])
    steps = int(steps)
    lic = lambda n: time["lic_load"] + n * time["lic_task"]  # noqa: E731
    vasd = time["train_load"] + steps * time["vasd_step"]
    control = time["train_load"] + steps * time["self_sft_step"]
    n_mixes = len(v["mixes"]) if choose_in_run else 0
    n_vasd = len(v["seeds"]) + max(n_mixes - 1, 0)
    n_control = len(v["control_seeds"])
    return (time["candidates_base"] + time["sft"] + lic(2 * c["dev_n"]) + n_mixes * lic(c["dev_n"])
            + n_vasd * vasd + n_control * control + (1 + len(v["seeds"]) + n_control) * lic(ev["test_n"])
            + 2 * (time["lic_load"] + ev["sampled"]["n"] * time["lic_sampled_task"]))  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sft":
        sft(Path(sys.argv[2]))
    else:
        raise SystemExit("usage: python reproduce/vasd.py sft OUT_DIR")
