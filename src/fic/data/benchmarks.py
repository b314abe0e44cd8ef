"""Row normalisers for single-answer benchmarks: GSM8K, IFEval, IFBench, GPQA, MT-Bench, HealthBench, Coval.

Each function turns one raw row (from a local file or the hub, same schema) into a :class:`Record`, reading fields
through the checks of :mod:`fic.data.records` so a malformed row names its file, row and field.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checkers import extract_final_number
from .readers import read_local
from .records import DataError, Record, check_messages, check_value, optional, require


@dataclass
class LoadContext:
    """State shared by the rows of one load: source name, local path (`None` for the hub), row index, extras."""

    source: str
    path: Path | None
    index: int = 0
    extras: dict = field(default_factory=dict)


def row_id(row: dict, keys: tuple[str, ...], where: str, ctx: LoadContext) -> str:
    """The first present id field among `keys` as a string, else the 0-based row index."""
    for key in keys:
        if row.get(key) is not None:
            return str(check_value(row[key], key, where, (str, int)))
    return str(ctx.index)


def extras(row: dict, used: tuple[str, ...]) -> dict:
    """The raw fields of `row` not consumed into the record's main fields."""
    return {k: v for k, v in row.items() if k not in used}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def gsm8k_answer(answer: str, where: str, name: str = "answer") -> str:
    """The final number of a GSM8K solution (`... #### 42`), or a `DataError` naming the field."""
    final = extract_final_number(answer) if "####" in answer else None
    if final is None:
        raise DataError(f"{where}: field '{name}' has no final '#### <number>' line: ...{answer[-60:]!r}")
    return final


def gsm8k(row: dict, where: str, ctx: LoadContext) -> Record:
    """GSM8K: `{"question", "answer"}`; the answer ends with `#### <number>`."""
    question = require(row, "question", where)
    answer = require(row, "answer", where)
    return Record(
        id=row_id(row, ("id",), where, ctx),
        source=ctx.source,
        messages=user(question),
        reference=answer,
        verifier={"type": "gsm8k", "answer": gsm8k_answer(answer, where)},
        meta=extras(row, ("id", "question", "answer")),
    )


def ifeval(row: dict, where: str, ctx: LoadContext) -> Record:
    """IFEval / IFBench: `{"key", "prompt", "instruction_id_list", "kwargs"}` (one kwargs dict per instruction).

    `kwargs` are kept as in the data (IFBench and the hub lists carry every argument name, `null` when unused).
    """
    prompt = require(row, "prompt", where)
    ids = require(row, "instruction_id_list", where, list)
    kwargs = require(row, "kwargs", where, list, nonempty=False)
    for i, instruction in enumerate(ids):
        check_value(instruction, f"instruction_id_list[{i}]", where, str)
    if len(kwargs) != len(ids):
        raise DataError(
            f"{where}: field 'kwargs' has {len(kwargs)} entries but 'instruction_id_list' has {len(ids)}; "
            "expected one kwargs dict per instruction"
        )
    for i, item in enumerate(kwargs):
        check_value(item, f"kwargs[{i}]", where, dict, nonempty=False)
    return Record(
        id=row_id(row, ("key", "id"), where, ctx),
        source=ctx.source,
        messages=user(prompt),
        verifier={"type": "ifeval", "instruction_id_list": ids, "kwargs": kwargs},
        meta=extras(row, ("key", "id", "prompt", "instruction_id_list", "kwargs")),
    )


GPQA_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
GPQA_INSTRUCTION = "Answer with the letter of the correct option."


def gpqa(row: dict, where: str, ctx: LoadContext) -> Record:
    """GPQA (hub CSV schema): `Question`, `Correct Answer`, `Incorrect Answer 1..3`, optional `Record ID`.

    The four options are shuffled with a generator seeded by the record id, so a record always shows the same order.
    """
    question, correct, *wrong = (require(row, name, where).strip() for name in GPQA_FIELDS)
    record_id = row_id(row, ("Record ID", "id"), where, ctx)
    options = [correct, *wrong]
    random.Random(f"gpqa:{record_id}").shuffle(options)
    letters = "ABCD"
    lines = "\n".join(f"{letter}) {text}" for letter, text in zip(letters, options))
    return Record(
        id=record_id,
        source=ctx.source,
        messages=user(f"{question}\n\n{lines}\n\n{GPQA_INSTRUCTION}"),
        reference=correct,
        verifier={"type": "choice", "answer": letters[options.index(correct)], "options": dict(zip(letters, options))},
        meta=extras(row, (*GPQA_FIELDS, "Record ID", "id")),
    )


