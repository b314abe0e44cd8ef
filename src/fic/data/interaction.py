"""Row normalisers for interaction data: AmbigQA, Lost in Conversation, a product catalog, generic conversations.

Same contract as :mod:`fic.data.benchmarks`: one raw row in, one :class:`Record` out, malformed rows raise a
:class:`DataError` naming file, row and field.
"""

from __future__ import annotations

import json
from typing import Any

from .benchmarks import LoadContext, extras, gsm8k_answer, row_id, user
from .records import DataError, Record, check_messages, check_value, optional, require


def _unzip(columns: Any) -> list[dict]:
    """A hub `Sequence` of dicts arrives as a dict of lists; turn it back into a list of dicts."""
    if not isinstance(columns, dict):
        return columns
    length = max((len(v) for v in columns.values() if isinstance(v, list)), default=0)
    return [{k: (v[i] if isinstance(v, list) else v) for k, v in columns.items()} for i in range(length)]


def ambigqa(row: dict, where: str, ctx: LoadContext) -> Record:
    """AmbigQA (light): `{"id", "question", "annotations": [singleAnswer | multipleQAs]}`.

    `meta["annotations"]` keeps the raw annotations (list of dicts, also for hub rows). `meta["ambiguous"]` is true
    when any annotator wrote a `multipleQAs` annotation; `meta["intents"]` is then that first annotation's qaPairs as
    `[{"question": disambiguated question, "answers": [...]}]`, else one intent: the question itself with every
    annotator's `singleAnswer` answers (deduplicated, in order). `reference` is the first answer of an unambiguous
    question.
    """
    question = require(row, "question", where)
    annotations = _unzip(require(row, "annotations", where, (list, dict)))
    for i, annotation in enumerate(annotations):
        check_value(annotation, f"annotations[{i}]", where, dict)
        kind = require(annotation, "type", f"{where} annotations[{i}]")
        if kind not in ("singleAnswer", "multipleQAs"):
            raise DataError(
                f"{where}: field 'annotations[{i}].type' is {kind!r}; expected singleAnswer or multipleQAs"
            )
    multiple = [a for a in annotations if a["type"] == "multipleQAs"]
    if multiple:
        pairs = _unzip(require(multiple[0], "qaPairs", f"{where} annotations", (list, dict)))
        intents = [
            {
                "question": require(pair, "question", f"{where} qaPairs[{i}]"),
                "answers": require(pair, "answer", f"{where} qaPairs[{i}]", list),
            }
            for i, pair in enumerate(pairs)
        ]
    else:
        answers: list[str] = []
        for i, annotation in enumerate(annotations):
            for answer in require(annotation, "answer", f"{where} annotations[{i}]", list):
                if answer not in answers:
                    answers.append(answer)
        intents = [{"question": question, "answers": answers}]
    meta = {"annotations": annotations, "ambiguous": bool(multiple), "intents": intents}
    meta.update(extras(row, ("id", "question", "annotations")))
    reference = None if multiple or not intents[0]["answers"] else intents[0]["answers"][0]
    return Record(
        id=row_id(row, ("id",), where, ctx), source=ctx.source, messages=user(question), reference=reference, meta=meta
    )


TRANSLATION_INSTRUCTION = "Translate the following German text into English."
SUMMARY_INSTRUCTION = (
    "Write a summary of the documents below that answers this query, citing the documents by number: {query}"
)


def _documents(row: dict, where: str, indices: list[int]) -> str:
    docs = {d.get("document_index"): d for d in require(row, "documents", where, list)}
    missing = [i for i in indices if i not in docs]
    if missing:
        raise DataError(f"{where}: field 'shards' points at documents {missing} absent from 'documents'")
    return "\n\n".join(f"Document {i}:\n{docs[i]['document_text']}" for i in indices)


def _lic_shards(row: dict, task: str, where: str) -> tuple[list[str], dict]:
    """Shard texts in order, plus extra meta. Summary shards hold document indices: their text is built here."""
    shards = require(row, "shards", where, list)
    texts, doc_idxs, dropped = [], [], []
    for i, shard in enumerate(shards):
        check_value(shard, f"shards[{i}]", where, dict)
        key = "shard_text" if "shard_text" in shard else "shard"
        if task == "summary":
            idxs = require(shard, "doc_idxs", f"{where} shards[{i}]", list)
            doc_idxs.append(idxs)
            texts.append(_documents(row, where, idxs))
        elif isinstance(shard.get(key), str) and not shard[key].strip():
            dropped.append(i)  # the real translation file ends two documents with an empty shard
        else:
            texts.append(require(shard, key, f"{where} shards[{i}]"))
    if not texts:
        raise DataError(f"{where}: field 'shards' has no non-empty shard text")
    if task == "translation":
        texts[0] = f"{TRANSLATION_INSTRUCTION}\n\n{texts[0]}"
    if task == "summary":
        texts[0] = f"{SUMMARY_INSTRUCTION.format(query=require(row, 'query', where))}\n\n{texts[0]}"
    meta = {"shard_doc_idxs": doc_idxs} if doc_idxs else {}
    if dropped:
        meta["dropped_empty_shards"] = dropped
    return texts, meta


