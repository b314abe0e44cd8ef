"""Which items a judge was fitted on, and the firewall that keeps it from grading them.

A judge fitted on labelled turns (the `learned` classifier) knows those items: on them it agrees with readers far
better than on new ones (kappa 0.78 inside its fit against 0.38 outside, on SmolLM2 turns). So a fitted judge ships
the keys of the items it was fitted on, and every evaluation compares its own items with that set.

An item's key is its dataset name and a hash of its *prompt*: the conversation up to and including its last user
message. A new model's answer to the same item, or another sample, or a perturbed answer, keeps the key; the match is
on the hash alone (the same question under another dataset name is the same item).

Judges report `provenance`: `{"source", "fitted_items"}` where `fitted_items` is a set of hashes (empty for a judge
fitted on nothing, such as the hand-written rules) or None when unknown (an LLM behind an endpoint). Overlap with a
judge of unknown provenance is never refused, only reported.
"""

from __future__ import annotations

import hashlib
import json

from fic.errors import FicError


class JudgeOverlapError(FicError, ValueError):
    """An evaluation's items are in its judge's fit and overlap was not allowed."""


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation up to and including its last user message (the item's prompt)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
    return messages[: last + 1]


def prompt_hash(messages: list[dict]) -> str:
    """16 hex digits of sha256 over the prompt's (role, content) pairs."""
    prompt = [[str(m.get("role")), m.get("content")] for m in prompt_messages(messages)]
    text = json.dumps(prompt, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def item_key(dataset: str, messages: list[dict]) -> str:
    """`DATASET/HASH`: the form stored in a judge's provenance (the dataset is kept for reporting)."""
    return f"{dataset}/{prompt_hash(messages)}"


def key_hash(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def judge_provenance(judge) -> dict:
    """`{"source": str, "fitted_items": set[str] | None, "datasets": {name: count}}` for any judge object."""
    provenance = getattr(judge, "provenance", None)
    if provenance is None:
        return {"source": "provenance unknown", "fitted_items": None, "datasets": {}}
    return provenance


def overlap(judge, items: list[tuple[str, str, list[dict]]]) -> dict:
    """Which of `items` (`(dataset, item_id, messages)`) the judge was fitted on.

    Returns `{"known": bool, "source", "n_items", "n_overlap", "items": ["dataset:item_id", ...]}` (`known` False:
    the judge's provenance is unknown and nothing can be said)."""
    provenance = judge_provenance(judge)
    fitted = provenance.get("fitted_items")
    out = {"known": fitted is not None, "source": provenance.get("source"), "n_items": len(items), "n_overlap": 0,
           "items": []}  # fmt: skip
    if fitted is None:
        return out
    hits = [f"{dataset}:{item_id}" for dataset, item_id, messages in items if prompt_hash(messages) in fitted]
    out.update(n_overlap=len(hits), items=hits)
    return out


def check_overlap(judge, items: list[tuple[str, str, list[dict]]], allow: bool, where: str) -> dict:
    """`overlap(...)`, raising `JudgeOverlapError` in one line when there is any and `allow` is False.

    `where` names the switch that allows it (`--allow-judge-overlap` or `eval.allow_judge_overlap=true`)."""
    found = overlap(judge, items)
    if found["n_overlap"] and not allow:
        first = ", ".join(found["items"][:3])
        raise JudgeOverlapError(
            f"{found['n_overlap']} of {found['n_items']} items are in the judge's fit ({found['source']}), e.g. "
            f"{first}: its verdicts on them are not estimates; evaluate other items, choose another judge, or pass "
            f"{where} (the overlap is then recorded and those items are left out of corrected and calibrated rates)"
        )
    return found


def overlap_line(found: dict) -> str:
    """One line for logs and `--plan`."""
    if not found.get("known"):
        return f"judge provenance unknown ({found.get('source')}): overlap with its fit cannot be checked"
    if not found["n_overlap"]:
        return f"judge fit ({found['source']}): none of the {found['n_items']} evaluated items"
    return (f"judge fit ({found['source']}): {found['n_overlap']} of {found['n_items']} evaluated items, e.g. "
            f"{', '.join(found['items'][:3])}")  # fmt: skip
