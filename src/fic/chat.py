"""Chat-template rendering, role-header prefixes, turn ends, and the three task views.

Everything here is derived from the tokenizer's own chat template, never from a hand-written table per model
family. The trick is the sentinel: render the conversation with one extra message whose content is a unique
string, then cut the text at that string. What precedes it is the conversation followed by the header that opens
the new turn, exactly as the template writes it (default system prompts, date lines, renamed roles such as
`assistant` -> `model`, reasoning dropped from earlier turns all included). Rendering twice with two different
sentinels and comparing the cuts proves that the prefix does not depend on the content that follows it.
"""

from __future__ import annotations

import logging
import re

from fic.errors import FicError

logger = logging.getLogger(__name__)

_SENTINELS = ("FICSENTINELALPHA7319", "FICSENTINELB28")
# A leading special-looking token: <|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>, [/INST], <|assistant|>.
_TAG = re.compile(r"(<\|[^|<>\s]{1,40}\|>|<[A-Za-z_/][\w/]{0,40}>|\[/?[A-Z_]{2,20}\])")

VALID_ROLES = ("system", "user", "assistant")


class ChatTemplateError(FicError, ValueError):
    """A chat template cannot render what was asked, or gives an inconsistent prefix."""


class MessagesError(FicError, ValueError):
    """A conversation that is not a non-empty list of `{"role", "content"}` messages with known roles."""


def _name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__


