"""Semantic-state tracking: after each exchange, the set of intents still consistent with the dialogue.

The state keeps, per slot, the intents consistent with what the user last said about that slot (in the order the
slots were last touched). The consistent set is the intersection over slots, newest first; a slot whose set would
empty the intersection is skipped (the user contradicted an older statement, and the newer one wins).

`RuleTracker` reads slots out of each reply with the scenario's `extract` (attribute-value matching for products,
distinctive-word overlap for AmbigQA). `LLMTracker` asks a chat model which numbered intents remain and stores its
answer as one slot that every exchange replaces.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from fic.eval.clarify.scenarios import Episode, Evidence, Scenario

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class State:
    n_intents: int
    slots: tuple[tuple[str, frozenset[int]], ...] = ()
    consistent: tuple[int, ...] = field(default=())

    @classmethod
    def initial(cls, n_intents: int) -> State:
        return cls(n_intents=n_intents, slots=(), consistent=tuple(range(n_intents)))

    def slot(self, name: str) -> frozenset[int] | None:
        return dict(self.slots).get(name)


def combine(state: State, evidence: Evidence) -> State:
    """The state after `evidence` (see the module docstring for the rules)."""
    slots = dict(state.slots)
    for name, ids in evidence.slots.items():
        old = slots.pop(name, None)
        if evidence.mode == "intersect" and not evidence.correction and old is not None and old & ids:
            ids = old & ids
        slots[name] = frozenset(ids)
    consistent = set(range(state.n_intents))
    for _, ids in reversed(list(slots.items())):
        if consistent & ids:
            consistent &= ids
    return State(n_intents=state.n_intents, slots=tuple(slots.items()), consistent=tuple(sorted(consistent)))


class RuleTracker:
    """Offline tracker: the scenario's rules read each reply."""

    name = "rules"

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    def initial(self, episode: Episode) -> State:
        return State.initial(len(episode.intents))

    def update(self, episode: Episode, state: State, question: str, reply: str, dialogue=None) -> State:
        return combine(state, self.scenario.extract(episode, question, reply))


class LLMTracker:
    """A chat model reads the dialogue and lists the intents it still allows (`model`: a ChatModel)."""

    name = "llm"

    def __init__(self, scenario: Scenario, model, max_new_tokens: int = 24):
        self.scenario, self.model, self.max_new_tokens = scenario, model, max_new_tokens

    def initial(self, episode: Episode) -> State:
        return State.initial(len(episode.intents))

    def update(self, episode: Episode, state: State, question: str, reply: str, dialogue=None) -> State:
        options = "\n".join(f"{i + 1}. {self.scenario.describe(episode, i)}" for i in range(len(episode.intents)))
        transcript = "\n".join(f"{m['role']}: {m['content']}" for m in (dialogue or []))
        prompt = (
            f"Possible meanings of the user's request:\n{options}\n\nConversation:\n{transcript}\n\n"
            "Which numbers are still consistent with everything the user said? Reply with the numbers only, "
            "separated by commas."
        )
        text = self.model.chat([[{"role": "user", "content": prompt}]], max_new_tokens=self.max_new_tokens)[0][0]
        ids = parse_intent_numbers(text, len(episode.intents))
        if not ids:  # nothing usable: the exchange told this tracker nothing
            return state
        return combine(state, Evidence(slots={"llm": frozenset(ids)}, mode="replace"))


def parse_intent_numbers(text: str, n: int) -> list[int]:
    """1-based numbers in `text` that name an intent, as 0-based indices (sorted, unique)."""
    return sorted({int(m) - 1 for m in re.findall(r"\b\d+\b", text) if 1 <= int(m) <= n})
