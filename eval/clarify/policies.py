"""Clarification policies for hidden-intent episodes: each looks at the dialogue (and the tracked state) and asks,
answers or abstains.

- `reference`: greedy expected-information-gain questions, stops when the value of information is below the cost
  (`fic.eval.clarify.planner`); answers with the most likely consistent intent.
- `always_answer`: answers at once with the most likely intent.
- `always_ask`: asks every question of the reference's pool (highest information gain first, useless ones too) until
  none is left or the turn budget is spent, then answers like the reference.
- `model`: a chat model replies freely; a `STRATEGY:` line or a reply ending in '?' is a question, otherwise an
  answer (see `fic.eval.clarify.bag.parse_strategy`).
- `bag`: Belief-Augmented Generation: K samples (at `belief_temperature`) form the belief, the strategy prompt shows
  them, the chosen act is carried out; after a clarification, BAG+ (resample K at the same temperature; answer when
  >= `agree` of them agree, else abstain).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fic.eval.clarify.bag import bag_plus_answer, bag_step, check_belief_temperature, parse_strategy
from fic.eval.clarify.planner import GreedyPlanner
from fic.eval.clarify.scenarios import Episode, Scenario
from fic.eval.clarify.tracker import State

POLICIES = ("reference", "always_answer", "always_ask", "bag", "model")
GENERIC_QUESTION = "Could you tell me more about what you mean?"
ACTS = {"DIRECT_ANSWER": "answer", "CLARIFICATION_QUESTION": "ask", "ABSTAIN": "abstain"}


@dataclass
class Context:
    scenario: Scenario
    episode: Episode
    dialogue: list[dict]
    state: State
    asked: tuple[str, ...]
    turn: int
    max_turns: int
    seed: int = 0
    profile: str = "cooperative"


@dataclass
class Action:
    kind: str  # "ask" | "answer" | "abstain"
    text: str = ""
    intent: int | None = None
    key: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class _Planners:
    """One planner per user profile (the reference plans with the profile's reply model)."""

    def __init__(self, scenario: Scenario, cost: float, max_turns: int):
        self.scenario, self.cost, self.max_turns = scenario, cost, max_turns
        self._by_profile: dict[str, GreedyPlanner] = {}

    def __call__(self, profile: str) -> GreedyPlanner:
        if profile not in self._by_profile:
            self._by_profile[profile] = GreedyPlanner(self.scenario, self.cost, self.max_turns, profile)
        return self._by_profile[profile]


class ReferencePolicy:
    name = "reference"

    def __init__(self, scenario: Scenario, cost: float, max_turns: int):
        self.scenario = scenario
        self.planners = _Planners(scenario, cost, max_turns)

    def act(self, ctx: Context) -> Action:
        plan = self.planners(ctx.profile).plan(ctx.episode, ctx.state, frozenset(ctx.asked), ctx.turn)
        info = {"eig": round(plan.eig, 6), "voi": round(plan.voi, 6), "answer_value": round(plan.answer_value, 6)}
        if plan.act == "ask":
            return Action("ask", plan.question.text, key=plan.question.key, info=info)
        return Action("answer", self.scenario.answer_text(ctx.episode, plan.intent), intent=plan.intent, info=info)


class AlwaysAnswerPolicy:
    name = "always_answer"

    def __init__(self, scenario: Scenario, max_turns: int):
        self.scenario = scenario
        self.planners = _Planners(scenario, 0.0, max_turns)

    def act(self, ctx: Context) -> Action:
        intent, _ = self.planners(ctx.profile).best_guess(ctx.episode, ctx.state)
        return Action("answer", self.scenario.answer_text(ctx.episode, intent), intent=intent)


class AlwaysAskPolicy:
    name = "always_ask"

    def __init__(self, scenario: Scenario, max_turns: int):
        self.scenario = scenario
        self.planners = _Planners(scenario, 0.0, max_turns)

    def act(self, ctx: Context) -> Action:
        planner = self.planners(ctx.profile)
        if ctx.turn < ctx.max_turns:
            pool = [
                q for q in self.scenario.questions(ctx.episode, list(ctx.state.consistent)) if q.key not in ctx.asked
            ]
            if pool:
                gains = [planner.information_gain(ctx.episode, ctx.state, q) for q in pool]
                best = max(range(len(pool)), key=lambda k: (gains[k], -k))
                return Action("ask", pool[best].text, key=pool[best].key, info={"eig": round(gains[best], 6)})
        intent, _ = planner.best_guess(ctx.episode, ctx.state)
        return Action("answer", self.scenario.answer_text(ctx.episode, intent), intent=intent)


def _model_messages(ctx: Context) -> list[dict]:
    dialogue = [{**m, "content": m["content"] or "..."} for m in ctx.dialogue]
    return [{"role": "system", "content": ctx.scenario.system_prompt(ctx.episode)}, *dialogue]


class ModelPolicy:
    """A chat model answers or asks freely (greedy decoding)."""

    name = "model"

    def __init__(self, model, max_new_tokens: int = 64):
        self.model, self.max_new_tokens = model, max_new_tokens

    def act(self, ctx: Context) -> Action:
        reply = self.model.chat([_model_messages(ctx)], max_new_tokens=self.max_new_tokens, seed=ctx.seed)[0][0]
        strategy, content = parse_strategy(reply)
        kind = ACTS[strategy]
        text = content or reply
        if kind == "ask" and not text.strip():
            text = GENERIC_QUESTION
        return Action(kind, text, info={"raw": reply, "strategy": strategy})


class BAGPolicy:
    """Belief-Augmented Generation as a clarification policy (see `fic.eval.clarify.bag`)."""

    name = "bag"

    def __init__(
        self,
        model,
        k: int = 5,
        agree: float = 0.7,
        show_samples: bool = True,
        max_new_tokens: int = 48,
        belief_temperature: float = 1.0,
    ):
        self.model, self.k, self.agree = model, k, agree
        self.show_samples, self.max_new_tokens = show_samples, max_new_tokens
        self.belief_temperature = check_belief_temperature(belief_temperature)

    def _key(self, ctx: Context):
        return lambda text: ctx.scenario.resolve(ctx.episode, text)

    def act(self, ctx: Context) -> Action:
        messages = _model_messages(ctx)
        if ctx.turn == 0:
            step = bag_step(
                self.model,
                messages,
                k=self.k,
                seed=ctx.seed,
                show_samples=self.show_samples,
                key=self._key(ctx),
                max_new_tokens=self.max_new_tokens,
                belief_temperature=self.belief_temperature,
            )
            info = {
                "strategy": step.strategy,
                "samples": step.samples,
                "semantic_entropy": step.entropy,
                "raw": step.raw,
            }
            kind = ACTS[step.strategy]
            text = step.text if kind != "ask" or step.text.strip() else GENERIC_QUESTION
            return Action(kind, text, info=info)
        plus = bag_plus_answer(
            self.model,
            messages,
            k=self.k,
            seed=ctx.seed + ctx.turn,
            agree=self.agree,
            key=self._key(ctx),
            max_new_tokens=self.max_new_tokens,
            belief_temperature=self.belief_temperature,
        )
        info = {"strategy": "BAG+", "samples": plus.samples, "agreement": plus.share}
        if plus.answer is None:
            return Action("abstain", "", info=info)
        return Action("answer", plus.answer, info=info)


def get_policy(
    name: str,
    scenario: Scenario,
    cost: float,
    max_turns: int,
    model=None,
    k: int = 5,
    agree: float = 0.7,
    max_new_tokens: int = 64,
    belief_temperature: float = 1.0,
):
    """Build the policy `name`; `model` (a ChatModel) is required for 'model' and 'bag' (`k`, `agree` and
    `belief_temperature` are the bag policy's)."""
    if name == "reference":
        return ReferencePolicy(scenario, cost, max_turns)
    if name == "always_answer":
        return AlwaysAnswerPolicy(scenario, max_turns)
    if name == "always_ask":
        return AlwaysAskPolicy(scenario, max_turns)
    if name in ("model", "bag"):
        if model is None:
            raise ValueError(f"--policy {name} needs --model PATH (a local checkpoint or hub id).")
        if name == "model":
            return ModelPolicy(model, max_new_tokens=max_new_tokens)
        return BAGPolicy(model, k=k, agree=agree, max_new_tokens=max_new_tokens, belief_temperature=belief_temperature)
    raise ValueError(f"policy={name!r} is unknown; choose one of {list(POLICIES)}.")
