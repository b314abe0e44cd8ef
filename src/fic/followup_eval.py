"""The follow-up sampler: render -> sample the user turn -> judge -> rows, one path for every follow-up measurement.

`fic probe` (and `fic eval-checkpoints` and the training callback, which run the probe), the collaboration trainers'
before/after (`genuine_followup_rate`) and the follow-up RL reward (`judge_turns`) all measure through this module, so
the same settings give the same rows whichever of them runs:

- *Answers* (`answer_rows`): the assistant answer each user turn replies to, the model's own (greedy, in its
  template, cut at its end of turn: `fic.data.followups.model_answers`) or the data's (`data_answer`), made in chunks
  of `chunk_size` items of one dataset (the same batches whatever the caller or the number of processes).
- *Prompts* (`probe_prompts`): each context `[system?, user, assistant]` rendered with the model's own template up to
  a bare *user* header (`fic.chat.role_prefix`); the model writes until the template's end of turn
  (`fic.chat.turn_end_strings`). Items whose longest prompt does not fit the model's context are left out (`fits`).
- *Seeds and greedy* (`FollowupJobs`): the items of one dataset are sampled in chunks of `chunk_size`; chunk `c` of a
  dataset draws with seed `seed + 9973 * c` (`chunk_seed`), so a turn depends only on the chunk, its place in it and
  the sample index, never on the caller, the process or what a resumed run had finished. Every temperature gives
  `samples` rows per item; at temperature 0 the backend decodes once and repeats the text
  (`fic.generation.base.one_greedy_sample`).
- *Controls* (`perturb`): `truncate` cuts the answer in half, `question` appends "What do you think?", and `reseed`
  (the seed floor of % changed) samples the unperturbed context again with the seed moved by `RESEED`.
- *Context swap* (the generic floor): every turn is judged again after its answer is replaced by the answer of the
  next item of the same dataset, cyclically (the same control applied); a dataset of one item has no swap.

Each judged turn becomes a sample row (`turn_rows`), the shape `fic probe` writes to `samples.jsonl`, and every rate
comes from `fic.followup_summary.summarize` over such rows. Turns the judge could not decide (`judge_error`) are
counted apart, never as failures.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from fic.chat import role_prefix, turn_end_strings
from fic.data import check_answer
from fic.data.followups import data_answer, model_answers
from fic.followup_summary import SEED_FLOOR, summarize
from fic.generation import SamplingParams
from fic.judges import Case

logger = logging.getLogger(__name__)

CHUNK_SIZE = 32  # items per generate call and per unit of work split over processes (the probe's --chunk-size)
GENERIC_QUESTION = "What do you think?"
PERTURBATIONS = ("none", "truncate", "question", SEED_FLOOR)
RESEED = 1_000_003  # the seed offset of the `reseed` floor
CHUNK_SEED_STRIDE = 9973  # chunk `c` of a dataset samples with seed `seed + 9973 * c`


def perturb(response: str, kind: str) -> str:
    """The assistant response under a control: unchanged (also for `reseed`, which changes only the seed), cut to its
    first half (at a word), or with a question."""
    if kind in ("none", SEED_FLOOR):
        return response
    if kind == "truncate":
        words = response.split(" ")
        return " ".join(words[: max(1, len(words) // 2)])
    if kind == "question":
        return f"{response.rstrip()}\n\n{GENERIC_QUESTION}"
    raise ValueError(f"perturbation: unknown {kind!r}; valid: {', '.join(PERTURBATIONS)}")


def with_seed_floor(perturbations) -> tuple[str, ...]:
    """`perturbations` plus `reseed` when a control (`truncate`, `question`) is among them."""
    perturbations = tuple(perturbations)
    if SEED_FLOOR not in perturbations and set(perturbations) & {"truncate", "question"}:
        perturbations += (SEED_FLOOR,)
    return perturbations


def chunk_seed(seed: int, chunk: int, perturbation: str = "none") -> int:
    """The sampling seed of chunk `chunk` of a dataset under `perturbation` (`reseed` moves it by `RESEED`)."""
    return seed + CHUNK_SEED_STRIDE * chunk + (RESEED if perturbation == SEED_FLOOR else 0)


def chunks_by_dataset(items: list, dataset, chunk_size: int) -> dict[str, list[list]]:
    """`items` grouped by `dataset(item)` (in order of first appearance), each group cut into chunks of `chunk_size`."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(dataset(item), []).append(item)
    return {
        name: [group[i : i + chunk_size] for i in range(0, len(group), chunk_size)] for name, group in groups.items()
    }