def _reference_file(path: Path) -> Path | None:
    for candidate in (path.parent / "reference_answer_gpt-4.jsonl", path.parent / "reference_answer" / "gpt-4.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def mt_bench_setup(ctx: LoadContext) -> None:
    """Read GPT-4 reference answers beside a local question file (FastChat layout), keyed by question id."""
    references: dict[str, list[str]] = {}
    ref_path = _reference_file(ctx.path) if ctx.path is not None else None
    if ref_path is not None:
        for where, row in read_local(ref_path, (".jsonl",)):
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            choice = check_value(require(row, "choices", where, list)[0], "choices[0]", where, dict)
            turns = require(choice, "turns", f"{where} choices[0]", list)
            references[str(require(row, "question_id", where, (str, int)))] = turns
    ctx.extras["references"] = references
    ctx.extras["reference_file"] = ref_path.name if ref_path else None


def mt_bench(row: dict, where: str, ctx: LoadContext) -> Record:
    """MT-Bench: FastChat `{"question_id", "category", "turns", "reference"?}` or the hub's `prompt`/`prompt_id`.

    `meta["turns"]` holds all user turns; `meta["reference_turns"]` the reference answers, taken from
    `reference_answer_gpt-4.jsonl` (or `reference_answer/gpt-4.jsonl`) beside the question file when it has this
    question, else from the row's own `reference` field; absent when neither has one.
    """
    turns_key = "turns" if "turns" in row else "prompt"
    turns = require(row, turns_key, where, list)
    for i, turn in enumerate(turns):
        check_value(turn, f"{turns_key}[{i}]", where, str)
    record_id = row_id(row, ("question_id", "prompt_id"), where, ctx)
    meta = {"turns": turns, "category": optional(row, "category", where)}
    references = ctx.extras.get("references", {})
    if record_id in references:
        meta["reference_turns"], meta["reference_source"] = references[record_id], ctx.extras["reference_file"]
    elif row.get("reference"):
        meta["reference_turns"], meta["reference_source"] = optional(row, "reference", where, list), "question"
    meta.update(extras(row, ("question_id", "prompt_id", turns_key, "category")))
    reference = meta["reference_turns"][0] if meta.get("reference_turns") else None
    return Record(id=record_id, source=ctx.source, messages=user(turns[0]), reference=reference, meta=meta)


def healthbench(row: dict, where: str, ctx: LoadContext) -> Record:
    """HealthBench: `{"prompt_id", "prompt": [messages], "rubrics": [{"criterion", "points", "tags"}], "example_tags"}`.

    `reference` is `ideal_completions_data["ideal_completion"]` when present; `meta["rubrics"]`, `meta["tags"]`.
    """
    messages = check_messages(require(row, "prompt", where, list), "prompt", where)
    rubrics = require(row, "rubrics", where, list)
    for i, rubric in enumerate(rubrics):
        check_value(rubric, f"rubrics[{i}]", where, dict)
        require(rubric, "criterion", f"{where} rubrics[{i}]")
        require(rubric, "points", f"{where} rubrics[{i}]", (int, float))
    ideal = optional(row, "ideal_completions_data", where, dict)
    reference = optional(ideal, "ideal_completion", where, str) if ideal else None
    meta = {"rubrics": rubrics, "tags": optional(row, "example_tags", where, list, default=[])}
    meta.update(extras(row, ("prompt_id", "prompt", "rubrics", "example_tags")))
    return Record(
        id=row_id(row, ("prompt_id", "id"), where, ctx),
        source=ctx.source,
        messages=messages,
        reference=reference,
        meta=meta,
    )


def _first_key(row: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if row.get(k) is not None), None)


def _candidate(item: Any, name: str, where: str) -> dict:
    if isinstance(item, str):
        return {"text": check_value(item, name, where, str)}
    check_value(item, name, where, (str, dict))
    key = _first_key(item, ("text", "content", "response", "completion"))
    if key is None:
        raise DataError(f"{where}: field '{name}' has no text (expected a 'text', 'content' or 'response' key)")
    return {"text": check_value(item[key], f"{name}.{key}", where, str), **extras(item, (key,))}


def coval(row: dict, where: str, ctx: LoadContext) -> Record:
    """Coval-style rubric data: a prompt, candidate responses and rubrics.

    Accepted schema (one JSON object per row):

    - id: `id` or `prompt_id` (optional; else the row index);
    - the conversation: `messages` (list of messages) or `prompt` (a string, or a list of messages);
    - candidates (required, non-empty): `responses`, `candidates` or `completions`, each a string or a dict with the
      text under `text`/`content`/`response`/`completion` (its other keys, e.g. scores or model names, are kept);
    - rubrics (optional): `rubrics` or `rubric`, a string, a list of strings, or a list of dicts; strings become
      `{"criterion": str}`.

    `meta["candidates"]` is a list of `{"text": str, ...}`; `meta["rubrics"]` a list of dicts.
    """
    prompt_key = _first_key(row, ("messages", "prompt"))
    if prompt_key is None:
        raise DataError(f"{where}: field 'messages' (or 'prompt') is missing (fields present: {sorted(row)})")
    prompt = row[prompt_key]
    if isinstance(prompt, list):
        messages = check_messages(prompt, prompt_key, where)
    else:
        messages = user(check_value(prompt, prompt_key, where, str))
    cand_key = _first_key(row, ("responses", "candidates", "completions"))
    if cand_key is None:
        raise DataError(f"{where}: field 'responses' (or 'candidates'/'completions') is missing")
    candidates = check_value(row[cand_key], cand_key, where, list)
    rubric_key = _first_key(row, ("rubrics", "rubric"))
    rubrics = row[rubric_key] if rubric_key else []
    rubrics = [rubrics] if isinstance(rubrics, str) else check_value(rubrics, rubric_key, where, list, nonempty=False)
    for i, rubric in enumerate(rubrics):
        check_value(rubric, f"{rubric_key}[{i}]", where, (str, dict))
    meta = {
        "candidates": [_candidate(item, f"{cand_key}[{i}]", where) for i, item in enumerate(candidates)],
        "rubrics": [{"criterion": r} if isinstance(r, str) else r for r in rubrics],
    }
    meta.update(extras(row, ("id", "prompt_id", prompt_key, cand_key, rubric_key or "rubrics")))
    return Record(id=row_id(row, ("id", "prompt_id"), where, ctx), source=ctx.source, messages=messages, meta=meta)
