"""Hidden-intent episodes: the shared types, where the data lives, and the scenario registry.

An episode is an under-specified opening request, a list of possible intents, and the index of the one the simulated
user really means. A scenario (products, ambigqa) knows how to build episodes from its data, which clarifying
questions the reference policy may ask, what the user can truthfully say in reply (a `Fact`), what a reply tells the
rule-based tracker (`Evidence`), and which intent a free-form answer names.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fic.data import load_source

logger = logging.getLogger(__name__)

SCENARIOS = ("products", "ambigqa")
DEFAULT_FILES = {"products": "products_dummyjson/products.json", "ambigqa": "ambigqa/dev_light.json"}


@dataclass(frozen=True)
class Intent:
    """One possible meaning of the request. `label` is what a correct answer names (a product title, a gold answer);
    `attributes` are the scenario's facts about it (products: brand, price band, ...; ambigqa: question, answers)."""

    id: str
    label: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    id: str
    scenario: str
    request: str
    intents: list[Intent]
    target: int
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if len(self.intents) < 1:
            raise ValueError(f"Episode {self.id!r}: `intents` is empty; an episode needs at least one intent.")
        if not 0 <= self.target < len(self.intents):
            raise ValueError(
                f"Episode {self.id!r}: `target`={self.target} is out of range for {len(self.intents)} intents; "
                "use an index into `intents`."
            )


@dataclass(frozen=True)
class Question:
    """A clarifying question from the reference's pool; `key` names what it asks about (e.g. 'attr:brand')."""

    key: str
    text: str


@dataclass
class Fact:
    """What the user can truthfully say in reply to a question: the slot asked about, the true value, a cooperative
    sentence stating it, the bare phrase for it (for a terse user), other values of the slot in this episode (value, sentence) for a self-contradiction, and
    truthful but less specific phrasings (hedges) for a vague user."""

    slot: str
    value: str
    sentence: str
    phrase: str = ""
    alternatives: list[tuple[str, str]] = field(default_factory=list)
    hedges: list[str] = field(default_factory=list)


@dataclass
class Evidence:
    """What one user reply says: for each slot, the intents consistent with the statement about it.
    `mode` 'replace': a new statement about a slot overrides the old one (attribute slots);
    'intersect': it narrows the old one unless they are disjoint (free-text slots). `correction` forces replace."""

    slots: dict[str, frozenset[int]] = field(default_factory=dict)
    mode: str = "replace"
    correction: bool = False


class Scenario(Protocol):
    name: str

    def load(self, path: str | Path) -> list[dict]: ...

    def build_episodes(self, data: list[dict], n: int, seed: int) -> list[Episode]: ...

    def questions(self, episode: Episode, consistent: list[int]) -> list[Question]: ...

    def question_slot(self, episode: Episode, question: str) -> str | None: ...

    def fact(self, episode: Episode, target: int, question: str) -> Fact | None: ...

    def extract(self, episode: Episode, question: str, reply: str) -> Evidence: ...

    def resolve(self, episode: Episode, answer: str) -> int | None: ...

    def same_intent(self, episode: Episode, i: int, j: int) -> bool: ...

    def sentence(self, slot: str, value: str) -> str: ...

    def answer_text(self, episode: Episode, index: int) -> str: ...

    def leaks(self, episode: Episode, target: int, text: str) -> bool: ...

    def system_prompt(self, episode: Episode) -> str: ...

    def describe(self, episode: Episode, index: int) -> str: ...


def shared_data_dir() -> Path | None:
    """The shared data folder: env FIC_SHARED_DATA when set, else ../shared/data next to the repository (or the
    working directory); None if absent."""
    env = os.environ.get("FIC_SHARED_DATA")
    if env:
        candidates = [Path(env)]
    else:
        candidates = [
            Path(__file__).resolve().parents[1].parent / "shared" / "data",
            Path.cwd().parent / "shared" / "data",
        ]
    for path in candidates:
        if path.is_dir():
            return path
    return None


def default_data_path(scenario: str) -> Path | None:
    """The scenario's file in the shared data folder, or None when that folder or file is missing."""
    if scenario not in DEFAULT_FILES:
        raise ValueError(f"scenario={scenario!r} is unknown; choose one of {list(SCENARIOS)}.")
    root = shared_data_dir()
    if root is None:
        return None
    path = root / DEFAULT_FILES[scenario]
    return path if path.is_file() else None


def resolve_data_path(scenario: str, data: str | None) -> Path:
    """`data` if given (must exist), else the shared default; a clear error when neither is available."""
    if data:
        path = Path(data)
        if not path.is_file():
            raise ValueError(f"--data={data!r} is not a file; pass the path of the {scenario} data file.")
        return path
    path = default_data_path(scenario)
    if path is None:
        raise ValueError(
            f"--data is required for scenario={scenario!r}: the shared data folder was not found "
            f"(set FIC_SHARED_DATA or pass --data PATH to {DEFAULT_FILES[scenario].split('/')[-1]})."
        )
    return path


def load_records(kind: str, path: str | Path) -> list:
    """Records of `fic.data.load_source(f'{kind}:{path}')` (raises `fic.data.DataError` on malformed data)."""
    return load_source(f"{kind}:{path}")


CORRECTION = re.compile(r"\b(actually|misspoke|i meant|scratch that)\b", re.IGNORECASE)


def after_correction(reply: str) -> tuple[str, bool]:
    """The part of a reply that counts, and whether it corrects itself: a user who says "X. Actually no, sorry, I
    misspoke: Y" means Y, so only the text after the last correction cue is read."""
    cues = list(CORRECTION.finditer(reply))
    if not cues:
        return reply, False
    return reply[cues[-1].end() :], True