def answer_rows(backend, tokenizer, dataset: str, records, source: str, max_new_tokens: int,
                progress: bool = False) -> list[dict]:  # fmt: skip
    """The assistant answers of `records` (one chunk of one dataset): the model's (greedy, one batched call, cut at
    the template's end of turn) or the data's, with their check: `{"dataset", "item_id", "response", "correct"}`."""
    if source == "model":
        texts = model_answers(backend, tokenizer, records, max_new_tokens, progress)
    elif source == "data":
        texts = [data_answer(r) for r in records]
    else:
        raise ValueError(f"responses: expected 'model' or 'data', got {source!r}")
    return [
        {"dataset": dataset, "item_id": r.id, "response": t, "correct": check_answer(r, t) if t else None}
        for r, t in zip(records, texts)
    ]


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


def context_limit(backend, max_new_tokens: int, max_context: int | None = None) -> int | None:
    """The most prompt tokens a probe prompt may have: the model's context (`max_context`, else the engine's: the model
    config's for transformers, `max_model_len` for vLLM and a server) less `max_new_tokens`; None when unknown."""
    if not max_context:
        engine = getattr(backend, "max_context", None)
        max_context = engine() if callable(engine) else None
    return max_context - max_new_tokens if max_context else None


def fits(tokenizer, messages: list[dict], response: str, limit: int | None) -> bool:
    """Whether the longest probe prompt of an item (the `question` control) fits `limit` tokens."""
    if limit is None:
        return True
    context = [*messages, {"role": "assistant", "content": perturb(response, "question")}]
    return len(tokenizer(role_prefix(tokenizer, context, "user"), add_special_tokens=False).input_ids) <= limit


def sample_user_turns(backend, tokenizer, contexts, temperature: float, samples: int, max_new_tokens: int,
                      seed: int = 0) -> list[list[str]]:  # fmt: skip
    """`samples` generated user turns per context, cut at the template's end of turn (greedy: one decoded text, repeated
    by the backend)."""
    params = SamplingParams(n=samples, temperature=temperature, max_new_tokens=max_new_tokens,
                            stop=turn_end_strings(tokenizer, "user"), seed=seed)  # fmt: skip
    return backend.generate(probe_prompts(tokenizer, contexts), params)


@dataclass
class Item:
    """One measured item: its conversation up to the user turn the model answered, that answer, and the fields its
    rows carry besides the sampler's (the probe's `correct`)."""

    dataset: str
    item_id: object
    messages: list[dict]
    answer: str
    fields: dict = field(default_factory=dict)

    def context(self, perturbation: str = "none", answer: str | None = None) -> list[dict]:
        """The context the user turn replies to: the conversation, then the answer (or `answer`) under the control."""
        reply = perturb(self.answer if answer is None else answer, perturbation)
        return [*self.messages, {"role": "assistant", "content": reply}]


