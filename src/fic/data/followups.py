"""Follow-up SFT data: conversations whose user turns after an answer are genuine follow-ups.

Two kinds of rows, both `{"id", "source", "origin", "messages", ...}` and readable back as `conversations:PATH`:

- `real`: multi-turn conversations taken as they are: MT-Bench's two questions with the reference answers between
  them, multi-turn HealthBench prompts, any `conversations` JSONL. A conversation is kept when at least one user turn
  follows an assistant turn (what collaboration SFT trains on); the others are counted as skipped.
- `sampled` / `template` (rejection sampling): each context is a dataset item plus an answer (`data`: the data's
  reference; `model`: the model's own greedy answer). For each, candidate user turns are written, by any generation
  backend from the bare user header (`sampled`), or offline from follow-up templates filled with a number or a term
  of the answer (`template`, for CPU runs and tests). The judge labels every candidate; up to `keep` genuine ones
  per context become rows `[context..., user: follow-up]`.

The `fic build-followups` command over these pieces is `fic.cli_followups`; collaboration SFT uses them directly.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections import Counter

from fic.chat import render, role_prefix, turn_end_strings
from fic.judges import Case

from . import load_source
from .records import Record

logger = logging.getLogger(__name__)

ANSWERS = ("data", "model")  # as the probe's `responses`

# Follow-up templates: {x} is a number of the answer, {w} a term of the answer (absent from the question).
NUMBER_TEMPLATES = (
    "Why is it {x}?",
    "How did you get {x}?",
    "Where does the {x} come from?",
    "Can you explain the step with {x} in more detail?",
    "Are you sure about {x}? Can you check it again?",
    "What would change if it were {y} instead of {x}?",
)
TERM_TEMPLATES = (
    "What do you mean by {w}?",
    "Can you give me an example of {w}?",
    "Could you say more about {w}?",
    "Why does {w} matter here?",
    "How does {w} work in practice?",
    "Can you explain {w} in simpler words?",
)
GENERIC_TEMPLATES = (
    "Can you explain that in more detail?",
    "Can you make your answer shorter?",
    "Could you explain the first step again?",
    "Why did you choose that approach?",
    "Can you give me an example of that?",
    "What if I need it in a simpler form?",
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_TERM = re.compile(r"\b[A-Za-z][a-z]{5,}\b")
_COMMON = set(
    "about above across after again against because before being below between beyond cannot could during either "
    "every first following further however include including itself might other others should since someone "
    "something still their there these thing things those through under until usually which while within without "
    "would years answer question really always people example important different".split()
)


def data_answer(record: Record) -> str | None:
    """The answer the data gives for `record`: MT-Bench's first reference turn, the reference, or Coval's first
    candidate response."""
    turns = record.meta.get("reference_turns")
    if turns:
        return turns[0]
    if record.reference:
        return record.reference
    candidates = record.meta.get("candidates") or []
    return candidates[0]["text"] if candidates else None


def model_answers(backend, tokenizer, records: list[Record], max_new_tokens: int, progress: bool = False) -> list[str]:
    """The model's own answers to `records` (each ending with a user turn): greedy, in one batched call, rendered with
    its template and cut at its end of turn. The training contexts and the follow-up sampler's answers
    (`fic.followup_eval.answer_rows`) both come from here."""
    if not records:
        return []
    from fic.generation import SamplingParams  # torch (fic.generation): not for --real

    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens,
                            stop=turn_end_strings(tokenizer, "assistant"))  # fmt: skip
    prompts = [render(tokenizer, r.messages, add_generation_prompt=True) for r in records]
    return [out[0].strip() for out in backend.generate(prompts, params, progress=progress)]


def contexts_from_records(records: list[Record], answers: str = "data", backend=None, tokenizer=None,
                          max_new_tokens: int = 256) -> list[dict]:  # fmt: skip
    """`{"id", "source", "messages"}` contexts: each record's conversation (ending with a user turn) plus an answer.

    Args:
        answers: `data` (the data's answer; items without one are skipped) or `model` (the model's greedy
            answer in its own template, which needs `backend` and `tokenizer`).
    """
    if answers not in ANSWERS:
        raise ValueError(f"answers: unknown value {answers!r}; valid: {', '.join(ANSWERS)}")
    usable = [r for r in records if r.messages and r.messages[-1]["role"] == "user"]
    if answers == "data":
        pairs = [(r, data_answer(r)) for r in usable]
    else:
        if backend is None or tokenizer is None:
            raise ValueError("answers='model' needs a generation backend and its tokenizer")
        pairs = list(zip(usable, model_answers(backend, tokenizer, usable, max_new_tokens)))
    contexts = [
        {
            "id": f"{r.source}:{r.id}",
            "source": r.source,
            "messages": [*r.messages, {"role": "assistant", "content": a}],
        }
        for r, a in pairs
        if a and a.strip()
    ]
    skipped = len(records) - len(contexts)
    if skipped:
        logger.info(
            "%d of %d items give no context (no final user turn or no %s answer)", skipped, len(records), answers
        )
    return contexts


def has_followup(messages: list[dict]) -> bool:
    """Whether some user turn directly follows an assistant turn."""
    return any(a["role"] == "assistant" and b["role"] == "user" for a, b in zip(messages, messages[1:]))


def real_conversations(records: list[Record], single_turn: bool = False) -> tuple[list[dict], int]:
    """Multi-turn conversations as they are (MT-Bench turns interleaved with reference answers when it has them);
    returns `(rows, skipped)` where skipped conversations hold no user follow-up. With `single_turn`, a conversation
    with an assistant turn and no follow-up is kept too (for training on assistant turns)."""
    rows, skipped = [], 0
    for r in records:
        messages = list(r.messages)
        turns, references = r.meta.get("turns"), r.meta.get("reference_turns") or []
        if r.source == "mt_bench" and turns and references:
            messages = []
            for i, turn in enumerate(turns):
                messages.append({"role": "user", "content": turn})
                if i < len(references) and references[i].strip():
                    messages.append({"role": "assistant", "content": references[i]})
                else:
                    break
        if has_followup(messages) or (single_turn and any(m["role"] == "assistant" for m in messages)):
            rows.append({"id": f"{r.source}:{r.id}", "source": r.source, "origin": "real", "messages": messages})
        else:
            skipped += 1
    return rows, skipped


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


def template_followups(messages: list[dict], n: int = 4, seed: int = 0) -> list[str]:
    """`n` distinct follow-up candidates for a context, from templates filled with a number or a term that the
    answer introduces (not in the question); generic ones when the answer gives neither. Deterministic in
    `(messages, n, seed)`."""
    answer = messages[-1]["content"]
    question = " ".join(m["content"] for m in messages[:-1] if m["role"] == "user")
    rng = random.Random(_seed(seed, answer[:200], question[:200]))
    numbers = list(dict.fromkeys(x for x in _NUMBER.findall(answer) if x not in _NUMBER.findall(question)))
    asked = question.lower()
    terms = list(
        dict.fromkeys(w.lower() for w in _TERM.findall(answer) if w.lower() not in _COMMON and w.lower() not in asked)
    )
    pool = [("number", t) for t in NUMBER_TEMPLATES] if numbers else []
    pool += [("term", t) for t in TERM_TEMPLATES] if terms else []
    # Generic requests only when the answer offers nothing to build on: a judge accepts them after any answer, and
    # SFT on them teaches one stock turn (measured in `make reproduce`: 58% of the SFT model's turns were one of them).
    pool = pool or [("generic", t) for t in GENERIC_TEMPLATES]
    rng.shuffle(pool)
    out: list[str] = []
    for kind, template in pool:
        if kind == "number":
            x = rng.choice(numbers)
            y = str(int(float(x)) + rng.randint(1, 9))
            text = template.format(x=x, y=y)
        elif kind == "term":
            text = template.format(w=rng.choice(terms))
        else:
            text = template
        if text not in out:
            out.append(text)
        if len(out) == n:
            break
    return out


def sample_candidates(backend, tokenizer, contexts: list[dict], n: int, temperature: float, max_new_tokens: int,
                      top_p: float = 1.0, seed: int = 0) -> list[list[str]]:  # fmt: skip
    """`n` user turns per context written by the model from the bare user header, cut at its end of turn."""
    from fic.generation import SamplingParams

    params = SamplingParams(
        n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
        stop=turn_end_strings(tokenizer, "user"), seed=seed,
    )  # fmt: skip
    outputs = backend.generate([role_prefix(tokenizer, c["messages"], "user") for c in contexts], params)
    return [[text.strip() for text in group] for group in outputs]


def rejection_sample(contexts: list[dict], candidates: list[list[str]], judge, keep: int = 1,
                     origin: str = "sampled") -> tuple[list[dict], Counter]:  # fmt: skip
    """Judge every candidate; keep up to `keep` genuine ones per context (most confident first, distinct texts).

    Returns the SFT rows and the label counts over all candidates (`judge_error` included).
    """
    if len(candidates) != len(contexts):
        raise ValueError(
            f"candidates: {len(candidates)} groups for {len(contexts)} contexts; expected one per context"
        )
    cases = [Case(messages=c["messages"], user_turn=t) for c, group in zip(contexts, candidates) for t in group]
    verdicts = iter(judge.judge(cases) if cases else [])
    rows, counts = [], Counter()
    for context, group in zip(contexts, candidates):
        judged = [(text, next(verdicts)) for text in group]
        counts.update(v.label for _, v in judged)
        genuine = sorted(
            ((t, v) for t, v in judged if v.genuine and t.strip()), key=lambda tv: -(tv[1].confidence or 0.0)
        )
        for k, (text, verdict) in enumerate(list({t: (t, v) for t, v in genuine}.values())[:keep]):
            rows.append({
                "id": f"{context['id']}#{k}", "source": context["source"], "origin": origin,
                "messages": [*context["messages"], {"role": "user", "content": text.strip()}],
                "label": verdict.label, "confidence": verdict.confidence, "judge": verdict.judge,
            })  # fmt: skip
    return rows, counts


def first_user(messages: list[dict]) -> str:
    """The first user message, normalised: the key that keeps training and held-out conversations apart."""
    text = next((m["content"] for m in messages if m["role"] == "user"), "")
    return " ".join(text.split()).lower()


def drop_overlap(rows: list[dict], heldout: list[list[dict]]) -> tuple[list[dict], int]:
    """Rows whose first user message is not the first user message of any held-out conversation; and how many went."""
    held = {first_user(m) for m in heldout}
    kept = [r for r in rows if first_user(r["messages"]) not in held]
    return kept, len(rows) - len(kept)


def load_records(specs: list[str], limit: int | None = None) -> list[Record]:
    return [record for spec in specs for record in load_source(spec, limit=limit)]
