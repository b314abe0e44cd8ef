"""The simulated user: knows the hidden intent, answers clarifying questions, never states the answer outright.

Offline user (`SimulatedUser`): the scenario maps the question to a slot by rules (an attribute, or "which reading
do you mean"); when the rules find nothing and an embedder is given, the question is matched to the nearest of the
scenario's canonical questions (cosine >= `embed_threshold`). A question it cannot place, or one that asks for the
answer itself, gets "I don't know." Replies are shaped by a behaviour profile:

- cooperative: a full sentence stating the true value;
- terse: the bare value;
- vague: half of the time "I'm not sure", otherwise a hedge that is true but less specific ("X or Y");
- contradicts_once: the first answerable question with an alternative gets another candidate's value, corrected
  in the same reply ("X. Actually no, sorry, I misspoke: Y"), so the information is all there but contradictory;
- verbose: the cooperative sentence wrapped in chatty filler that names no attribute value.

`LLMUser` asks a chat model for the reply instead (`fic.eval.simulated_user.ChatModelUser`, shared with LiC), with
the intent and the profile in its instructions; any reply that names the answer is replaced by "I don't know."
"""

from __future__ import annotations

import logging
import random

from fic.eval.clarify.scenarios import Episode, Scenario
from fic.eval.simulated_user import ChatModelUser

logger = logging.getLogger(__name__)

PROFILES = ("cooperative", "terse", "vague", "contradicts_once", "verbose")
DONT_KNOW = "I don't know."
NOT_SURE = "Hmm, I'm not sure."
OPENERS = (
    "Oh, good question!",
    "Thanks for asking, I appreciate you checking with me.",
    "Let me think for a second, I have been going back and forth on this.",
)
CLOSERS = (
    "I hope that helps you narrow it down.",
    "Sorry for rambling, I just want to get this right.",
    "Anyway, that is what I have in mind at the moment.",
)
PROFILE_INSTRUCTIONS = {
    "cooperative": "Answer the assistant's question helpfully and precisely in one sentence.",
    "terse": "Answer the assistant's question in as few words as possible.",
    "vague": "Answer the assistant's question vaguely and hedge; sometimes say you are not sure.",
    "contradicts_once": "In your first answer state a wrong detail, then correct yourself in the same reply.",
    "verbose": "Answer the assistant's question, but chat at length around the answer.",
}


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is unknown; choose one of {list(PROFILES)} (or 'all').")
    return profile


def vague_reply(hedge: str) -> str:
    return f"Maybe {hedge}, I'm not sure."


def contradicting_reply(wrong: str, right: str) -> str:
    return f"{wrong} Actually no, sorry, I misspoke: {right}"


def reply_distribution(
    scenario: Scenario, episode: Episode, target: int, question: str, profile: str
) -> list[tuple[float, str]]:
    """The replies the offline user may give to `question` when it means `target`, with their probabilities, up to
    what the tracker reads from them (filler and phrasing that carry no information are left out). This is what the
    reference policy plans with: it knows how users of this profile behave, not what they want."""
    fact = scenario.fact(episode, target, question)
    if fact is None:
        return [(1.0, DONT_KNOW)]
    if profile != "vague":
        return [(1.0, fact.sentence)]
    hedges = fact.hedges or [fact.phrase or fact.value]
    return [(0.5, NOT_SURE)] + [(0.5 / len(hedges), vague_reply(h)) for h in hedges]


class SimulatedUser:
    """Rule-based user for one episode (see the module docstring). Deterministic given `rng`."""

    def __init__(
        self,
        scenario: Scenario,
        episode: Episode,
        profile: str,
        rng: random.Random,
        embedder=None,
        embed_threshold: float = 0.4,
        target: int | None = None,
    ):
        self.scenario, self.episode = scenario, episode
        self.profile = check_profile(profile)
        self.rng = rng
        self.embedder, self.embed_threshold = embedder, embed_threshold
        self.target = episode.target if target is None else target
        self.contradicted = False

    def _fact(self, question: str):
        fact = self.scenario.fact(self.episode, self.target, question)
        slot = self.scenario.question_slot(self.episode, question)
        if fact is None and slot is None and self.embedder is not None:
            canon = self.scenario.questions(self.episode, list(range(len(self.episode.intents))))
            idx, sim = self.embedder.nearest(question, [q.text for q in canon])
            if idx >= 0 and sim >= self.embed_threshold:
                fact = self.scenario.fact(self.episode, self.target, canon[idx].text)
        return fact

    def respond(self, question: str, dialogue: list[dict] | None = None) -> str:
        fact = self._fact(question)
        if fact is None:
            body = DONT_KNOW
        elif self.profile == "terse":
            body = f"{fact.phrase or fact.value}."
        elif self.profile == "vague":
            if self.rng.random() < 0.5:
                body = NOT_SURE
            else:
                hedge = self.rng.choice(fact.hedges) if fact.hedges else (fact.phrase or fact.value)
                body = vague_reply(hedge)
        elif self.profile == "contradicts_once" and not self.contradicted and fact.alternatives:
            _, wrong = self.rng.choice(fact.alternatives)
            self.contradicted = True
            body = contradicting_reply(wrong, fact.sentence)
        elif self.profile == "verbose":
            body = f"{self.rng.choice(OPENERS)} {fact.sentence} {self.rng.choice(CLOSERS)}"
        else:
            body = fact.sentence
        if self.scenario.leaks(self.episode, self.target, body):
            return DONT_KNOW
        return body


class LLMUser(ChatModelUser):
    """A chat model plays the user. `model` is a `fic.eval.clarify.model.ChatModel`."""

    def __init__(
        self, scenario: Scenario, episode: Episode, profile: str, model, seed: int = 0, max_new_tokens: int = 48
    ):
        super().__init__(model, seed=seed, max_new_tokens=max_new_tokens)
        self.scenario, self.episode = scenario, episode
        self.profile = check_profile(profile)

    def respond(self, question: str, dialogue: list[dict] | None = None) -> str:
        target = self.episode.target
        transcript = "\n".join(f"{m['role']}: {m['content']}" for m in (dialogue or []))
        reply = self.say(
            f"You are role-playing a user talking to an assistant. What you really want: "
            f"{self.scenario.describe(self.episode, target)}\n"
            f"{PROFILE_INSTRUCTIONS[self.profile]} Never say the final answer or the exact product name. "
            f'If you cannot answer the question, say "I don\'t know".\n\n'
            f"Conversation so far:\n{transcript}\n\nThe assistant now asks: {question}\nWrite only your reply."
        )
        if not reply or self.scenario.leaks(self.episode, target, reply):
            return DONT_KNOW
        return reply
