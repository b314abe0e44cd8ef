"""The normalised record every dataset source yields, its error type, and the field checks shared by the loaders.

A dataset row is turned into a :class:`Record`: an id, the conversation to show a model (``messages``), an optional
reference answer, a ``verifier`` dict that says how an answer can be checked, and ``meta`` with the source-specific
fields. Loaders read fields through the small helpers below so that every malformed row fails the same way: a
:class:`DataError` that names the file, the row and the field, e.g. ``gsm8k.jsonl row 12: field 'question' is missing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fic.errors import FicError

ROLES = ("system", "user", "assistant")


class DataError(FicError, ValueError):
    """A dataset could not be loaded or one of its rows is malformed.

    The message always says where (file and row, or hub id) and, for row problems, which field is wrong and what was
    expected.
    """


@dataclass
class Record:
    """One normalised example from a dataset source.

    Args:
        id (`str`):
            Identifier, unique within one load of a source (taken from the data where it has one, else the row index).
        source (`str`):
            Registry name of the source that produced it, e.g. `"gsm8k"`.
        messages (`list[dict]`):
            The conversation to show a model: `{"role": "system"|"user"|"assistant", "content": str}` dicts, usually
            ending with a user turn.
        reference (`str` or `None`, *optional*):
            A reference answer (full text) when the data has one.
        verifier (`dict`, *optional*):
            How an answer can be checked, with a `"type"` key, e.g. `{"type": "gsm8k", "answer": "18"}` or
            `{"type": "choice", "answer": "B"}`. Empty when the source has no automatic check.
        meta (`dict`, *optional*):
            Source-specific fields (raw row fields, turns, shards, rubrics, intents, ...).
    """

    id: str
    source: str
    messages: list[dict]
    reference: str | None = None
    verifier: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _show(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def require(row: dict, name: str, where: str, kind: type | tuple[type, ...] = str, *, nonempty: bool = True) -> Any:
    """Return `row[name]`, raising a `DataError` that names `where` and the field when it is missing or malformed.

    Args:
        row (`dict`): The raw row.
        name (`str`): Field name.
        where (`str`): Location for messages, e.g. `"test.jsonl row 12"`.
        kind (`type` or `tuple[type, ...]`, *optional*, defaults to `str`): Accepted type(s).
        nonempty (`bool`, *optional*, defaults to `True`): Also reject empty (or whitespace-only) strings and lists.
    """
    if name not in row or row[name] is None:
        present = sorted(k for k, v in row.items() if v is not None)
        raise DataError(f"{where}: field '{name}' is missing (fields present: {present})")
    return check_value(row[name], name, where, kind, nonempty=nonempty)


def optional(row: dict, name: str, where: str, kind: type | tuple[type, ...] = str, default: Any = None) -> Any:
    """Like :func:`require`, but a missing or null field returns `default` (empty values are allowed)."""
    if row.get(name) is None:
        return default
    return check_value(row[name], name, where, kind, nonempty=False)


def check_value(value: Any, name: str, where: str, kind: type | tuple[type, ...] = str, *, nonempty: bool = True):
    """Check that `value` (the content of field `name`) has type `kind` and, if asked, is not empty."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int subclass; a True id or count is almost surely a data bug.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise DataError(f"{where}: field '{name}' must be {expected}, got {_type_name(value)} {_show(value)}")
    if nonempty and isinstance(value, str | list | dict) and not (value.strip() if isinstance(value, str) else value):
        raise DataError(f"{where}: field '{name}' is empty")
    return value


def check_messages(value: Any, name: str, where: str) -> list[dict]:
    """Validate a conversation and return it as clean `{"role", "content"}` dicts.

    Every message must be a dict with a `role` in `system`/`user`/`assistant` and a non-empty string `content`.
    Errors name the message, e.g. `field 'messages[2].role' has unknown role 'bot'`.
    """
    check_value(value, name, where, list)
    clean = []
    for i, message in enumerate(value):
        item = f"{name}[{i}]"
        if not isinstance(message, dict):
            raise DataError(f"{where}: field '{item}' must be a dict with 'role' and 'content', got {_show(message)}")
        role = message.get("role")
        if role is None:
            raise DataError(f"{where}: field '{item}.role' is missing")
        if role not in ROLES:
            raise DataError(
                f"{where}: field '{item}.role' has unknown role {role!r}; expected one of {', '.join(ROLES)}"
            )
        if message.get("content") is None:
            raise DataError(f"{where}: field '{item}.content' is missing")
        check_value(message["content"], f"{item}.content", where, str)
        clean.append({"role": role, "content": message["content"]})
    return clean
