"""What a follow-up judge consumes (`Case`) and produces (`Verdict`), and the `Judge` protocol they share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from .labels import JUDGE_ERROR, check_label, is_genuine


def message_text(message: dict, where: str = "message") -> str:
    """The text of one chat message; `content` may be a string or a list of OpenAI-style text parts."""
    if not isinstance(message, dict) or "role" not in message or "content" not in message:
        raise ValueError(f"{where}={message!r:.120} must be a dict with 'role' and 'content' keys.")
    content = message["content"]
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    raise ValueError(f"{where}.content has type {type(content).__name__}; expected a string or a list of text parts.")


@dataclass
class Case:
    """One generated user turn to judge.

    Args:
        messages: the context the user turn was generated after; it must end with the assistant turn
            (role `assistant`, or `model` for Gemma-style templates).
        user_turn: the raw generated user turn (may contain template debris: that is what is being judged).
    """

    messages: list[dict]
    user_turn: str

    def __post_init__(self):
        if not isinstance(self.messages, list) or not self.messages:
            raise ValueError(
                f"messages={self.messages!r:.120} must be a non-empty list of chat messages ending with the assistant turn."
            )
        last = self.messages[-1]
        message_text(last, "messages[-1]")
        if last["role"] not in ("assistant", "model"):
            raise ValueError(
                f"messages[-1].role={last['role']!r}: the context must end with the assistant turn the user turn "
                "replies to; drop trailing messages or add the assistant answer."
            )
        if self.user_turn is None:
            self.user_turn = ""
        if not isinstance(self.user_turn, str):
            raise ValueError(f"user_turn has type {type(self.user_turn).__name__}; expected a string.")

    @property
    def assistant_text(self) -> str:
        """Text of the assistant turn the user turn replies to."""
        return message_text(self.messages[-1], "messages[-1]")

    @property
    def previous_user_text(self) -> str:
        """Text of the last user message before the assistant turn ('' when there is none)."""
        for i in range(len(self.messages) - 2, -1, -1):
            if self.messages[i].get("role") == "user":
                return message_text(self.messages[i], f"messages[{i}]")
        return ""


@dataclass
class Verdict:
    """A judge's decision on one case.

    Args:
        label: one label of `fic.judges.labels.LABELS`, or `judge_error`.
        genuine: True for `genuine_followup`, False for a failure mode, None for `judge_error` (set from `label`
            when omitted).
        confidence: how sure the judge is, in [0, 1]; None when the judge did not say (an LLM reply without it).
        rationale: a short human-readable reason.
        judge: which judge decided (e.g. `heuristic`, `llm:MODEL`), so cascades stay auditable.
        extra: judge-specific details (scores, attempts); plain JSON data.
    """

    label: str
    genuine: bool | None = None
    confidence: float | None = 0.0
    rationale: str = ""
    judge: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.label != JUDGE_ERROR:
            check_label(self.label)
        expected = is_genuine(self.label)
        if self.genuine is None:
            self.genuine = expected
        elif self.genuine != expected:
            raise ValueError(
                f"genuine={self.genuine!r} contradicts label={self.label!r}; genuine must be {expected!r} for it."
            )
        if self.confidence is not None:
            self.confidence = float(min(1.0, max(0.0, self.confidence)))

    @property
    def is_error(self) -> bool:
        return self.label == JUDGE_ERROR

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def error(cls, rationale: str, judge: str = "", **extra) -> Verdict:
        return cls(label=JUDGE_ERROR, genuine=None, confidence=0.0, rationale=rationale, judge=judge, extra=extra)


@runtime_checkable
class Judge(Protocol):
    """Anything that labels a batch of cases, one verdict per case, in order."""

    name: str

    def judge(self, cases: list[Case]) -> list[Verdict]: ...
