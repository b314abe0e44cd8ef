"""Pure metric functions: rates with intervals, % changed, agreement (kappa), Lost-in-Conversation scores and
recovery, regret.

Every function here takes plain Python data (lists, dicts, numbers) and returns plain data, so each one can be
tested on hand-built inputs against hand-computed values.
"""

from __future__ import annotations

import math


def wilson_bounds(p: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share `p` observed on `n` trials, fic's one Wilson formula:

        (p + z^2 / 2n -+ z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n),

    clipped to [0, 1]. `n` may be any positive real: `fic.estimates.cluster_rate` gives it an effective sample size.
    """
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (`wilson_bounds`); (0.0, 0.0) when `total` is 0."""
    if total == 0:
        return (0.0, 0.0)
    return wilson_bounds(successes / total, total, z)


def rate_with_interval(flags: list[bool]) -> dict:
    """Share of True in `flags` with its 95% Wilson interval: {"rate", "low", "high", "n"}."""
    n = len(flags)
    k = sum(1 for f in flags if f)
    low, high = wilson_interval(k, n)
    return {"rate": k / n if n else 0.0, "low": low, "high": high, "n": n}


def genuine_rate(decisions) -> dict:
    """Genuine follow-up rate over judge decisions: {"rate", "low", "high", "n", "judge_errors"}.

    Each decision is True (genuine follow-up), False (a failure mode) or None (a judge error: no verdict). Judge
    errors are counted in `judge_errors` and left out of the rate and of `n`; they are never scored as failures.
    """
    decisions = list(decisions)
    decided = [bool(d) for d in decisions if d is not None]
    return {**rate_with_interval(decided), "judge_errors": len(decisions) - len(decided)}


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty list")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def lic_scores(scores_by_task: dict[str, list[float]]) -> dict:
    """Lost-in-Conversation metrics over tasks, each with N run scores in [0, 1].

    P (averaged performance) is the mean over tasks of the mean run score; A90 (aptitude) the mean of each task's
    90th-percentile score; U90_10 (unreliability) the mean of each task's 90th minus 10th percentile.
    """
    tasks = [s for s in scores_by_task.values() if s]
    if not tasks:
        return {"P": 0.0, "A90": 0.0, "U90_10": 0.0, "n_tasks": 0}
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "P": mean([mean(s) for s in tasks]),
        "A90": mean([percentile(s, 90) for s in tasks]),
        "U90_10": mean([percentile(s, 90) - percentile(s, 10) for s in tasks]),
        "n_tasks": len(tasks),
    }


def recovery(p_full_before: float, p_sharded_before: float, p_sharded_after: float) -> dict:
    """Recovery of a trained model: the share of the multi-turn gap that training closed, fic's one definition.

        recovery = (P_sharded_after - P_sharded_before) / (P_full_before - P_sharded_before)

    0 means the sharded view did not move, 1 that it reached the single-turn score of the model before training,
    above 1 that it passed it, below 0 that it fell. With no gap before training (P_full_before <= P_sharded_before)
    there is nothing to close: the value is None and `reason` says why; nothing is divided by zero.

    A single evaluation without a before and after has no recovery: its P_sharded / P_full is `sharded_over_full`.

    Returns:
        `dict`: `{"recovery": float | None, "gap_before": P_full_before - P_sharded_before,
        "closed": P_sharded_after - P_sharded_before, "reason": str | None}`.
    """
    gap = p_full_before - p_sharded_before
    closed = p_sharded_after - p_sharded_before
    if gap <= 0:
        reason = (f"no multi-turn gap before training (P_full {p_full_before:.4g} <= P_sharded "
                  f"{p_sharded_before:.4g}): there is no gap to close")  # fmt: skip
        return {"recovery": None, "gap_before": gap, "closed": closed, "reason": reason}
    return {"recovery": closed / gap, "gap_before": gap, "closed": closed, "reason": None}


def recovery_target(p_full_before: float, p_sharded_before: float, share_of_full: float) -> float | None:
    """The `recovery` at which P_sharded_after = `share_of_full` x P_full_before.

    A paper that states its result as a ratio ("P_sharded after training is 92% of single-turn P") is read on the
    gap-closed scale through this: recovery >= (s P_full - P_sharded) / (P_full - P_sharded), with the before scores
    of the same run, is the same statement as P_sharded_after >= s P_full_before. At or below 0 the model met the
    ratio before training. None where `recovery` is None (no gap before training).
    """
    gap = p_full_before - p_sharded_before
    if gap <= 0:
        return None
    return (share_of_full * p_full_before - p_sharded_before) / gap


def _paired(a: list, b: list) -> None:
    if len(a) != len(b):
        raise ValueError(
            f"the two rating lists differ in length ({len(a)} vs {len(b)}); pair them item by item first."
        )
    if not a:
        raise ValueError("agreement needs at least one rated item; both lists are empty.")


def agreement(a: list, b: list) -> float:
    """Raw agreement: the share of items on which the two raters give the same rating."""
    _paired(a, b)
    return sum(x == y for x, y in zip(a, b)) / len(a)


