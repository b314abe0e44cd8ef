"""The `method: vasd` recipe entry point: build VASD rows from the recipe's data, train, measure, summarise.

The `vasd` row of `fic.trainers.methods` names this module (`check_recipe`, `main`, `PLAN`) and `VASDConfig`; the
trainer itself lives in `fic.trainers.vasd.trainer`.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer

from fic.chat import full_view, render, sharded_view, validate_messages
from fic.data.records import DataError
from fic.data.sharding import shard_math_problem
from fic.data.splits import load_training
from fic.data.synthetic import make_tasks, vasd_shard_rows
from fic.eval.lic import LiCTask, evaluate_views, run_lic
from fic.generation import HFBackend
from fic.metrics import recovery as gap_closed
from fic.metrics import recovery_target
from fic.modeling import ModelArguments, resolve_model_name
from fic.recipe import RecipeError
from fic.trainers.common import check_recipe_data, default_callbacks, prepare, resume_point, write_summary
from fic.trainers.plan import MethodPlan
from fic.trainers.vasd.trainer import VASDConfig, VASDTrainer

logger = logging.getLogger(__name__)

# The paper's result as a ratio, P_sharded(after) >= 0.92 P_full; checked on the recovery scale (`recovery_target`).
PAPER_SHARDED_OVER_FULL = 0.92


def load_rows(path: str) -> list[dict]:
    """VASD rows from a JSONL file; each row needs `prompt` and `teacher_prompt` message lists."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"train_data: {path!r} is not a file; pass a JSONL of rows with prompt and teacher_prompt")
    rows = []
    for i, line in enumerate(file.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"train_data: {path} line {i + 1} is not JSON ({err})") from None
        for column in ("prompt", "teacher_prompt"):
            if column not in row:
                raise DataError(f"train_data: {path} line {i + 1} has no {column!r} column")
            validate_messages(row[column], where=f"train_data line {i + 1} {column}")
        rows.append(row)
    if not rows:
        raise DataError(f"train_data: {path} holds no rows")
    return rows


def reference_completion(reference: str) -> str:
    """A reference solution as an off-policy completion: without GSM8K's `<<48/2=24>>` calculator annotations, which
    the data's annotators' tool wrote and neither view of the model would (`48/2 = <<48/2=24>>24` -> `48/2 = 24`)."""
    return re.sub(r"<<[^<>]*>>", "", reference)


def dataset_rows(spec: str, limit: int | None = None, allow_test: bool = False) -> list[dict]:
    """VASD rows from a dataset source (`NAME:PATH` or a hub name): the rule sharder splits each math problem.

    Each row is `shards` (the student plays the sharded conversation itself, answering every shard but the last),
    `teacher_prompt` (the fully specified single-turn view) and, when the data has one, the reference `completion`.
    Lost-in-Conversation records keep their own shards. Items that shard into fewer than two pieces are skipped.
    """
    rows, skipped = [], 0
    for record in load_training("train_data", spec, limit=limit, allow_test=allow_test):
        question = record.messages[-1]["content"]
        shards = record.meta.get("shards") or shard_math_problem(question)
        if len(shards) < 2:
            skipped += 1
            continue
        row = {"shards": list(shards), "teacher_prompt": full_view(question)}
        if record.reference:
            row["completion"] = [{"role": "assistant", "content": reference_completion(record.reference)}]
        rows.append(row)
    if skipped:
        logger.warning("%s: %d items gave fewer than two shards and are skipped", spec, skipped)
    if not rows:
        raise DataError(f"train_data: {spec!r} gave no item with at least two shards")
    return rows