@dataclass
class FollowupJobs:
    """The jobs of one follow-up measurement: job `(dataset, c, temperature, perturbation)` writes `samples` user turns
    for each item of chunk `c` of `dataset` in one generate call (seed `chunk_seed(seed, c, perturbation)`), judges
    them in their context and, with `generic_floor`, after the context swap, and returns their rows."""

    backend: object
    tokenizer: object
    judge: object
    items: list[Item]
    samples: int = 1
    max_new_tokens: int = 64
    seed: int = 0
    chunk_size: int = CHUNK_SIZE
    generic_floor: bool = True

    def __post_init__(self):
        self.chunks = chunks_by_dataset(self.items, lambda item: item.dataset, self.chunk_size)

    def jobs(self, temperatures, perturbations) -> list[tuple]:
        return [(d, c, t, p) for d, chunks in self.chunks.items() for c in range(len(chunks))
                for t in temperatures for p in perturbations]  # fmt: skip

    def keys(self, job: tuple) -> list[tuple]:
        dataset, c, temp, pert = job
        return [(dataset, str(item.item_id), float(temp), pert, s) for item in self.chunks[dataset][c]
                for s in range(self.samples)]  # fmt: skip

    def swapped(self, dataset: str, c: int, perturbation: str) -> list[list[dict]] | None:
        """The context-swap control's contexts of chunk `c`: each item's answer replaced by the next item's of the
        dataset, cyclically; None without the floor or when the dataset has a single item."""
        group = [item for chunk in self.chunks[dataset] for item in chunk]
        if not self.generic_floor or len(group) < 2:
            return None
        first = c * self.chunk_size
        return [item.context(perturbation, group[(first + k + 1) % len(group)].answer)
                for k, item in enumerate(self.chunks[dataset][c])]  # fmt: skip

    def make(self, job: tuple) -> list[dict]:
        dataset, c, temp, pert = job
        chunk = self.chunks[dataset][c]
        contexts = [item.context(pert) for item in chunk]
        turns = sample_user_turns(self.backend, self.tokenizer, contexts, temp, self.samples, self.max_new_tokens,
                                  chunk_seed(self.seed, c, pert))  # fmt: skip
        verdicts, generic = judge_with_floor(self.judge, contexts, turns, self.swapped(dataset, c, pert))
        meta = [{"dataset": dataset, "item_id": item.item_id, "temperature": float(temp), "perturbation": pert,
                 **item.fields} for item in chunk]  # fmt: skip
        return turn_rows(meta, contexts, turns, verdicts, generic)


def turn_cases(contexts: list[list[dict]], turns: list[str]) -> list:
    """One judge `Case` per (context, generated user turn) pair: what every judged turn goes through (the probe, the
    trainers' evaluations and the follow-up RL reward)."""
    return [Case(messages=list(context), user_turn=turn) for context, turn in zip(contexts, turns)]


def judge_turns(judge, contexts: list[list[dict]], turns: list[list[str]]) -> list[list]:
    """Verdicts, shaped like `turns`, from one batched judge call."""
    pairs = [(context, turn) for context, group in zip(contexts, turns) for turn in group]
    verdicts = iter(judge.judge(turn_cases([c for c, _ in pairs], [t for _, t in pairs])))
    return [[next(verdicts) for _ in group] for group in turns]


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
    """Genuine follow-up rate of the model behind `backend` on `contexts`, pooled and per temperature: the probe's
    unperturbed jobs (`FollowupJobs`) without its files, so the rows are the ones `fic probe` writes for the same
    items, answers and settings.

    `meta[i]` names context `i` (`dataset`, `item_id`, and any other row field such as `correct`; default: one dataset
    `heldout`, items by position). Contexts whose longest probe prompt does not fit the model's context are left out,
    as the probe leaves them out. `map_fn(fn, jobs)` splits the jobs over processes
    (`fic.distributed.map_across_ranks`: each rank samples and judges its share, every rank gets every row, the rows
    of one process); `None` does it all here.

    Returns `{"genuine_rate": {"rate", "low", "high", "n", "n_items", "judge_errors"}, "labels", "judge_errors",
    "by_temperature": {"0.7": {...}}, "summary": fic.followup_summary.summarize(rows), "examples": [...],
    "rows": [...]}`.
    """
    check_contexts(contexts)
    meta = meta or [{"dataset": "heldout", "item_id": str(i)} for i in range(len(contexts))]
    items = [Item(m["dataset"], m["item_id"], list(c[:-1]), c[-1]["content"],
                  {k: v for k, v in m.items() if k not in ("dataset", "item_id")}) for c, m in zip(contexts, meta)]  # fmt: skip
    limit = context_limit(backend, max_new_tokens)
    fitting = [item for item in items if fits(tokenizer, item.messages, item.answer, limit)]
    if len(fitting) < len(items):
        logger.warning("skipped %d of %d contexts whose probe prompt does not fit the model's context (%d tokens)",
                       len(items) - len(fitting), len(items), limit)  # fmt: skip
    jobs = FollowupJobs(backend, tokenizer, judge, fitting, samples, max_new_tokens, seed, chunk_size, generic_floor)
    per_job = (map_fn or _each)(lambda share: [jobs.make(job) for job in share], jobs.jobs(temperatures, ("none",)))
    rows = [row for job_rows in per_job for row in job_rows]
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


def _each(fn, items: list) -> list:
    return fn(items)
