"""Loss masks for multi-turn SFT, read off the chat template's own rendering (no `{% generation %}` tags needed).

`turn_masks(tokenizer, messages, train_on)` returns the token ids of the rendered conversation and labels that keep
only the chosen turns (`-100` elsewhere). Algorithm, for one conversation:

1. Render it once with the tokenizer's template: `text`.
2. For each chosen message, render the conversation again with that message's content replaced by a sentinel. What
   precedes the sentinel is `text` up to where the content starts (headers, default system prompt, date lines), and
   what follows it is `text` from where the content ends, so the content's character span in `text` is
   `[len(before), len(text) - len(after))` whatever the template does to the content (trimming, dropping reasoning).
3. The span is extended over the turn's closing: the first end-of-turn string of that role (`fic.chat.
   turn_end_strings`: `<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `[/INST]`, GLM's next role tag, ...) that follows
   the content after at most whitespace, so the model learns where its turn stops. A conversation that ends with a
   chosen turn the template does not close by itself (GLM closes a user turn by opening the assistant's) is
   rendered with the generation prompt, which writes that closing.
4. `text` is tokenized once (`add_special_tokens=False`: the template writes BOS itself) with character offsets; a
   token is trained when it starts inside a chosen span.

Turn choices: `user_followups` is every user turn that directly follows an assistant turn (what a collaborative
user says next); `assistant` is every assistant turn. Both can be chosen. Works on any template whose rendering of
the other messages does not depend on a message's content; otherwise `ChatTemplateError` names the message.
"""

from __future__ import annotations

from fic.chat import ChatTemplateError, render, turn_end_strings, validate_messages

TRAIN_ON = ("user_followups", "assistant")
IGNORE_INDEX = -100
_SENTINEL = "FICMASKSENTINEL8841"


def check_train_on(train_on) -> list[str]:
    """`train_on` as a list of valid turn choices; raises `ValueError` naming the bad value and the valid ones."""
    choices = [train_on] if isinstance(train_on, str) else list(train_on or [])
    bad = [c for c in choices if c not in TRAIN_ON]
    if bad or not choices:
        raise ValueError(
            f"train_on: invalid value {train_on!r}; choose one or more of {', '.join(TRAIN_ON)} "
            "(e.g. train_on=[user_followups] or train_on=[user_followups,assistant])"
        )
    return list(dict.fromkeys(choices))


def chosen_turns(messages: list[dict], train_on) -> list[int]:
    """Indices of the messages `train_on` selects (see the module docstring)."""
    choices = check_train_on(train_on)
    picked = []
    for i, message in enumerate(messages):
        followup = message["role"] == "user" and i > 0 and messages[i - 1]["role"] == "assistant"
        if ("user_followups" in choices and followup) or ("assistant" in choices and message["role"] == "assistant"):
            picked.append(i)
    return picked


def _closing(text: str, pos: int, ends: list[str]) -> int | None:
    """End of the end-of-turn string that starts at `pos` after at most whitespace, or None."""
    rest = text[pos:]
    skipped = len(rest) - len(rest.lstrip())
    for end in ends:
        if rest.startswith(end, skipped):
            return pos + skipped + len(end)
    return None


def turn_spans(tokenizer, messages: list[dict], indices: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and, for each message in `indices`, the character span of its content + closing.

    Raises `ChatTemplateError` when a span cannot be located (see the module docstring).
    """
    validate_messages(messages)
    ends: dict[str, list[str]] = {}
    last_open = bool(indices) and indices[-1] == len(messages) - 1
    for generation_prompt in (False, True) if last_open else (False,):
        text = render(tokenizer, messages, add_generation_prompt=generation_prompt)
        spans = []
        for i in indices:
            swapped = [*messages[:i], {**messages[i], "content": _SENTINEL}, *messages[i + 1 :]]
            probe = render(tokenizer, swapped, add_generation_prompt=generation_prompt)
            if probe.count(_SENTINEL) != 1:
                raise ChatTemplateError(
                    f"messages[{i}]: the chat template did not place its content verbatim (a sentinel appeared "
                    f"{probe.count(_SENTINEL)} times); cannot locate the turn to mask"
                )
            before, after = probe.split(_SENTINEL)
            start, content_end = len(before), len(text) - len(after)
            if not (text.startswith(before) and text.endswith(after) and start <= content_end):
                raise ChatTemplateError(
                    f"messages[{i}]: the chat template renders the rest of the conversation differently depending on "
                    "this message's content; cannot locate the turn to mask"
                )
            role = messages[i]["role"]
            if role not in ends:
                ends[role] = turn_end_strings(tokenizer, role)
            end = _closing(text, content_end, ends[role])
            spans.append((start, end))
        if all(end is not None for _, end in spans):
            return text, spans  # type: ignore[return-value]
    missing = [i for i, (_, end) in zip(indices, spans) if end is None]
    role = messages[missing[0]]["role"]
    raise ChatTemplateError(
        f"messages[{missing[0]}]: no end-of-turn string ({', '.join(ends[role])}) follows this {role} turn in the "
        "rendered conversation; cannot mask its closing"
    )


def turn_masks(tokenizer, messages: list[dict], train_on=("user_followups",)) -> tuple[list[int], list[int]]:
    """Token ids of the rendered `messages` and labels that keep only the `train_on` turns (`-100` elsewhere).

    Args:
        tokenizer: a fast tokenizer with a chat template (offsets are needed).
        messages: the conversation, `{"role", "content"}` dicts.
        train_on: `user_followups`, `assistant`, or a list of both.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} gives no character offsets; load the fast tokenizer "
            "(AutoTokenizer.from_pretrained(..., use_fast=True))"
        )
    validate_messages(messages)
    text, spans = turn_spans(tokenizer, messages, chosen_turns(messages, train_on))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids = list(encoded["input_ids"])
    labels = [IGNORE_INDEX] * len(input_ids)
    for k, (token_start, token_end) in enumerate(encoded["offset_mapping"]):
        if token_end > token_start and any(start <= token_start < end for start, end in spans):
            labels[k] = input_ids[k]
    return input_ids, labels