def _lic_after(output_dir: str, test) -> dict:
    """`fic lic` (FULL / CONCAT / SHARDED, greedy) on the saved model and the test tasks, written to OUTPUT_DIR/lic/."""
    lic_dir = Path(output_dir) / "lic"
    shutil.rmtree(lic_dir, ignore_errors=True)  # episodes of an earlier run's model are no results of this one
    backend = HFBackend(output_dir, batch_size=256)
    tasks = [LiCTask(t.id, t.full_prompt, list(t.shards), t.check) for t in test]
    summary = run_lic(backend, backend.tokenizer, tasks, lic_dir, max_new_tokens=8, chunk_size=256, model=output_dir)
    return {k: summary[k] for k in ("p_full", "p_concat", "p_sharded", "sharded_over_full") if k in summary}


def print_views(result: dict) -> None:
    """Single-turn vs multi-turn performance before and after, as `make demo` shows it."""
    rows = [("p_full (single turn)", "p_full"), ("p_concat (all shards, one turn)", "p_concat"),
            ("p_sharded (one shard per turn)", "p_sharded")]  # fmt: skip
    print(f"\n{'':34}{'before':>8}{'after':>8}")
    for name, key in rows:
        print(f"{name:34}{result['before'][key]:8.3f}{result['after'][key]:8.3f}")
    rec = result["recovery"]
    target = result.get("recovery_target")
    value = f"{rec:8.3f}" if rec is not None else f"     n/a ({result.get('recovery_reason')})"
    if target is not None:
        value += f"  (target {target:.3f}: p_sharded >= {PAPER_SHARDED_OVER_FULL} p_full(before))"
    print(f"{'recovery (share of the gap closed)':34}{'':8}{value}")
    print("checks: " + ", ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in result["checks"].items()))


def check_recipe(recipe) -> None:
    """What `main` needs from the recipe, checked by `train.py` before any model loads."""
    args = recipe.get(VASDConfig)
    if not (args.train_data or args.synthetic_tasks):
        raise RecipeError(
            "train_data / synthetic_tasks: both empty; a vasd recipe needs train_data=PATH.jsonl (rows with prompt and "
            "teacher_prompt), train_data=NAME:PATH (a dataset to shard) or synthetic_tasks=N"
        )
    if args.train_data and args.train_data.endswith(".jsonl") and ":" not in args.train_data:
        if not Path(args.train_data).is_file():
            raise DataError(f"train_data: {args.train_data!r} is not a file; pass a JSONL of rows with prompt and "
                            "teacher_prompt")  # fmt: skip
        check_recipe_data(recipe)
    else:
        check_recipe_data(recipe, train_data=[args.train_data] if args.train_data else [])


def synthetic_run(run, start: float) -> None:
    """VASD on `synthetic_tasks` rows, measured before and after: the flow `make demo` (`recipe=fic_tiny`) shows.

    The `synthetic_eval_tasks` test tasks are scored greedily (`fic.eval.lic.evaluate_views`: p_full, p_concat,
    p_sharded) before and after training. Each training row's student view is the sharded conversation that the
    current student plays itself, its teacher view one single-turn phrasing (`fic.data.synthetic.vasd_shard_rows`).
    Then `fic lic` runs on the saved model (OUTPUT_DIR/lic/), the checks are made (a multi-turn gap before that
    CONCAT does not show, recovery at least the paper's target, single-turn views kept), all of it goes to
    OUTPUT_DIR/eval_summary.json and the before/after table is printed.

    Recovery is the share of the multi-turn gap closed, `fic.metrics.recovery`: (p_sharded(after) -
    p_sharded(before)) / (p_full(before) - p_sharded(before)); None, with the reason, without a gap before. The
    paper's "p_sharded(after) >= 0.92 p_full" is checked on that scale: recovery >= `fic.metrics.recovery_target`
    (the same statement at these before scores), written as `recovery_target`.
    """
    args = run.args
    steps = args.synthetic_task_steps
    train = make_tasks(args.synthetic_tasks, seed=args.seed + 2, split="train", steps=steps)
    test = make_tasks(args.synthetic_eval_tasks, seed=args.seed + 1, split="test", steps=steps)
    timings = {"load": time.time() - start}
    threads = torch.get_num_threads()
    if not torch.cuda.is_available():  # many tiny generation steps: one thread is faster here than two
        torch.set_num_threads(1)
    try:
        t = time.time()
        before = evaluate_views(run.model, run.tokenizer, test) if test else None
        timings["eval_before"] = time.time() - t
        trainer = VASDTrainer(
            model=run.model, args=args, train_dataset=Dataset.from_list(vasd_shard_rows(train, seed=args.seed)),
            processing_class=run.tokenizer, peft_config=run.peft_config, callbacks=default_callbacks(run),
        )  # fmt: skip
        t = time.time()
        result = trainer.train(resume_from_checkpoint=resume_point(args))
        timings["vasd"] = time.time() - t
        trainer.save_model(args.output_dir)
        trainer.model.eval()
        t = time.time()
        after = evaluate_views(trainer.model, run.tokenizer, test) if test else None
        timings["eval_after"] = time.time() - t
    finally:
        torch.set_num_threads(threads)
    name = run.model_args.model_name_or_path
    summary = dict(method="vasd", rows=len(train), train_loss=result.training_loss, model=name,
                   base_dir=resolve_model_name(name))  # fmt: skip
    if before is None:
        write_summary(args.output_dir, {}, {}, wall_s=round(time.time() - start, 1), **summary)
        return
    logger.info("before VASD: %s", before.summary())
    logger.info("after VASD: %s", after.summary())
    rec = gap_closed(before.p_full, before.p_sharded, after.p_sharded)
    target = recovery_target(before.p_full, before.p_sharded, PAPER_SHARDED_OVER_FULL)
    eps = 1e-9  # scores are counts / n: compare without float noise (1.0 - 0.02 vs 196 / 200)
    checks = {
        "gap_before": before.p_sharded < 0.8 * before.p_full,
        "concat_like_full_before": abs(before.p_concat - before.p_full) <= 0.05 + eps,
        "recovery_at_least_target": rec["recovery"] is not None and rec["recovery"] >= target - eps,
        "full_kept": after.p_full >= before.p_full - 0.02 - eps,
        "concat_kept": after.p_concat >= before.p_concat - 0.02 - eps,
    }
    lic = _lic_after(args.output_dir, test)
    timings["total"] = time.time() - start
    write_summary(
        args.output_dir, before.summary(), after.summary(), recovery=rec["recovery"], recovery_reason=rec["reason"],
        recovery_target=target, checks=checks,
        passed=all(checks.values()), timings_s=timings, wall_s=round(time.time() - start, 1), lic_after=lic, **summary,
    )  # fmt: skip
    print_views({"before": before.summary(), "after": after.summary(), "recovery": rec["recovery"],
                 "recovery_reason": rec["reason"], "recovery_target": target, "checks": checks})  # fmt: skip


def main(recipe) -> None:
    """Run a `method: vasd` recipe.

    Rows come from `train_data` (JSONL rows with `prompt` and `teacher_prompt`, or a dataset spec the rule sharder
    splits) or from `synthetic_tasks` (`synthetic_run`: measured before and after). The model is named like any
    recipe's (`tiny:chatml:synthetic` is the demo's base, trained on the synthetic task's single-turn views).
    """
    start = time.time()
    args = recipe.get(VASDConfig)
    run = prepare(recipe, VASDConfig)
    if args.train_data and args.train_data.endswith(".jsonl") and ":" not in args.train_data:
        rows = load_rows(args.train_data)
    elif args.train_data:
        rows = dataset_rows(args.train_data, limit=args.train_limit, allow_test=bool(recipe.raw.get("train_on_test")))
    elif args.synthetic_tasks:
        synthetic_run(run, start)
        return
    else:
        check_recipe(recipe)
    trainer = VASDTrainer(
        model=run.model, args=args, train_dataset=Dataset.from_list(rows), processing_class=run.tokenizer,
        peft_config=run.peft_config, callbacks=default_callbacks(run),
    )  # fmt: skip
    result = trainer.train(resume_from_checkpoint=resume_point(args))
    trainer.save_model(args.output_dir)
    if not trainer.is_world_process_zero():  # one writer: the ranks would race on the same temporary file
        return
    write_summary(
        args.output_dir, {}, {}, method="vasd", rows=len(rows), train_loss=result.training_loss,
        wall_s=round(time.time() - start, 1),
    )  # fmt: skip


def _plan_reads(args: VASDConfig, eval_config) -> list[tuple]:
    out = []
    if args.train_data and not (args.train_data.endswith(".jsonl") and ":" not in args.train_data):
        out.append(("train", "train_data", args.train_data, args.train_limit))
    ev = eval_config
    lic = ev.block("lic")
    if "lic" in ev.evaluations and lic.data and lic.data != "synthetic" and ev.enabled:
        out.append(("eval", "eval.lic.data", lic.data, lic.limit))
    return out


def _plan_rows(args: VASDConfig, items: list) -> int | None:
    """Synthetic tasks, the lines of a local rows file, or the dataset's items with at least two shards."""
    if args.synthetic_tasks:
        return args.synthetic_tasks
    if args.train_data and args.train_data.endswith(".jsonl") and ":" not in args.train_data:
        path = Path(args.train_data)
        return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.is_file() else None
    train = [i for i in items if i.role == "train"]
    if not train or any(i.rows is None for i in train):
        return None
    return sum(
        1 for r in train[0].records if len(r.meta.get("shards") or shard_math_problem(r.messages[-1]["content"])) >= 2
    )


def _plan_prompt_lengths(recipe, args, items: list) -> list[str]:
    """The longest student prompt the sharded rows will produce, against max_prompt_length (and the teacher's)."""
    train = [i for i in items if i.role == "train" and i.records]
    if not train:
        return []
    reply = args.rollout_max_new_tokens or args.max_completion_length or 0
    tokenizer, how = None, "estimated at 4 characters per token (tokenizer not available offline)"
    try:
        name = resolve_model_name(recipe.get(ModelArguments).model_name_or_path)
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
        how = "with the model's tokenizer and template"
    except Exception:
        pass
    candidates = []
    for record in train[0].records:
        question = record.messages[-1]["content"]
        shards = record.meta.get("shards") or shard_math_problem(question)
        if len(shards) >= 2:
            candidates.append((len(shards), len(question), shards, question))
    if not candidates:
        return []
    candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)

    def count(messages) -> int:
        if tokenizer is None:
            return sum(len(m["content"]) for m in messages) // 4 + 8 * len(messages)
        return len(
            tokenizer(render(tokenizer, messages, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
        )

    longest, longest_teacher = 0, 0
    for n, _, shards, question in candidates[:20]:
        longest = max(longest, count(sharded_view(shards, ["x"] * (n - 1))) + (n - 1) * reply)
        longest_teacher = max(longest_teacher, count(full_view(question)))
    lines = [
        f"longest student prompt: {longest} tokens ({candidates[0][0]} shards, replies of {reply} tokens; {how}) "
        f"against max_prompt_length={args.max_prompt_length}"
        + ("" if args.max_prompt_length is None or longest <= args.max_prompt_length else "  WARNING: over the limit"),
        f"longest teacher prompt: {longest_teacher} tokens against max_teacher_prompt_length="
        f"{args.max_teacher_prompt_length}",
    ]
    return lines


PLAN = MethodPlan(
    reads=_plan_reads,
    reads_eval_datasets=lambda ev: ev.enabled and "probe" in ev.evaluations,
    train_rows=_plan_rows,
    dataset_lines=lambda args: (
        [f"  train synthetic_tasks={args.synthetic_tasks} (generated; test split held out)"]
        if args.synthetic_tasks
        else []
    ),
    extra_lines=_plan_prompt_lengths,
)
