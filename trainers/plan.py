"""`train.py recipe=NAME [overrides] --plan [--processes N]`: what a recipe will read and do, without loading a model.

Prints each dataset (role, split, rows, source), the optimizer steps, examples per optimizer step for N processes
(default: $WORLD_SIZE or 1), epochs, warmup steps, the saves and in-training evaluations that will fire, for VASD the
longest student prompt the data will produce (sharded conversations with replies of `rollout_max_new_tokens`) against
`max_prompt_length`, the evaluation cost (prompts x samples x tokens) and each evaluation's estimated minutes, with
one warning line for an evaluation that would pass `ddp_timeout` (`fic.trainers.plan_cost`). It never downloads: a hub dataset that is
not cached is reported as not readable. It fails (`PlanError`, exit 1) when training reads a test split (unless the
recipe sets `train_on_test: true`) or when training and evaluation data overlap: the same file or hub split, or the
same items by content hash. Collab SFT and follow-up RL drop the training items that open a held-out conversation
themselves, so there an overlap is reported with the number of items dropped, and fails only when nothing is left.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fic.data import load_source
from fic.data.sources import get_source, parse_spec
from fic.data.splits import check_training_split, spec_split, split_spec
from fic.errors import FicError
from fic.eval_config import EvalConfig
from fic.judges.provenance import overlap, overlap_line
from fic.trainers.methods import get_method
from fic.trainers.plan_cost import TOKENS_PER_SECOND, time_lines


class PlanError(FicError, ValueError):
    """The recipe would train on its evaluation data or on a test split."""


@dataclass
class DataPlan:
    role: str  # "train" or "eval"
    field: str
    spec: str
    limit: int | None
    split: str | None = None
    rows: int | None = None
    source: str = ""
    problem: str | None = None
    records: list = field(default_factory=list, repr=False)

    @property
    def hashes(self) -> set[str]:
        return {item_hash(r) for r in self.records}


def summed_rows(args, items: list[DataPlan]) -> int | None:
    """Training examples = the rows of every training dataset (None when one is not readable)."""
    train = [i for i in items if i.role == "train"]
    if not train or any(i.rows is None for i in train):
        return None
    return sum(i.rows for i in train)


def no_lines(*_) -> list[str]:
    return []


@dataclass(frozen=True)
class MethodPlan:
    """What `train.py --plan` needs to know of a method; each method module exposes one as `PLAN`.

    Args:
        reads: `(args, eval_config) -> [(role, field, spec, limit), ...]`: the datasets the method itself reads.
        reads_eval_datasets: `eval_config -> bool`: whether the held-out `eval.datasets` are read (probed).
        drops_heldout: the trainer drops training items that open a held-out conversation itself, so an overlap
            is a note (with the count dropped), not an error.
        unit: what an optimizer step counts (`examples`, `completions`).
        per_row: `args -> int`: units per training row (follow-up RL: `num_generations` completions per prompt);
            None: one.
        train_rows: `(args, items) -> int | None`: training rows the data gives.
        rows_note: said after the training rows (collab SFT: they are an upper bound).
        dataset_lines: `args -> [str]`: datasets the method makes rather than reads (VASD's synthetic tasks).
        extra_lines: `(recipe, args, items) -> [str]`: method checks (VASD: the longest prompts against the limits).
        evaluations_outside_saves: held-out evaluations besides the in-training ones (before and after: 2).
    """

    reads: Callable[[Any, Any], list[tuple[str, str, str, int | None]]]
    reads_eval_datasets: Callable[[Any], bool] = lambda ev: True
    drops_heldout: bool = False
    unit: str = "examples"
    per_row: Callable[[Any], int] | None = None
    train_rows: Callable[[Any, list[DataPlan]], int | None] = summed_rows
    rows_note: str = ""
    dataset_lines: Callable[[Any], list[str]] = no_lines
    extra_lines: Callable[[Any, Any, list[DataPlan]], list[str]] = no_lines
    evaluations_outside_saves: int = 0


def item_hash(record) -> str:
    """Content hash of an item: its first user message, whitespace and case folded."""
    first = next((m["content"] for m in record.messages if m.get("role") == "user"), "")
    return hashlib.sha256(" ".join(str(first).lower().split()).encode()).hexdigest()[:16]


def source_key(spec: str, split: str | None) -> str:
    """What identifies the data behind a spec: the resolved file, or the hub source and split."""
    bare, _ = split_spec(spec)
    name, path = parse_spec(bare)
    if path is not None:
        return str(Path(path).expanduser().resolve())
    return f"{name}@{split}"


def read(role: str, field_name: str, spec: str, limit: int | None) -> DataPlan:
    item = DataPlan(role, field_name, spec, limit)
    try:
        item.split = spec_split(spec, training=role == "train")
        bare, _ = split_spec(spec)
        name, path = parse_spec(bare)
        source = get_source(name)
        item.source = (
            path
            if path is not None
            else f"hub {source.hub_id}" + (f" ({source.hub_config})" if source.hub_config else "")
        )
        item.records = load_source(spec, limit=limit, split=item.split if path is None else None)
        item.rows = len(item.records)
    except Exception as err:  # a plan reports what it cannot read instead of failing on it
        item.problem = f"not readable ({type(err).__name__}: {str(err)[:160]})"
    return item


def datasets(recipe, plan: MethodPlan) -> list[DataPlan]:
    """Every dataset the recipe names, with its role."""
    args = method_args(recipe)
    ev = recipe.get(EvalConfig)
    out = [read(role, field_name, spec, limit) for role, field_name, spec, limit in plan.reads(args, ev)]
    if plan.reads_eval_datasets(ev):
        out += [read("eval", "eval.datasets", s, ev.limit) for s in ev.datasets]
    return out


def method_args(recipe):
    """The method's own config (its `<Method>Config`, named by its row in `fic.trainers.methods`)."""
    return recipe.get(get_method(recipe.method).config_class())


def check(recipe, items: list[DataPlan], plan: MethodPlan) -> list[str]:
    """Raise `PlanError` on a test split in training or on train/eval overlap; notes for overlaps a trainer drops."""
    notes = []
    allow_test = bool(recipe.raw.get("train_on_test"))
    drops = plan.drops_heldout
    for train in (i for i in items if i.role == "train"):
        for ev in (i for i in items if i.role == "eval"):
            same = source_key(train.spec, train.split) == source_key(ev.spec, ev.split)
            shared = train.hashes & ev.hashes
            if not same and not shared:
                continue
            what = "the same file" if same and ":" in train.spec else ("the same hub split" if same else "")
            detail = ", ".join(x for x in (what, f"{len(shared)} items with the same content" if shared else "") if x)
            message = f"training data {train.field}={train.spec!r} overlaps evaluation data {ev.field}={ev.spec!r} ({detail})"
            if not drops:
                raise PlanError(message + "; train on the train split and evaluate on the test split")
            left = sum(1 for r in train.records if item_hash(r) not in ev.hashes)
            if train.rows is not None and left == 0:
                raise PlanError(message + "; no training item would be left after dropping the held-out ones")
            notes.append(f"note: {message}; the trainer drops the {len(shared)} held-out items ({left} left)")
    for item in items:  # after the overlap check, so train=test data is named as the overlap it is
        if item.role == "train":
            try:
                check_training_split(item.field, item.spec, allow_test)
            except Exception as err:
                raise PlanError(str(err)) from None
    return notes


def schedule(recipe, args, train_rows: int | None, processes: int, plan: MethodPlan) -> list[str]:
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * processes
    lines = []
    unit = plan.unit
    examples = train_rows
    if plan.per_row is not None and train_rows is not None:
        per_row = plan.per_row(args)
        examples = train_rows * per_row
        lines.append(f"prompts per optimizer step: {per_step // max(per_row, 1)}")
    lines.insert(0, f"{unit} per optimizer step: {per_step} ({args.per_device_train_batch_size} per device x "
                    f"{args.gradient_accumulation_steps} accumulation x {processes} processes)")  # fmt: skip
    if args.max_steps and args.max_steps > 0:
        steps = args.max_steps
        epochs = f"{steps * per_step / examples:.2f}" if examples else "?"
    elif examples is not None:
        steps = math.ceil(examples / per_step) * math.ceil(args.num_train_epochs)
        epochs = f"{args.num_train_epochs:g}"
    else:
        steps, epochs = None, f"{args.num_train_epochs:g}"
    lines.append(f"optimizer steps: {steps if steps is not None else '? (training data not readable)'}")
    lines.append(f"epochs: {epochs}")
    warmup = args.warmup_steps or 0
    if steps is not None:
        warm = math.ceil(warmup * steps) if 0 < warmup < 1 else int(warmup)
        lines.append(f"warmup steps: {warm}")
    saves = save_steps(args, steps, examples, per_step)
    lines.append(f"saves: {len(saves)} at steps {saves[:12]}{' ...' if len(saves) > 12 else ''}")
    ev = recipe.get(EvalConfig)
    if ev.enabled:
        fired = saves[ev.every_n_saves - 1 :: ev.every_n_saves]
        lines.append(f"in-training evaluations ({', '.join(ev.evaluations)}): {len(fired)} at steps {fired}")
    else:
        lines.append("in-training evaluations: none (eval.enabled is false)")
    return lines


def save_steps(args, steps: int | None, examples: int | None, per_step: int) -> list[int]:
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if steps is None or strategy == "no":
        return []
    if strategy == "steps":
        every = math.ceil(args.save_steps * steps) if args.save_steps < 1 else int(args.save_steps)
        return list(range(every, steps + 1, every))
    if strategy == "epoch" and examples:
        per_epoch = math.ceil(examples / per_step)
        return [e * per_epoch for e in range(1, math.ceil(steps / per_epoch) + 1) if e * per_epoch <= steps] or [steps]
    return [steps] if strategy == "best" else []


def eval_cost(recipe, items: list[DataPlan], evaluations: int) -> list[str]:
    ev = recipe.get(EvalConfig)
    lines = []
    per_prompt = sum(1 if t == 0 else ev.samples for t in ev.temperatures) * max(len(ev.perturbations), 1)
    for item in (i for i in items if i.role == "eval" and i.field == "eval.datasets"):
        prompts = item.rows if item.rows is not None else ev.limit
        lines.append(f"probe {item.spec}: {prompts} prompts x {per_prompt} samples x {ev.max_new_tokens} tokens "
                     f"= {prompts * per_prompt * ev.max_new_tokens} generated tokens per evaluation"
                     + (f" (+ {prompts} answers x {ev.response_tokens} tokens)" if ev.responses == "model" else ""))  # fmt: skip
    lic = ev.block("lic")
    for item in (i for i in items if i.role == "eval" and i.field == "eval.lic.data"):
        prompts = item.rows if item.rows is not None else lic.limit
        lines.append(f"lic {item.spec}: {prompts} tasks x {len(lic.modes)} views x {lic.runs} runs x "
                     f"{lic.max_new_tokens} tokens per answer, per evaluation")  # fmt: skip
    if lines:
        lines.append(f"evaluations: {evaluations}")
    return lines


def judge_fit(recipe, items: list[DataPlan]) -> list[str]:
    """The probe's held-out items against the evaluation judge's fit (`fic.judges.provenance`): one line."""
    ev = recipe.get(EvalConfig)
    evaluated = [(parse_spec(i.spec)[0], r.id, r.messages) for i in items
                 if i.role == "eval" and i.field == "eval.datasets" and i.records for r in i.records]  # fmt: skip
    if not evaluated:
        return []
    found = overlap(ev.judge_settings().build(), evaluated)
    refused = found["n_overlap"] and not ev.allow_judge_overlap
    return [
        overlap_line(found) + (" (refused at evaluation; eval.allow_judge_overlap=true allows it)" if refused else "")
    ]


def make_plan(recipe, processes: int, method, tokens_per_second: float = TOKENS_PER_SECOND) -> str:
    """The plan as text for `recipe` of `method` (a `fic.trainers.methods.Method`: its module's `PLAN`); raises
    `PlanError` on a test split in training or train/eval overlap. `tokens_per_second`: the generation rate per process
    the evaluation time assumes (`fic.trainers.plan_cost`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    plan: MethodPlan = method.plan()
    args = method_args(recipe)
    items = datasets(recipe, plan)
    notes = check(recipe, items, plan)
    lines = [f"plan for recipe {recipe.name} (method {recipe.method}), {processes} process(es)", "datasets:"]
    for i in items:
        state = i.problem or f"{i.rows} rows"
        lines.append(f"  {i.role:5} {i.field}={i.spec} split={i.split or '-'} {state} source={i.source or '?'}"
                     + (f" (limit {i.limit})" if i.limit else ""))  # fmt: skip
    lines += plan.dataset_lines(args)
    rows = plan.train_rows(args, items)
    lines.append(f"training examples: {rows if rows is not None else '?'}" + plan.rows_note)
    sched = schedule(recipe, args, rows, processes, plan)
    lines += sched
    lines += plan.extra_lines(recipe, args, items)
    ev = recipe.get(EvalConfig)
    fired = next((int(s.split(": ")[1].split()[0]) for s in sched if s.startswith("in-training evaluations (")), 0)
    evaluations = fired + plan.evaluations_outside_saves
    lines += eval_cost(recipe, items, evaluations) if ev.datasets or ev.block("lic").data else []
    lines += time_lines(recipe, args, items, fired, plan.evaluations_outside_saves, processes, tokens_per_second)
    lines += judge_fit(recipe, items)
    lines += notes
    return "\n".join(lines)
