"""One hidden-intent episode: the policy acts, the simulated user replies, the tracker updates the state.

The loop ends when the policy answers or abstains, or when it wants to ask after `max_turns` questions (then the
episode ends unresolved: out of turns). The record keeps every question with the consistent-set size before and
after the reply and whether it asked for something the user had already said, the decisions with the state size
they were taken at (for stopping errors), the final act, and the value V = 1[resolved] - cost * questions.
"""

from __future__ import annotations

import logging

from fic.eval.clarify.policies import Action, Context
from fic.eval.clarify.scenarios import Episode, Scenario
from fic.eval.clarify.text import count_tokens, jaccard
from fic.metrics import episode_value, is_ineffective_clarification, stopping_errors

logger = logging.getLogger(__name__)

REPEAT_JACCARD = 0.8
NON_SLOTS = (None, "answer", "title")


def is_repeat(scenario: Scenario, episode: Episode, state, question: str, earlier: list[str]) -> bool:
    """The question asks for what was already said: it (nearly) repeats an earlier question, or asks about a slot
    the user already gave a statement for."""
    if any(jaccard(question, q) >= REPEAT_JACCARD for q in earlier):
        return True
    slot = scenario.question_slot(episode, question)
    return slot not in NON_SLOTS and state.slot(slot) is not None


def run_episode(
    scenario: Scenario,
    episode: Episode,
    policy,
    user,
    tracker,
    cost: float,
    max_turns: int,
    seed: int = 0,
    profile: str = "cooperative",
) -> dict:
    """Play one episode and return its record (plain JSON-able dict)."""
    dialogue = [{"role": "user", "content": episode.request}]
    state = tracker.initial(episode)
    asked: list[str] = []
    questions: list[dict] = []
    decisions: list[dict] = []
    final: Action | None = None
    out_of_turns = False
    while True:
        turn = len(questions)
        ctx = Context(scenario, episode, list(dialogue), state, tuple(asked), turn, max_turns, seed, profile)
        action = policy.act(ctx)
        if action.kind not in ("ask", "answer", "abstain"):
            raise ValueError(f"policy {policy.name!r} returned act {action.kind!r}; expected ask, answer or abstain.")
        decisions.append({"act": action.kind, "consistent": len(state.consistent)})
        if action.kind != "ask":
            final = action
            break
        if turn >= max_turns:
            out_of_turns = True
            final = action
            break
        text = action.text
        repeat = is_repeat(scenario, episode, state, text, [q["question"] for q in questions])
        dialogue.append({"role": "assistant", "content": text})
        reply = user.respond(text, list(dialogue))
        dialogue.append({"role": "user", "content": reply})
        new_state = tracker.update(episode, state, text, reply, list(dialogue))
        before, after = len(state.consistent), len(new_state.consistent)
        questions.append(
            {
                "turn": turn,
                "question": text,
                "key": action.key,
                "slot": scenario.question_slot(episode, text),
                "reply": reply,
                "before": before,
                "after": after,
                "repeat": repeat,
                "ineffective": is_ineffective_clarification(before, after, repeat),
                "info": action.info,
            }
        )
        state = new_state
        asked.append(action.key or f"free:{turn}")
    intent = None
    if final.kind == "answer" and not out_of_turns:
        intent = final.intent if final.intent is not None else scenario.resolve(episode, final.text)
    resolved = intent is not None and scenario.same_intent(episode, intent, episode.target)
    turns = len(questions)
    if final.kind == "answer" and not out_of_turns:
        dialogue.append({"role": "assistant", "content": final.text})
    return {
        "episode_id": episode.id,
        "scenario": episode.scenario,
        "policy": policy.name,
        "target": episode.target,
        "target_label": episode.intents[episode.target].label,
        "n_intents": len(episode.intents),
        "request": episode.request,
        "questions": questions,
        "decisions": decisions,
        "final": {
            "act": "out_of_turns" if out_of_turns else final.kind,
            "text": final.text,
            "intent": intent,
            "consistent": len(state.consistent),
            "info": final.info,
        },
        "resolved": resolved,
        "turns": turns,
        "user_tokens": sum(count_tokens(q["reply"]) for q in questions),
        "value": episode_value(resolved, turns, cost),
        "stopping": stopping_errors(decisions),
        "dialogue": dialogue,
    }