def cohen_kappa(a: list, b: list) -> float:
    """
    Cohen's kappa between two raters over the same items: (p_o - p_e) / (1 - p_e), where p_o is the raw agreement
    and p_e the agreement expected by chance from each rater's own rating frequencies. Ratings are any hashable
    values (labels, booleans). When chance agreement is already perfect (both raters always give the same single
    rating) kappa is undefined; this returns 1.0, since the raters then agree on every item.
    """
    _paired(a, b)
    n = len(a)
    p_o = agreement(a, b)
    count_a: dict = {}
    count_b: dict = {}
    for x, y in zip(a, b):
        count_a[x] = count_a.get(x, 0) + 1
        count_b[y] = count_b.get(y, 0) + 1
    p_e = sum(count_a[k] * count_b.get(k, 0) for k in count_a) / (n * n)
    if p_e == 1.0:
        return 1.0
    return (p_o - p_e) / (1 - p_e)


# --- clarification as policy: hidden-intent regret (fic regret) and Belief-Augmented Generation (fic bag) -------


def episode_value(resolved: bool, clarification_turns: int, cost: float) -> float:
    """Value of one hidden-intent episode: V = 1[intent resolved] - cost * clarification turns."""
    if clarification_turns < 0:
        raise ValueError(f"clarification_turns={clarification_turns} is negative; count the questions asked.")
    return (1.0 if resolved else 0.0) - cost * clarification_turns


def regret(reference_values: list[float], policy_values: list[float]) -> float:
    """Mean over episodes of V(reference) - V(policy), paired episode by episode; 0.0 for no episodes."""
    if len(reference_values) != len(policy_values):
        raise ValueError(
            f"regret needs one reference value per policy value ({len(reference_values)} vs {len(policy_values)}); "
            "pair them episode by episode."
        )
    if not policy_values:
        return 0.0
    return sum(r - p for r, p in zip(reference_values, policy_values)) / len(policy_values)


def is_ineffective_clarification(consistent_before: int, consistent_after: int, repeated: bool) -> bool:
    """A clarifying question is ineffective when the set of consistent intents did not shrink after the reply,
    or when it asked for what the user had already said (`repeated`)."""
    return repeated or consistent_after >= consistent_before


def ineffective_clarification_rate(questions: list[dict]) -> dict:
    """Share of ineffective questions among `questions` ({"before", "after", "repeat"} each):
    {"rate", "ineffective", "questions"}; rate 0.0 when no question was asked."""
    flags = [is_ineffective_clarification(q["before"], q["after"], bool(q.get("repeat"))) for q in questions]
    return {"rate": sum(flags) / len(flags) if flags else 0.0, "ineffective": sum(flags), "questions": len(flags)}


def stopping_errors(decisions: list[dict]) -> dict:
    """Stopping errors of one episode from its decisions ({"act": "ask"|"answer"|"abstain", "consistent": int},
    the number of intents consistent when the act was chosen): `answer_early` when it answered with more than one
    intent left, `ask_late` = number of questions chosen with exactly one intent left."""
    answer_early = any(d["act"] == "answer" and d["consistent"] > 1 for d in decisions)
    ask_late = sum(1 for d in decisions if d["act"] == "ask" and d["consistent"] == 1)
    return {"answer_early": answer_early, "ask_late": ask_late}


def stopping_error_rates(per_episode: list[dict]) -> dict:
    """Aggregate `stopping_errors` results: share of episodes that answered early, that asked late at least once,
    that did either (`rate`), and the total number of late questions."""
    n = len(per_episode)
    early = sum(1 for e in per_episode if e["answer_early"])
    late = sum(1 for e in per_episode if e["ask_late"] > 0)
    either = sum(1 for e in per_episode if e["answer_early"] or e["ask_late"] > 0)
    return {
        "rate": either / n if n else 0.0,
        "answer_early_rate": early / n if n else 0.0,
        "ask_late_rate": late / n if n else 0.0,
        "ask_late_questions": sum(e["ask_late"] for e in per_episode),
        "n": n,
    }


def semantic_entropy(cluster_ids: list) -> float:
    """Discrete semantic entropy (nats) of samples grouped into meaning clusters: -sum_c p_c log p_c with p_c the
    share of samples in cluster c. 0.0 when all samples agree (or there are none); log K for K distinct meanings."""
    n = len(cluster_ids)
    if n == 0:
        return 0.0
    counts: dict = {}
    for c in cluster_ids:
        counts[c] = counts.get(c, 0) + 1
    return -sum((k / n) * math.log(k / n) for k in counts.values())


def accuracy_with_abstentions(outcomes: list) -> dict:
    """Accuracy over answered items, abstentions excluded and counted. `outcomes`: True (correct), False (wrong),
    None (abstained). Returns {"accuracy", "answered", "correct", "abstained", "abstain_rate", "n"}; accuracy 0.0
    when nothing was answered."""
    answered = [o for o in outcomes if o is not None]
    correct = sum(1 for o in answered if o)
    n = len(outcomes)
    return {
        "accuracy": correct / len(answered) if answered else 0.0,
        "answered": len(answered),
        "correct": correct,
        "abstained": n - len(answered),
        "abstain_rate": (n - len(answered)) / n if n else 0.0,
        "n": n,
    }


