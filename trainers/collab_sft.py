"""Collaboration SFT: supervised training on multi-turn conversations with the loss on chosen turns only.

The data flow differs from TRL's `SFTTrainer` in one place: a conversation becomes `input_ids` plus `labels` that
keep only the `train_on` turns, by default every user turn that follows an assistant turn (the genuine follow-ups)
with its end-of-turn token, so the model learns what a collaborative user says next and where that turn stops.
The masks come from the chat template's own rendering (`fic.masks.turn_masks`), so they need no `{% generation %}`
tags and are right on Llama-3.1/3.2 style templates where TRL's assistant masks are not. Everything else (collation,
truncation, packing, the loss) is TRL's, which uses a `labels` column as given.

`main(recipe)` builds the training conversations (real multi-turn data as it is, plus, for `followup_contexts`,
template follow-ups kept by the judge), removes any whose first user message opens a held-out context, measures the
genuine follow-up rate on the held-out contexts (`eval:` block) before and after training with the same judge, and
writes `OUTPUT_DIR/eval_summary.json`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from fic.data.followups import (
    contexts_from_records,
    drop_overlap,
    real_conversations,
    rejection_sample,
    template_followups,
)
from fic.judges import TRAINING_JUDGE, JudgeKind, JudgeSettings
from fic.masks import IGNORE_INDEX, TRAIN_ON, check_train_on, turn_masks
from fic.recipe import RecipeError
from fic.trainers.common import check_recipe_data, default_callbacks, prepare, train_and_measure
from fic.trainers.heldout import heldout_contexts, heldout_records, load_training_records
from fic.trainers.plan import MethodPlan

logger = logging.getLogger(__name__)


@dataclass
class CollabSFTConfig(SFTConfig):
    r"""
    Configuration for [`CollabSFTTrainer`]: TRL's `SFTConfig` plus the turns to train on and the data to build.

    Args:
        train_on (`list[str]`, defaults to `["user_followups"]`):
            Turns whose tokens carry the loss: `user_followups` (every user turn right after an assistant turn, its
            end-of-turn token included), `assistant`, or both.
        train_datasets (`list[str]`, defaults to `[]`):
            Real conversations taken as they are, as dataset specs `NAME:PATH` or `NAME`: `mt_bench` (two turns with
            the reference answers between them), `healthbench` (multi-turn prompts), `conversations` (a JSONL such as
            the output of `fic build-followups`).
        followup_contexts (`list[str]`, defaults to `[]`):
            Datasets whose items, with their reference answer, become contexts for template follow-ups; the judge
            keeps the genuine ones (the offline form of `fic build-followups --candidates templates`).
        followup_candidates (`int`, defaults to `4`):
            Template candidates per context.
        followups_per_context (`int`, defaults to `1`):
            Genuine follow-ups kept per context.
        followup_judge (`str`, defaults to `"strict"`):
            Judge that filters the template candidates, a key of `fic.judges.JUDGES`: `strict` (the judge of
            training signals), `learned`, `heuristic`, or `llm` / `cascade` (these two need
            `followup_judge_base_url` and `followup_judge_model`).
        followup_judge_base_url (`str` or `None`):
            OpenAI-compatible chat endpoint of an `llm` / `cascade` filter judge.
        followup_judge_model (`str` or `None`):
            Model name of that judge at the endpoint.
        followup_judge_contrast (`bool`, defaults to `True`):
            Contrastive filter (`fic.judges.contrast`): a candidate the judge would also call genuine after another
            context's answer is not kept, so generic template turns ("Why is it 1?") do not enter the data.
        dataset_limit (`int` or `None`, defaults to `None`):
            Items read from each training dataset.
    """

    train_on: list[str] = field(
        default_factory=lambda: ["user_followups"],
        metadata={"help": f"Turns that carry the loss: one or more of {', '.join(TRAIN_ON)}."},
    )
    train_datasets: list[str] = field(
        default_factory=list, metadata={"help": "Real multi-turn conversations (dataset specs), used as they are."}
    )
    followup_contexts: list[str] = field(
        default_factory=list, metadata={"help": "Datasets whose items become contexts for judged template follow-ups."}
    )
    followup_candidates: int = field(default=4, metadata={"help": "Template candidates per context."})
    followups_per_context: int = field(default=1, metadata={"help": "Genuine follow-ups kept per context."})
    followup_judge: JudgeKind = field(default=TRAINING_JUDGE, metadata={"help": "Judge for the candidates."})
    followup_judge_base_url: str | None = field(default=None, metadata={"help": "LLM filter judge endpoint."})
    followup_judge_model: str | None = field(default=None, metadata={"help": "LLM filter judge model name."})
    followup_judge_contrast: bool = field(
        default=True, metadata={"help": "Keep only candidates not also genuine after another context's answer."}
    )
    dataset_limit: int | None = field(default=None, metadata={"help": "Items read from each training dataset."})
    chat_template_kwargs: dict | None = field(
        default=None,
        metadata={"help": "Extra chat-template arguments for every rendering, e.g. {enable_thinking: false}."},
    )

    def __post_init__(self):
        self.train_on = check_train_on(self.train_on)
        if self.assistant_only_loss or self.completion_only_loss:
            raise ValueError(
                "assistant_only_loss / completion_only_loss: collaboration SFT chooses the trained turns with "
                "train_on (e.g. train_on=[user_followups,assistant]); leave both unset"
            )
        self.followup_judge_settings()  # the judge's name and endpoint (`fic.judges.JudgeSettings` checks them)
        if self.followup_candidates < 1 or self.followups_per_context < 1:
            raise ValueError("followup_candidates / followups_per_context: both must be at least 1")
        super().__post_init__()

    def followup_judge_settings(self) -> JudgeSettings:
        """The filter judge: `followup_judge`, `followup_judge_base_url`, `followup_judge_model`,
        `followup_judge_contrast`."""
        return JudgeSettings.of(self, "followup_judge")


class CollabSFTTrainer(SFTTrainer):
    """`SFTTrainer` whose conversational data (`messages` column) is tokenized with turn masks from the template.

    A dataset that already has `input_ids` (and `labels`) goes to TRL untouched.
    """

    _tag_names = ["trl", "sft", "fic", "collab-sft"]

    def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):
        columns = dataset.column_names or []
        if "messages" in columns and "input_ids" not in columns:
            tokenizer = getattr(processing_class, "tokenizer", processing_class)
            train_on = getattr(args, "train_on", ["user_followups"])

            def mask(example):
                input_ids, labels = turn_masks(tokenizer, example["messages"], train_on)
                return {"input_ids": input_ids, "labels": labels}

            trained = " or ".join(train_on)
            if not isinstance(dataset, Dataset):  # a streamed dataset: mask lazily, drop what has nothing to train
                dataset = dataset.map(mask, remove_columns=columns)
                dataset = dataset.filter(lambda ex: any(label != IGNORE_INDEX for label in ex["labels"]))
            else:
                dataset = dataset.map(mask, remove_columns=columns, desc=f"Masking {dataset_name} turns ({trained})")
                before = len(dataset)
                dataset = dataset.filter(lambda ex: any(label != IGNORE_INDEX for label in ex["labels"]))
                if len(dataset) < before:
                    logger.warning(
                        "%s: %d conversations have no %s turn and are dropped", dataset_name, before - len(dataset),
                        trained,
                    )  # fmt: skip
                dataset = _drop_cut_conversations(dataset, args, dataset_name)
                if len(dataset) == 0:
                    raise ValueError(
                        f"{dataset_name} dataset: no conversation has a {trained} turn to train on; "
                        "user follow-ups need an assistant turn before them"
                    )
        return super()._prepare_dataset(dataset, processing_class, args, packing, formatting_func, dataset_name)


def _drop_cut_conversations(dataset, args, dataset_name):
    """Warn about conversations longer than `max_length` (TRL cuts them) and drop those the cut leaves untrained."""
    max_length = getattr(args, "max_length", None)
    if not max_length:
        return dataset
    keep = (
        slice(-max_length, None) if getattr(args, "truncation_mode", "keep_start") == "keep_end" else slice(max_length)
    )
    long = [len(ids) > max_length for ids in dataset["input_ids"]]
    if not any(long):
        return dataset
    untrained = [
        is_long and all(label == IGNORE_INDEX for label in labels[keep])
        for is_long, labels in zip(long, dataset["labels"])
    ]
    logger.warning(
        "%s: %d conversations are longer than max_length=%d and are cut (%s); %d of them lose every trained token "
        "and are dropped", dataset_name, sum(long), max_length, args.truncation_mode, sum(untrained),
    )  # fmt: skip
    return dataset.select([i for i, drop in enumerate(untrained) if not drop])


def training_conversations(args: CollabSFTConfig, heldout: list[list[dict]], eval_config,
                           allow_test: bool = False) -> tuple[list[dict], dict]:  # fmt: skip
    """The training conversations for `args` (none opening a `heldout` conversation) and a summary of their origin."""

    def load_records(specs, limit, field):
        return load_training_records(field, specs, limit, allow_test)

    rows, summary = [], {}
    if args.train_datasets:
        # training on assistant turns, a single-turn conversation has tokens to learn from; on follow-ups only, not
        records = load_records(args.train_datasets, args.dataset_limit, "train_datasets")
        real, skipped = real_conversations(records, single_turn="assistant" in args.train_on)
        rows += real
        summary["real"] = {"kept": len(real), "skipped_no_followup": skipped}
    if args.followup_contexts:
        contexts = contexts_from_records(
            load_records(args.followup_contexts, args.dataset_limit, "followup_contexts"), "data"
        )
        contexts, _ = drop_overlap(contexts, heldout)
        candidates = [template_followups(c["messages"], args.followup_candidates, args.seed) for c in contexts]
        judge = args.followup_judge_settings().build()
        kept, counts = rejection_sample(contexts, candidates, judge, args.followups_per_context, origin="template")
        rows += kept
        summary["template"] = {"contexts": len(contexts), "kept": len(kept), "labels": dict(counts)}
    rows, dropped = drop_overlap(rows, heldout)
    summary["dropped_heldout_overlap"] = dropped
    summary["conversations"] = len(rows)
    if not rows:
        raise RecipeError(
            "train_datasets / followup_contexts: no training conversation left; name datasets with multi-turn "
            "conversations or contexts with reference answers"
        )
    return rows, summary


def check_recipe(recipe) -> None:
    """What `main` needs from the recipe, checked by `train.py` before any model loads."""
    args = recipe.get(CollabSFTConfig)
    if not (args.train_datasets or args.followup_contexts):
        raise RecipeError(
            "train_datasets / followup_contexts: both empty; name multi-turn conversations "
            "(train_datasets=[mt_bench:PATH]) or contexts for judged follow-ups (followup_contexts=[gsm8k:PATH])"
        )
    check_recipe_data(recipe, train_datasets=args.train_datasets, followup_contexts=args.followup_contexts)


def main(recipe) -> None:
    """Build the training conversations and the held-out contexts, then `train_and_measure`: the genuine follow-up
    rate before, training, the rate after, `OUTPUT_DIR/eval_summary.json`."""
    start = time.time()
    check_recipe(recipe)
    run = prepare(recipe, CollabSFTConfig)
    args = run.args
    records = heldout_records(run.eval)
    allow_test = bool(recipe.raw.get("train_on_test"))
    rows, data_summary = training_conversations(args, [r.messages for r in records], run.eval, allow_test)
    heldout = heldout_contexts(records, run.eval, run.model, run.tokenizer)
    logger.info("training on %d conversations; %d held-out contexts", len(rows), len(heldout))

    def make_trainer():
        return CollabSFTTrainer(
            model=run.model,
            args=args,
            train_dataset=Dataset.from_list([{"messages": r["messages"]} for r in rows]),
            processing_class=run.tokenizer,
            peft_config=run.peft_config,
            callbacks=default_callbacks(run),
        )

    def summary(trainer, output, before, after) -> dict:
        return {"train_on": args.train_on, "data": data_summary, "train_loss": output.training_loss}

    train_and_measure(run, "collab_sft", records, heldout, make_trainer, summary, start)


def _plan_reads(args: CollabSFTConfig, eval_config) -> list[tuple]:
    return [("train", "train_datasets", s, args.dataset_limit) for s in args.train_datasets] + [
        ("train", "followup_contexts", s, args.dataset_limit) for s in args.followup_contexts
    ]


def _plan_rows(args: CollabSFTConfig, items: list) -> int | None:
    """Real conversations plus at most `followups_per_context` judged follow-ups per context."""
    train = [i for i in items if i.role == "train"]
    if not train or any(i.rows is None for i in train):
        return None
    real = sum(i.rows for i in train if i.field == "train_datasets")
    contexts = sum(i.rows for i in train if i.field == "followup_contexts")
    return real + contexts * args.followups_per_context


PLAN = MethodPlan(reads=_plan_reads, drops_heldout=True, train_rows=_plan_rows,
                  rows_note=" (at most: judged follow-ups)", evaluations_outside_saves=2)  # fmt: skip
