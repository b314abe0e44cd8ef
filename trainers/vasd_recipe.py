"""The `method: vasd` recipe entry point: build VASD rows from the recipe's data, train, measure, summarise.

`train.py` imports this module (`CONFIG_CLASS`, `main`); the trainer itself lives in `fic.trainers.vasd`.
"""

from __future__ import annotations

import logging

from fic.trainers.vasd import VASDConfig, VASDTrainer

logger = logging.getLogger(__name__)

CONFIG_CLASS = VASDConfig

TINY_BASE = "vasd_tiny"


def load_rows(path: str) -> list[dict]:
    """VASD rows from a JSONL file; each row needs `prompt` and `teacher_prompt` message lists."""
    import json
    from pathlib import Path

    from fic.chat import validate_messages

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"train_data: {path!r} is not a file; pass a JSONL of rows with prompt and teacher_prompt")
    rows = []
    for i, line in enumerate(file.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"train_data: {path} line {i + 1} is not JSON ({err})") from None
        for column in ("prompt", "teacher_prompt"):
            if column not in row:
                raise ValueError(f"train_data: {path} line {i + 1} has no {column!r} column")
            validate_messages(row[column], where=f"train_data line {i + 1} {column}")
        rows.append(row)
    if not rows:
        raise ValueError(f"train_data: {path} holds no rows")
    return rows


def reference_completion(reference: str) -> str:
    """A reference solution as an off-policy completion: without GSM8K's `<<48/2=24>>` calculator annotations, which
    the data's annotators' tool wrote and neither view of the model would (`48/2 = <<48/2=24>>24` -> `48/2 = 24`)."""
    import re

    return re.sub(r"<<[^<>]*>>", "", reference)


def dataset_rows(spec: str, limit: int | None = None, allow_test: bool = False) -> list[dict]:
    """VASD rows from a dataset source (`NAME:PATH` or a hub name): the rule sharder splits each math problem.

    Each row is `shards` (the student plays the sharded conversation itself, answering every shard but the last),
    `teacher_prompt` (the fully specified single-turn view) and, when the data has one, the reference `completion`.
    Lost-in-Conversation records keep their own shards. Items that shard into fewer than two pieces are skipped.
    """
    from fic.chat import full_view
    from fic.data.sharding import shard_math_problem
    from fic.data.splits import load_training

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
        raise ValueError(f"train_data: {spec!r} gave no item with at least two shards")
    return rows


def _lic_after(output_dir: str, settings) -> dict:
    """`fic lic` (FULL / CONCAT / SHARDED, greedy) on the distilled tiny model, written to OUTPUT_DIR/lic/."""
    from fic.data.synthetic import make_tasks
    from fic.eval.lic import LiCTask, run_lic
    from fic.generation import HFBackend

    backend = HFBackend(output_dir, batch_size=256)
    test = make_tasks(settings.eval_tasks, seed=settings.seed + 1, split="test", steps=settings.task_steps)
    tasks = [LiCTask(t.id, t.full_prompt, list(t.shards), t.check) for t in test]
    summary = run_lic(backend, backend.tokenizer, tasks, f"{output_dir}/lic", max_new_tokens=8, chunk_size=256)
    return {k: summary[k] for k in ("p_full", "p_concat", "p_sharded", "recovery") if k in summary}


def print_views(result: dict) -> None:
    """Single-turn vs multi-turn performance before and after, as `make demo` shows it."""
    rows = [("P_full (single turn)", "p_full"), ("P_concat (all shards, one turn)", "p_concat"),
            ("P_sharded (one shard per turn)", "p_sharded")]  # fmt: skip
    print(f"\n{'':34}{'before':>8}{'after':>8}")
    for name, key in rows:
        print(f"{name:34}{result['before'][key]:8.3f}{result['after'][key]:8.3f}")
    print(f"{'recovery P_sharded/P_full(before)':34}{'':8}{result['recovery']:8.3f}")
    print("checks: " + ", ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in result["checks"].items()))


def main(recipe) -> None:
    """Run a `method: vasd` recipe.

    `model_name_or_path: vasd_tiny` runs the tiny end-to-end pipeline (`fic.trainers.vasd_tiny.run_tiny_vasd`): the
    tiny base is trained or read from its cache, then VASD with this recipe's `VASDConfig`. Any other model trains on
    `train_data` (JSONL rows) or on `synthetic_tasks` built with the model's own rollouts. Measurements before and
    after (synthetic tasks) go to `OUTPUT_DIR/eval_summary.json`.
    """
    import time

    from datasets import Dataset

    from fic.modeling import ModelArguments
    from fic.trainers.common import default_callbacks, prepare, resume_point, write_summary

    start = time.time()
    args = recipe.get(VASDConfig)
    if recipe.get(ModelArguments).model_name_or_path == TINY_BASE:
        from fic.trainers.vasd_tiny import TinyVASDSettings, run_tiny_vasd

        settings = TinyVASDSettings(
            vasd_tasks=args.synthetic_tasks or TinyVASDSettings.vasd_tasks,
            eval_tasks=args.synthetic_eval_tasks,
            task_steps=args.synthetic_task_steps,
            seed=args.seed,
            output_dir=args.output_dir,
        )
        result = run_tiny_vasd(settings, vasd_args=args)
        lic = _lic_after(args.output_dir, settings)
        write_summary(
            args.output_dir, result["before"], result["after"], method="vasd", recovery=result["recovery"],
            checks=result["checks"], passed=result["passed"], timings_s=result["timings_s"], base_dir=result["base_dir"],
            wall_s=round(time.time() - start, 1), lic_after=lic,
        )  # fmt: skip
        print_views(result)
        return

    run = prepare(recipe, VASDConfig)
    before = after = {}
    if args.train_data and args.train_data.endswith(".jsonl") and ":" not in args.train_data:
        rows = load_rows(args.train_data)
    elif args.train_data:
        rows = dataset_rows(args.train_data, limit=args.train_limit, allow_test=bool(recipe.raw.get("train_on_test")))
    elif args.synthetic_tasks:
        from fic.data.synthetic import make_tasks
        from fic.trainers.vasd_tiny import evaluate_views, vasd_shard_rows

        steps = args.synthetic_task_steps
        train = make_tasks(args.synthetic_tasks, seed=args.seed + 2, split="train", steps=steps)
        test = make_tasks(args.synthetic_eval_tasks, seed=args.seed + 1, split="test", steps=steps)
        before = evaluate_views(run.model, run.tokenizer, test).summary() if test else {}
        rows = vasd_shard_rows(train, seed=args.seed)
    else:
        raise ValueError(
            "train_data / synthetic_tasks: a vasd recipe needs train_data=PATH.jsonl or synthetic_tasks=N"
        )
    trainer = VASDTrainer(
        model=run.model, args=args, train_dataset=Dataset.from_list(rows), processing_class=run.tokenizer,
        peft_config=run.peft_config, callbacks=default_callbacks(run),
    )  # fmt: skip
    result = trainer.train(resume_from_checkpoint=resume_point(args))
    trainer.save_model(args.output_dir)
    if args.synthetic_tasks and args.synthetic_eval_tasks:
        after = evaluate_views(trainer.model, run.tokenizer, test).summary()
    write_summary(
        args.output_dir, before, after, method="vasd", rows=len(rows), train_loss=result.training_loss,
        wall_s=round(time.time() - start, 1),
    )  # fmt: skip