def routing_profile(routes: list[str], outcomes: list, ambiguous: list[bool]) -> dict:
    """Per route (e.g. answer / clarify / abstain): its share of items, the accuracy of the final answers given on
    that route (abstentions excluded; None when nothing on it was answered), and the share of ambiguous items on it."""
    if not len(routes) == len(outcomes) == len(ambiguous):
        raise ValueError(
            f"routing_profile needs one outcome and one ambiguity flag per route ({len(routes)}, {len(outcomes)}, "
            f"{len(ambiguous)}); pass aligned lists."
        )
    n = len(routes)
    out = {}
    for route in dict.fromkeys(routes):
        idx = [i for i, r in enumerate(routes) if r == route]
        answered = [outcomes[i] for i in idx if outcomes[i] is not None]
        out[route] = {
            "share": len(idx) / n,
            "n": len(idx),
            "accuracy": sum(1 for o in answered if o) / len(answered) if answered else None,
            "ambiguous_share": sum(1 for i in idx if ambiguous[i]) / len(idx),
        }
    return out


def auroc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve of `scores` for the positive `labels` (Mann-Whitney U; ties count one half).
    None when one class is absent."""
    if len(scores) != len(labels):
        raise ValueError(f"auroc needs one label per score ({len(scores)} vs {len(labels)}).")
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def percent_changed(base: dict, perturbed: dict) -> dict:
    """Share of perturbed samples whose text differs from the unperturbed sample with the same key (same seed).

    `base` and `perturbed` map a sample key (item, temperature, sample index) to its generated text; only keys present
    in both count.
    """
    keys = [k for k in perturbed if k in base]
    changed = sum(1 for k in keys if perturbed[k] != base[k])
    return {"changed": changed / len(keys) if keys else 0.0, "n": len(keys)}


def label_distribution(labels: list[str]) -> dict[str, float]:
    """Share of each label among `labels` (judge errors included as their own label)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return {k: v / len(labels) for k, v in sorted(counts.items())} if labels else {}


REGRET_PARTS = ("answer_names_no_candidate", "answer_wrong_after_asking", "under_clarifying", "abstain_or_out_of_turns",
                "over_clarifying_turns", "turns_saved", "resolved_beyond_reference")  # fmt: skip


def regret_parts(records: list[dict]) -> dict[str, float]:
    """Mean regret split into what it is made of; the parts sum to `regret` of the same episodes.

    Each record is one episode of `fic regret`: `resolved`, `turns`, `value`, `final` ({act, intent}) and
    `reference` ({resolved, turns, value}). Per episode, regret = (resolved by the reference - resolved by the policy)
    + (the policy's turn cost - the reference's). An episode the reference resolves and the policy does not goes to
    `answer_names_no_candidate` (the answer matches no intent at all), `under_clarifying` (a wrong intent after fewer
    questions than the reference asked), `answer_wrong_after_asking` (a wrong intent after as many or more),
    or `abstain_or_out_of_turns`; one the policy resolves and the reference does not counts -1 in
    `resolved_beyond_reference`. The turn cost is `over_clarifying_turns` where the policy asked more than the
    reference and `turns_saved` (negative) where it asked fewer. All 0.0 for no episodes.
    """
    parts = dict.fromkeys(REGRET_PARTS, 0.0)
    for r in records:
        ref = r["reference"]
        missed = int(bool(ref["resolved"])) - int(bool(r["resolved"]))
        turn_cost = (ref["value"] - r["value"]) - missed
        if missed > 0:
            act, intent = r["final"]["act"], r["final"].get("intent")
            if act != "answer":
                part = "abstain_or_out_of_turns"
            elif intent is None:
                part = "answer_names_no_candidate"
            else:
                part = "under_clarifying" if r["turns"] < ref["turns"] else "answer_wrong_after_asking"
            parts[part] += missed
        elif missed < 0:
            parts["resolved_beyond_reference"] += missed
        parts["over_clarifying_turns" if turn_cost > 0 else "turns_saved"] += turn_cost
    n = len(records)
    return {k: v / n if n else 0.0 for k, v in parts.items()}


def fisher_exact(table: list[list[int]]) -> float:
    """Two-sided p-value of Fisher's exact test on a 2x2 table of counts [[a, b], [c, d]]: the total probability,
    under the margins' hypergeometric law, of the tables no more probable than the observed one (a relative tolerance
    of 1e-7 counts ties, as scipy does)."""
    (a, b), (c, d) = table
    if min(a, b, c, d) < 0:
        raise ValueError(f"fisher_exact needs counts >= 0, got {table}")
    row, col, n = a + b, a + c, a + b + c + d
    if n == 0:
        return 1.0

    def prob(x: int) -> float:
        return math.comb(col, x) * math.comb(n - col, row - x) / math.comb(n, row)

    observed = prob(a)
    support = range(max(0, row + col - n), min(row, col) + 1)
    return min(1.0, sum(p for p in map(prob, support) if p <= observed * (1 + 1e-7)))
