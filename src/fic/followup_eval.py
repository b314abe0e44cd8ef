"""The follow-up measurement engine: render -> sample the user turn -> judge -> summarise, once for every caller.

For each context `[system?, user, assistant]` the model's own template is rendered up to a bare *user* header
(`fic.chat.role_prefix`), the model writes the next user turn until the template's end of turn
(`fic.chat.turn_end_strings`), and a judge labels it. Each judged turn becomes a sample row (`turn_rows`), the shape
`fic probe` writes to `samples.jsonl`, and every rate comes from `fic.followup_summary.summarize` over such rows:
item-clustered intervals, the judge-corrected rate, the generic floor of the context-swap control (`swap_answers`:
each turn judged again after its answer is replaced by another item's answer of the same dataset), and the
calibrated rate where labels exist. `fic probe` (controls, plots, resumable runs), the collaboration trainers'
before/after (`genuine_followup_rate`), checkpoint evaluation and the follow-up RL reward (`judge_turns`) share it.
Turns the judge could not decide (`judge_error`) are counted apart, never as failures.
"""

from __future__ import annotations

import math
from collections import Counter

from fic.chat import role_prefix, turn_end_strings
from fic.followup_summary import summarize
from fic.generation import SamplingParams
from fic.judges import Case

CHUNK_SIZE = 32  # contexts per generate call and per unit of work split over processes (the probe's --chunk-size)


def _each(fn, items: list) -> list:
    return fn(items)


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


def turn_cases(contexts: list[list[dict]], turns: list[str]) -> list:
    """One judge `Case` per (context, generated user turn) pair: what every judged turn goes through (the probe, the
    trainers' evaluations and the follow-up RL reward)."""
    return [Case(messages=list(context), user_turn=turn) for context, turn in zip(contexts, turns)]


def judge_turns(judge, contexts: list[list[dict]], turns: list[list[str]]) -> list[list]:
    """Verdicts, shaped like `turns`, from one batched judge call."""
    pairs = [(context, turn) for context, group in zip(contexts, turns) for turn in group]
    verdicts = iter(judge.judge(turn_cases([c for c, _ in pairs], [t for _, t in pairs])))
    return [[next(verdicts) for _ in group] for group in turns]


def swap_answers(contexts: list[list[dict]], groups: list[str]) -> list[list[dict] | None]:
    """The context-swap control: each context with its last (assistant) answer replaced by the answer of the next
    context of the same group (dataset), cyclically; None where the group has a single context."""
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    out: list[list[dict] | None] = [None] * len(contexts)
    for idx in members.values():
        if len(idx) < 2:
            continue
        for k, i in enumerate(idx):
            partner = contexts[idx[(k + 1) % len(idx)]]
            out[i] = [*contexts[i][:-1], {**contexts[i][-1], "content": partner[-1]["content"]}]
    return out


def turn_rows(meta: list[dict], contexts: list[list[dict]], turns: list[list[str]], verdicts: list[list],
              generic: list[list] | None = None) -> list[dict]:  # fmt: skip
    """Sample rows (`fic probe`'s `samples.jsonl` shape): one per generated turn, `meta[i]` (dataset, item_id,
    temperature, perturbation, and any other field) merged into the rows of context `i`; `generic` the verdicts of
    the same turns after the context swap (`generic_genuine`)."""
    rows = []
    for i, (context, group) in enumerate(zip(contexts, turns)):
        for s, text in enumerate(group):
            verdict = verdicts[i][s]
            row = {**meta[i], "sample": s, "messages": context, "user_turn": text, "label": verdict.label,
                   "genuine": verdict.genuine, "confidence": verdict.confidence, "rationale": verdict.rationale,
                   "judge": verdict.judge}  # fmt: skip
            if generic is not None:
                row["generic_genuine"] = generic[i][s].genuine if generic[i] is not None else None
            rows.append(row)
    return rows


def judge_with_floor(judge, contexts: list[list[dict]], turns: list[list[str]],
                     swapped: list[list[dict] | None] | None) -> tuple[list[list], list | None]:  # fmt: skip
    """(verdicts, generic verdicts or None): the turns judged in their context and, when `swapped` (the context-swap
    control's contexts, None where there is no partner) is given, again in those, in one judge call."""
    if swapped is None:
        return judge_turns(judge, contexts, turns), None
    both = judge_turns(judge, [*contexts, *[s for s in swapped if s is not None]],
                       [*turns, *[t for s, t in zip(swapped, turns) if s is not None]])  # fmt: skip
    verdicts, rest = both[: len(contexts)], iter(both[len(contexts) :])
    return verdicts, [next(rest) if s is not None else None for s in swapped]


