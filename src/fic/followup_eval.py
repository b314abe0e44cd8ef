"""Genuine follow-up rate on held-out contexts: the small before/after measurement the collaboration trainers share.

For each context `[system?, user, assistant]` the model's own template is rendered up to a bare *user* header
(`fic.chat.role_prefix`), the model writes the next user turn until the template's end of turn
(`fic.chat.turn_end_strings`), and a judge labels it. The rate is the share of `genuine_followup` among judged turns
with its 95% Wilson interval; turns the judge could not decide (`judge_error`) are counted apart, never as failures.
Greedy decoding draws one sample per context (more would be copies). The full probe, with controls, plots and
resumable runs, is `fic probe`; this is the part of it a training run needs.
"""

from __future__ import annotations

from collections import Counter

from fic.chat import role_prefix, turn_end_strings
from fic.generation import SamplingParams
from fic.metrics import genuine_rate


def check_contexts(contexts: list[list[dict]]) -> None:
    """Raise `ValueError` naming the context when one does not end with the assistant turn to reply to."""
    if not contexts:
        raise ValueError("contexts: empty; give at least one [user, assistant] conversation")
    for i, context in enumerate(contexts):
        if not context or context[-1].get("role") != "assistant":
            last = context[-1].get("role") if context else None
            raise ValueError(
                f"contexts[{i}]: must end with the assistant turn the user replies to (last role is {last!r})"
            )


def probe_prompts(tokenizer, contexts: list[list[dict]]) -> list[str]:
    """Each context rendered with the model's template and followed by the bare user header (BOS as written)."""
    check_contexts(contexts)
    return [role_prefix(tokenizer, context, "user") for context in contexts]


def sample_user_turns(backend, tokenizer, contexts, temperature: float, samples: int, max_new_tokens: int,
                      seed: int = 0) -> list[list[str]]:  # fmt: skip
    """`samples` generated user turns per context (one when greedy), cut at the template's end of turn."""
    params = SamplingParams(
        n=1 if temperature == 0 else samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        stop=turn_end_strings(tokenizer, "user"),
        seed=seed,
    )
    return backend.generate(probe_prompts(tokenizer, contexts), params)


def judge_turns(judge, contexts: list[list[dict]], turns: list[list[str]]) -> list[list]:
    """Verdicts, shaped like `turns`, from one batched judge call."""
    from fic.judges import Case

    cases = [Case(messages=context, user_turn=turn) for context, group in zip(contexts, turns) for turn in group]
    verdicts = iter(judge.judge(cases))
    return [[next(verdicts) for _ in group] for group in turns]


def summarize(verdicts: list) -> dict:
    """Rate with interval over the decided verdicts, label counts and the number of judge errors."""
    return {**genuine_rate(v.genuine for v in verdicts), "labels": dict(Counter(v.label for v in verdicts))}


def genuine_followup_rate(backend, tokenizer, contexts: list[list[dict]], judge, temperatures=(0.7,),
                          samples: int = 4, max_new_tokens: int = 48, seed: int = 0,
                          examples: int = 3, map_fn=None) -> dict:  # fmt: skip
    """Genuine follow-up rate of the model behind `backend` on `contexts`, pooled and per temperature.

    `map_fn(fn, contexts)` splits the work over processes (`fic.distributed.map_across_ranks`: each rank samples and
    judges its share of the contexts, every rank gets every verdict); `None` does it all here.

    Returns `{"genuine_rate": {"rate", "low", "high", "n"}, "labels": {...}, "judge_errors": k,
    "by_temperature": {"0.7": {...same...}}, "examples": [{"temperature", "user_turn", "label"}, ...]}`.
    """
    check_contexts(contexts)

    def sample_and_judge(share: list[list[dict]]) -> list[dict]:
        """Per context: {temperature: (turns, verdicts)}. One judge call for every temperature: the judge encodes
        each context once."""
        turns = {
            t: sample_user_turns(backend, tokenizer, share, t, samples, max_new_tokens, seed) for t in temperatures
        }
        all_contexts = [c for t in temperatures for c in share]
        all_verdicts = iter(judge_turns(judge, all_contexts, [g for t in temperatures for g in turns[t]]))
        out = [{} for _ in share]
        for t in temperatures:
            for i in range(len(share)):
                out[i][t] = (turns[t][i], next(all_verdicts))
        return out

    per_context = map_fn(sample_and_judge, contexts) if map_fn is not None else sample_and_judge(contexts)
    pooled, by_temperature, shown = [], {}, []
    for t in temperatures:
        groups = [row[t] for row in per_context]
        flat = [v for _, verdicts in groups for v in verdicts]
        pooled += flat
        by_temperature[str(t)] = summarize(flat)
        shown += [
            {"temperature": t, "user_turn": group_turns[0], "label": group_verdicts[0].label}
            for group_turns, group_verdicts in groups[:examples]
        ]
    overall = summarize(pooled)
    return {
        "genuine_rate": {k: overall[k] for k in ("rate", "low", "high", "n", "judge_errors")},
        "labels": overall["labels"],
        "judge_errors": overall["judge_errors"],
        "by_temperature": by_temperature,
        "examples": shown,
    }
