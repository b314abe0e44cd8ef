"""The reference clarification policy's planner: greedy expected information gain, stop on value of information.

The prior over intents is uniform on the consistent set S. The planner knows how users of the episode's behaviour
profile reply (`user.reply_distribution`: a cooperative user states the value, a vague one says "not sure"
half of the time, ...) but not which intent they mean. For a candidate question q it enumerates every hypothetical
target t in S and every reply r the user may give, and runs r through the rule tracker, giving the state
S'_q(t, r) that the real dialogue would reach. Then

    EIG(q)   = log2 |S| - E_{t, r} log2 |S'_q(t, r)|
    V_ans(S) = max_i P(answering i is right)                (1/|S| when the intents are distinct)
    V(S)     = max(V_ans(S), -c + E_{t, r} V(S'_{q*}(t, r)))  with q* the unasked question of highest EIG (> 0)

and the reference asks q* exactly when its value of information, E V(S'_{q*}) - V_ans(S), exceeds the per-turn
cost c; otherwise it answers with the most likely intent (the first one on ties). V looks ahead with the same greedy
choice at every step (bounded by the turns left), so a question that only pays off after a follow-up is still worth
asking; since it only asks when that beats answering now, under its own model of the user its expected value is
never below answering at once.
Tracker reads are cached per (question, reply).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fic.eval.clarify.scenarios import Episode, Question, Scenario
from fic.eval.clarify.tracker import State, combine
from fic.eval.clarify.user import reply_distribution

_EPS = 1e-9


@dataclass
class Plan:
    act: str  # "ask" | "answer"
    question: Question | None
    intent: int
    eig: float
    voi: float
    answer_value: float


class GreedyPlanner:
    def __init__(self, scenario: Scenario, cost: float, max_turns: int, profile: str = "cooperative"):
        if cost < 0:
            raise ValueError(f"cost={cost} is negative; the per-turn cost must be >= 0.")
        self.scenario, self.cost, self.max_turns, self.profile = scenario, cost, max_turns, profile
        self._replies: dict = {}
        self._evidence: dict = {}
        self._values: dict = {}
        self._outcomes: dict = {}

    def outcomes(self, episode: Episode, state: State, question: Question) -> list[tuple[float, State]]:
        """(probability, next state) over hypothetical targets in S (uniform) and the profile's replies."""
        okey = (episode.id, state.slots, question.text)
        if okey in self._outcomes:
            return self._outcomes[okey]
        s = state.consistent
        out = []
        for t in s:
            key = (episode.id, question.text, t)
            if key not in self._replies:
                self._replies[key] = reply_distribution(self.scenario, episode, t, question.text, self.profile)
            for p, reply in self._replies[key]:
                ekey = (episode.id, question.text, reply)
                if ekey not in self._evidence:
                    self._evidence[ekey] = self.scenario.extract(episode, question.text, reply)
                out.append((p / len(s), combine(state, self._evidence[ekey])))
        self._outcomes[okey] = out
        return out

    def best_guess(self, episode: Episode, state: State) -> tuple[int, float]:
        """The intent most likely to be right if answered now (first on ties), and that probability."""
        s = state.consistent
        scores = [sum(1 for t in s if self.scenario.same_intent(episode, i, t)) for i in s]
        best = max(range(len(s)), key=lambda k: (scores[k], -k))
        return s[best], scores[best] / len(s)

    def information_gain(self, episode: Episode, state: State, question: Question) -> float:
        after = self.outcomes(episode, state, question)
        return math.log2(len(state.consistent)) - sum(p * math.log2(max(1, len(n.consistent))) for p, n in after)

    def greedy_question(self, episode: Episode, state: State, asked: frozenset[str]) -> tuple[Question | None, float]:
        """The unasked question of highest EIG (first in pool order on ties), or None when none gains anything."""
        best, best_gain = None, 0.0
        for q in self.scenario.questions(episode, list(state.consistent)):
            if q.key in asked:
                continue
            gain = self.information_gain(episode, state, q)
            if gain > best_gain + _EPS:
                best, best_gain = q, gain
        return best, best_gain

    def value(self, episode: Episode, state: State, asked: frozenset[str], turns_left: int) -> float:
        """V(S) under the greedy policy with `turns_left` questions allowed (memoised)."""
        key = (episode.id, state.slots, asked, turns_left)
        if key not in self._values:
            _, v = self.best_guess(episode, state)
            if turns_left > 0 and len(state.consistent) > 1:
                q, _ = self.greedy_question(episode, state, asked)
                if q is not None:
                    v = max(v, -self.cost + self.continuation(episode, state, asked, q, turns_left))
            self._values[key] = v
        return self._values[key]

    def continuation(self, episode: Episode, state: State, asked: frozenset[str], q: Question, turns_left: int):
        """E V(S'_q) with one turn fewer."""
        nxt = asked | {q.key}
        return sum(p * self.value(episode, n, nxt, turns_left - 1) for p, n in self.outcomes(episode, state, q))

    def plan(self, episode: Episode, state: State, asked: frozenset[str], turns_used: int) -> Plan:
        intent, v_answer = self.best_guess(episode, state)
        turns_left = self.max_turns - turns_used
        if turns_left <= 0 or len(state.consistent) <= 1:
            return Plan("answer", None, intent, 0.0, 0.0, v_answer)
        q, gain = self.greedy_question(episode, state, asked)
        if q is None:
            return Plan("answer", None, intent, 0.0, 0.0, v_answer)
        voi = self.continuation(episode, state, asked, q, turns_left) - v_answer
        act = "ask" if voi > self.cost + _EPS else "answer"
        return Plan(act, q, intent, gain, voi, v_answer)
