"""The follow-up label inventory: one place for every label a follow-up judge may emit, with its definition.

A judge reads a context that ends with an assistant turn plus the *user* turn a model generated after it, and
assigns exactly one label. `genuine_followup` is the only label whose binary decision is "genuine"; every other
label is a failure mode. `JUDGE_ERROR` is not a label a judge chooses: it marks a case the judge could not decide
(malformed LLM output after all re-asks, an HTTP failure); such rows carry `genuine=None` and are excluded from
rates and agreement, never counted as genuine or as not genuine.
"""

from __future__ import annotations

GENUINE_FOLLOWUP = "genuine_followup"
PREVIOUS_TURN_RESTATE = "previous_turn_restate"
ASSISTANT_TURN_RESTATE = "assistant_turn_restate"
META_PLANNING = "meta_planning"
DEGENERATE_SHORT = "degenerate_short"
MALFORMED_ARTIFACT = "malformed_artifact"
NEW_TASK_PROMPT = "new_task_prompt"

JUDGE_ERROR = "judge_error"

LABELS: dict[str, str] = {
    GENUINE_FOLLOWUP: (
        "A plausible next message from the human user that engages with the assistant's answer: a question, "
        "correction, clarification, request for more detail, change of constraints or continuation that builds on "
        "what was said (it may refer to a specific step, number, entity or claim of the answer, or to the task "
        "with words like 'it', 'that', 'what about', 'now')."
    ),
    PREVIOUS_TURN_RESTATE: (
        "Repeats the user's previous message verbatim, lightly edited or paraphrased (the same request again, or a "
        "fragment of it) instead of moving the conversation forward."
    ),
    ASSISTANT_TURN_RESTATE: (
        "Copies, paraphrases or continues the assistant's answer, or speaks in the assistant's voice ('Sure, here "
        "is...'), instead of replying to it as the user."
    ),
    META_PLANNING: (
        "Talks about the conversation instead of taking part in it: plans or narrates what the user will ask "
        "('I will ask the assistant...', 'As the user, I...', 'Let me think about what to ask'), or reasons about "
        "the user in the third person."
    ),
    DEGENERATE_SHORT: (
        "Empty, or too short or too generic to carry a follow-up: a bare acknowledgement or closing such as 'ok', "
        "'thanks', 'great', a single token."
    ),
    MALFORMED_ARTIFACT: (
        "Contains chat-template or formatting debris: special tokens (<|im_start|>, <|eot_id|>, <start_of_turn>, "
        "[INST]), role names opening a line ('assistant:', 'User:'), reasoning tags (<think>), or markdown/code "
        "fragments with no message in them."
    ),
    NEW_TASK_PROMPT: (
        "A fresh, self-contained instruction or question unrelated to the previous exchange (a new task, as if "
        "starting a new conversation), ignoring both the user's request and the assistant's answer."
    ),
}

FAILURE_LABELS: tuple[str, ...] = tuple(label for label in LABELS if label != GENUINE_FOLLOWUP)


def is_genuine(label: str) -> bool | None:
    """Binary decision for `label`: True for `genuine_followup`, False for a failure mode, None for `judge_error`."""
    if label == JUDGE_ERROR:
        return None
    check_label(label)
    return label == GENUINE_FOLLOWUP


def check_label(label: str) -> str:
    """Return `label` if it is in the inventory; raise a ValueError listing the valid labels otherwise."""
    if label not in LABELS:
        raise ValueError(f"label={label!r} is not a follow-up label; valid labels are {sorted(LABELS)}.")
    return label