def genuine_followup_rate(backend, tokenizer, contexts: list[list[dict]], judge, temperatures=(0.7,),
                          samples: int = 4, max_new_tokens: int = 48, seed: int = 0, examples: int = 3,
                          map_fn=None, meta: list[dict] | None = None, validity: dict | None = None,
                          generic_floor: bool = True, chunk_size: int = CHUNK_SIZE) -> dict:  # fmt: skip
    """Genuine follow-up rate of the model behind `backend` on `contexts`, pooled and per temperature.

    The contexts are sampled in chunks of `chunk_size`, chunk `c` with seed `seed + 9973 * c` (as the probe seeds its
    chunks), so the turns do not depend on which process samples a chunk. `map_fn(fn, chunks)` splits the chunks over
    processes (`fic.distributed.map_across_ranks`: each rank samples and judges its share, every rank gets every row,
    the rows of one process); `None` does it all here. `meta[i]` names context `i` (`dataset`, `item_id`; default:
    one dataset `heldout`, items by position).

    Returns `{"genuine_rate": {"rate", "low", "high", "n", "n_items", "judge_errors"}, "labels", "judge_errors",
    "by_temperature": {"0.7": {...}}, "summary": fic.followup_summary.summarize(rows), "examples": [...],
    "rows": [...]}`.
    """
    check_contexts(contexts)
    meta = meta or [{"dataset": "heldout", "item_id": str(i)} for i in range(len(contexts))]
    indexed = list(range(len(contexts)))
    # Partners are fixed over all contexts before any split, so one process and several give the same floor.
    swaps = swap_answers(contexts, [m["dataset"] for m in meta])

    def sample_and_judge(chunk: int) -> list[list[dict]]:
        """Rows per context of chunk `chunk`; one judge call for every temperature (the judge encodes each context
        once)."""
        share = indexed[chunk * chunk_size : (chunk + 1) * chunk_size]
        ctx = [contexts[i] for i in share]
        chunk_seed = seed + 9973 * chunk
        turns = {t: sample_user_turns(backend, tokenizer, ctx, t, samples, max_new_tokens, chunk_seed)
                 for t in temperatures}  # fmt: skip
        all_ctx = [c for _ in temperatures for c in ctx]
        all_turns = [g for t in temperatures for g in turns[t]]
        swapped = [swaps[i] for _ in temperatures for i in share] if generic_floor else None
        verdicts, generic = judge_with_floor(judge, all_ctx, all_turns, swapped)
        all_meta = [{**meta[i], "temperature": float(t), "perturbation": "none"} for t in temperatures for i in share]
        rows = turn_rows(all_meta, all_ctx, all_turns, verdicts, generic)
        out: list[list[dict]] = [[] for _ in share]
        position = {i: k for k, i in enumerate(share)}
        for row, i in zip(_expand(rows, all_turns), [i for _ in temperatures for i in share]):
            out[position[i]].extend(row)
        return out

    chunks = list(range(math.ceil(len(contexts) / chunk_size)))
    per_chunk = (map_fn or _each)(lambda share: [sample_and_judge(c) for c in share], chunks)
    rows = [row for per_context in per_chunk for group in per_context for row in group]
    summary = summarize(rows, validity=validity)
    overall = summary["overall"]["raw"]
    by_temperature = {}
    for t in temperatures:
        cells = [r for r in rows if r["temperature"] == float(t)]
        by_temperature[str(t)] = summarize(cells)["overall"]["raw"]
    shown = []
    for t in temperatures:
        firsts = [r for r in rows if r["temperature"] == float(t) and r["sample"] == 0][:examples]
        shown += [{"temperature": t, "user_turn": r["user_turn"], "label": r["label"]} for r in firsts]
    return {
        "genuine_rate": {k: overall[k] for k in ("rate", "low", "high", "n", "n_items", "judge_errors")},
        "labels": dict(Counter(r["label"] for r in rows)),
        "judge_errors": overall["judge_errors"],
        "by_temperature": by_temperature,
        "summary": summary,
        "examples": shown,
        "rows": rows,
    }


def _expand(rows: list[dict], turns: list[list[str]]) -> list[list[dict]]:
    """`rows` (flat, in context order) regrouped per context, as many as each context has turns."""
    out, it = [], iter(rows)
    for group in turns:
        out.append([next(it) for _ in group])
    return out