def validate_messages(messages: list[dict], where: str = "messages") -> None:
    """Raise `MessagesError` (a `ValueError`) naming the position and field when `messages` is not a list of role/content dicts."""
    if not isinstance(messages, list) or not messages:
        raise MessagesError(f"{where}: expected a non-empty list of {{'role', 'content'}} dicts, got {messages!r:.80}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise MessagesError(f"{where}[{i}]: expected a dict with 'role' and 'content', got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in VALID_ROLES:
            raise MessagesError(f"{where}[{i}].role: unknown role {role!r}; valid roles are {', '.join(VALID_ROLES)}")
        if not isinstance(content, str):
            raise MessagesError(f"{where}[{i}].content: expected a string, got {type(content).__name__}")
        if not content.strip():
            raise MessagesError(f"{where}[{i}].content: empty {role} message")


TEMPLATE_KWARGS_ATTR = "fic_chat_template_kwargs"


def set_template_kwargs(tokenizer, kwargs: dict | None) -> None:
    """Make every `render` with `tokenizer` pass `kwargs` to its chat template (e.g. `{"enable_thinking": False}`).

    They are also kept in the tokenizer's `init_kwargs`, which `save_pretrained` writes to `tokenizer_config.json`,
    so checkpoints evaluated later (`eval.load_from: disk`, `fic probe --model CHECKPOINT`) render the same way."""
    setattr(tokenizer, TEMPLATE_KWARGS_ATTR, dict(kwargs or {}))
    if isinstance(getattr(tokenizer, "init_kwargs", None), dict):
        tokenizer.init_kwargs[TEMPLATE_KWARGS_ATTR] = dict(kwargs or {})


def template_kwargs_of(tokenizer) -> dict:
    """The chat-template arguments `set_template_kwargs` gave this tokenizer (or the one it was saved from)."""
    found = getattr(tokenizer, TEMPLATE_KWARGS_ATTR, None)
    if found is None:
        found = (getattr(tokenizer, "init_kwargs", None) or {}).get(TEMPLATE_KWARGS_ATTR)
    return dict(found or {})


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = False, **template_kwargs) -> str:
    """Render `messages` with the tokenizer's chat template as text (BOS included when the template writes it)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"tokenizer {_name(tokenizer)!r} has no chat template; set `tokenizer.chat_template` or use an "
            "instruction-tuned checkpoint"
        )
    # the recipe's `chat_template_kwargs` (e.g. Qwen3.5's `enable_thinking: false`), attached to the tokenizer by
    # `fic.trainers.common.prepare`, so every rendering of a run (training data, rollouts, probe contexts) agrees
    template_kwargs = {**template_kwargs_of(tokenizer), **template_kwargs}
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
    except Exception as err:  # jinja2 TemplateError, raise_exception(), KeyError in templates
        roles = [m.get("role") for m in messages]
        raise ChatTemplateError(
            f"the chat template of {_name(tokenizer)!r} cannot render roles {roles}: {err}"
        ) from err


def _cut_at_sentinel(tokenizer, messages: list[dict], role: str, sentinel: str, **kw) -> str:
    text = render(tokenizer, [*messages, {"role": role, "content": sentinel}], **kw)
    if text.count(sentinel) != 1:
        raise ChatTemplateError(
            f"the chat template of {_name(tokenizer)!r} did not place a new {role!r} message verbatim "
            f"(found the sentinel {text.count(sentinel)} times); cannot derive the {role} header"
        )
    return text[: text.index(sentinel)]


def role_prefix(tokenizer, messages: list[dict], role: str = "user", **template_kwargs) -> str:
    """The rendered `messages` followed by the bare header that opens a new `role` turn.

    Derived from the tokenizer's own template: the conversation is rendered with a sentinel `role` message and cut
    at the sentinel. Two sentinels must give the same prefix, and the prefix must end right after the header (not
    inside a message), otherwise `ChatTemplateError` names the tokenizer.

    Args:
        tokenizer: a tokenizer with a `chat_template`.
        messages: the conversation so far (for the user-turn probe: `[system?, user, assistant]`).
        role: the role whose turn the prefix opens (`"user"` for the probe, `"assistant"` for answers).
    """
    if role not in VALID_ROLES:
        raise ValueError(f"role: unknown role {role!r}; valid roles are {', '.join(VALID_ROLES)}")
    first, second = (_cut_at_sentinel(tokenizer, messages, role, s, **template_kwargs) for s in _SENTINELS)
    if first != second:
        raise ChatTemplateError(
            f"the chat template of {_name(tokenizer)!r} renders the conversation differently depending on the "
            f"content of the new {role} turn; no consistent {role} header exists"
        )
    _check_header(tokenizer, messages, role, first, template_kwargs)
    return first


_HEADERS_CHECKED: set[tuple] = set()


def _check_header(tokenizer, messages: list[dict], role: str, prefix: str, template_kwargs: dict) -> None:
    """Fail when the prefix holds no `role` header: a template that writes the role after the content (or not at all)
    cuts at the sentinel before any header, so the prefix is the same whatever role opens the new turn.

    Checked once per template, role and arguments (it is a property of the template, and `role_prefix` runs per row).
    """
    key = (getattr(tokenizer, "chat_template", None), role, repr(sorted(template_kwargs.items())))
    if key in _HEADERS_CHECKED:
        return
    other = "assistant" if role != "assistant" else "user"
    try:
        other_prefix = _cut_at_sentinel(tokenizer, messages, other, _SENTINELS[0], **template_kwargs)
    except ChatTemplateError:  # templates that insist on alternating roles refuse the other role here: fine
        other_prefix = None
    if other_prefix == prefix:
        raise ChatTemplateError(
            f"the chat template of {_name(tokenizer)!r} writes no {role} header before the content of a {role} "
            f"message (a new {role} turn and a new {other} turn render the same prefix {prefix[-60:]!r}); fic needs "
            "a template that opens each turn with its role, so use another tokenizer or set `tokenizer.chat_template`"
        )
    _HEADERS_CHECKED.add(key)


def _leading_tag(text: str) -> str | None:
    match = _TAG.match(text.lstrip())
    return match.group(1) if match else None


def turn_end_strings(tokenizer, role: str = "user") -> list[str]:
    """Strings that end a generated `role` turn under this template, for use as stop strings.

    Some templates close a turn with an end token (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `<|end|>`); others
    (GLM) open the next role tag instead. Both are read off the template: the text that follows a message's content
    in a rendered conversation. The tokenizer's EOS token is always included.
    """
    sentinel = "FICTURNCONTENT5501"
    convo = [{"role": "user", "content": "Hi."}] if role == "assistant" else []
    turn = [*convo, {"role": role, "content": sentinel}]
    # Closed as the last message, and mid-conversation (followed by the other role's header): harmony closes a
    # final answer with <|return|> but a mid-conversation one with <|end|>; GLM closes nothing and opens <|user|>.
    other = "assistant" if role == "user" else "user"
    closed = render(tokenizer, turn)
    follow = role_prefix(tokenizer, turn, role=other)
    ends: list[str] = []
    for text in (closed, follow):
        if sentinel not in text:
            raise ChatTemplateError(f"the chat template of {_name(tokenizer)!r} does not render a {role} message")
        tag = _leading_tag(text[text.index(sentinel) + len(sentinel) :])
        if tag and tag not in ends:
            ends.append(tag)
    eos = getattr(tokenizer, "eos_token", None)
    if eos and eos not in ends:
        ends.append(eos)
    if not ends:
        raise ChatTemplateError(f"cannot find how the chat template of {_name(tokenizer)!r} ends a {role} turn")
    return ends


def full_view(prompt: str, system: str | None = None) -> list[dict]:
    """The teacher view: one fully specified user message."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def concat_view(shards: list[str], system: str | None = None, bullet: str = "- ") -> list[dict]:
    """All shards in one user message, one per line (Lost in Conversation's CONCAT)."""
    if not shards:
        raise ValueError("shards: expected at least one shard")
    return full_view("\n".join(f"{bullet}{s}" for s in shards), system=system)


def sharded_view(shards: list[str], assistant_turns: list[str], system: str | None = None) -> list[dict]:
    """One shard per user turn with the given assistant turns between them; ends with the last user shard."""
    if len(assistant_turns) != len(shards) - 1:
        raise ValueError(
            f"assistant_turns: expected {len(shards) - 1} turns between {len(shards)} shards, got {len(assistant_turns)}"
        )
    messages = [{"role": "system", "content": system}] if system else []
    for i, shard in enumerate(shards):
        messages.append({"role": "user", "content": shard})
        if i < len(assistant_turns):
            messages.append({"role": "assistant", "content": assistant_turns[i]})
    return messages