def _lic_full(row: dict, task: str, shards: list[str], shard_meta: dict, where: str) -> tuple[str, str | None, dict]:
    """The fully specified instruction, a reference answer and a verifier, per Lost-in-Conversation task."""
    if task == "math":
        answer = require(row, "answer", where)
        return require(row, "question", where), answer, {"type": "gsm8k", "answer": gsm8k_answer(answer, where)}
    if task == "database":
        return require(row, "fully_specified_question", where), optional(row, "reference_sql", where), {}
    if task == "actions":
        conversation = require(row, "fully_specified_question", where, list)
        turns = conversation[0] if conversation and isinstance(conversation[0], list) else conversation
        text = "\n".join(m["content"] for m in check_messages(turns, "fully_specified_question", where))
        reference = row.get("reference_answer")
        return text, (json.dumps(reference) if reference is not None else None), {}
    if task == "code":
        text = row.get("question_content") or require(row, "prompt", where)
        if row.get("starter_code"):
            text = f"{text}\n\n{row['starter_code']}"
        return text, None, {}
    if task == "translation":
        document = require(row, "document_de", where)
        return f"{TRANSLATION_INSTRUCTION}\n\n{document}", optional(row, "document_en", where), {}
    if task == "data2text":
        references = optional(row, "references", where, list, default=[])
        return "\n\n".join(shards), (references[0] if references else None), {}
    if task == "summary":
        indices = [i for idxs in shard_meta["shard_doc_idxs"] for i in idxs]
        query = require(row, "query", where)
        return f"{SUMMARY_INSTRUCTION.format(query=query)}\n\n{_documents(row, where, indices)}", None, {}
    raise DataError(
        f"{where}: field 'task' is {task!r}; expected one of math, database, actions, code, translation, data2text, "
        "summary"
    )


def lost_in_conversation(row: dict, where: str, ctx: LoadContext) -> Record:
    """Lost in Conversation: `{"task_id", "task", "shards": [{"shard_id", "shard"}], ...task fields}`.

    `messages` is one user turn with the fully specified instruction; `meta["shards"]` the shard texts in order and
    `meta["task"]` (empty shard texts are dropped; their positions are in `meta["dropped_empty_shards"]`);
    every other raw field is kept in `meta` (schemas, tests, tables, ...). Per task, the instruction
    is: math `question`; database `fully_specified_question`; actions the user text of `fully_specified_question`;
    code `prompt` (LiveCodeBench: `question_content` + `starter_code`); translation an instruction plus
    `document_de`; data2text the shards joined; summary an instruction with the query plus all documents. Translation
    and summary shards start with the same instruction (LiC gives it in a system prompt), and summary shards, which
    only list document indices, get the documents' text. References: math answer (with a `gsm8k` verifier), SQL,
    function calls (JSON), English document, first data2text reference.
    """
    task = require(row, "task", where)
    shards, shard_meta = _lic_shards(row, task, where)
    full, reference, verifier = _lic_full(row, task, shards, shard_meta, where)
    meta = {"task": task, "shards": shards, **shard_meta, **extras(row, ("task_id", "task", "shards"))}
    return Record(
        id=row_id(row, ("task_id",), where, ctx),
        source=ctx.source,
        messages=user(full),
        reference=reference,
        verifier=verifier,
        meta=meta,
    )


def products(row: dict, where: str, ctx: LoadContext) -> Record:
    """DummyJSON catalog: one record per product; `meta` is the product dict, `reference` its title.

    The message is a deliberately vague request built from the category ("I'm looking for something in the kitchen accessories
    category. What would you recommend?"): the product is the hidden intent.
    """
    title = require(row, "title", where)
    category = require(row, "category", where).replace("-", " ")
    request = f"I'm looking for something in the {category} category. What would you recommend?"
    return Record(
        id=row_id(row, ("id",), where, ctx), source=ctx.source, messages=user(request), reference=title, meta=dict(row)
    )


def conversations(row: dict, where: str, ctx: LoadContext) -> Record:
    """Generic conversations: `{"messages": [...], "id"?: str|int, ...}`; other fields go to `meta`."""
    messages = check_messages(require(row, "messages", where, list), "messages", where)
    return Record(
        id=row_id(row, ("id",), where, ctx), source=ctx.source, messages=messages, meta=extras(row, ("id", "messages"))
    )
