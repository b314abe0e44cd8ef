"""Belief-Augmented Generation (BAG): let the model see its own uncertainty before it decides to answer, ask or abstain.

1. Belief: K answers sampled at the belief temperature (`belief_temperature`, `--belief-temperature`, default 1.0;
   it must be > 0: at 0 the K samples would be one greedy answer repeated, entropy 0 on every item) from the plain
   conversation; they are grouped into meaning clusters
   (a caller's key such as "which intent it names", else `fic.eval.clarify.text.cluster_answers`: each sample's
   first sentence, normalised, without lead-ins, the user's words and stop words, equal or contained as whole words)
   and their semantic entropy is recorded. Compared as whole strings, K samples almost always differ and the entropy
   would be log K on every item (on SmolLM2-135M at temperature 1 even the grouped samples all differ, so
   `make reproduce` chooses the temperature on dev items).
2. Strategy: a prompt lists the K samples (variant `bag`; `prompt_only` omits them) and asks for one line
   `STRATEGY: DIRECT_ANSWER | CLARIFICATION_QUESTION | ABSTAIN`, then the answer or the question. The line is parsed
   leniently (case, spaces, underscores, partial words); without one, a reply ending in '?' is a question and
   anything else an answer.
3. Act: the answer is given (or, when the text is empty, the largest cluster's first sample); the question is put
   to a simulated user; abstaining ends the item. After the user's reply, `bag` and `prompt_only` answer greedily,
   `bag_plus` resamples K answers and answers when at least `agree` (0.7) of them agree, else abstains.

`fic bag` runs this on AmbigQA items, a seeded draw of which it takes `--limit` after skipping the first `--skip`
(so a `--skip N` run reads items disjoint from a `--limit N` run at the same seed; an item's seed is its position in
the draw either way): every item gets a hidden intent (one of its disambiguations, or the question itself
when unambiguous), correctness is against that intent's answers, abstentions are excluded from accuracy and counted.
Metrics (`summarize_bag`): accuracy with its interval (the item as the cluster), routing profile (share of answer /
clarify / abstain with accuracy and share of ambiguous items within each), faithfulness (semantic entropy per route,
and the AUROC of entropy for not answering directly with a bootstrap interval over items), and the AUROC of the
belief's entropy for the item being ambiguous.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fic import cli_args
from fic.cli_args import backend_name
from fic.errors import FicError
from fic.eval.clarify.ambigqa import AmbigQAScenario, load_ambigqa
from fic.eval.clarify.model import load_chat_model
from fic.eval.clarify.scenarios import Episode, Intent, resolve_data_path
from fic.eval.clarify.stats import accuracy_interval, faithfulness
from fic.eval.clarify.text import cluster_answers, matches_any_answer
from fic.eval.clarify.user import SimulatedUser, check_profile
from fic.jsonl import append_rows, check_settings, load_keyed, write_json, writer_lock
from fic.metrics import accuracy_with_abstentions, auroc, routing_profile, semantic_entropy

logger = logging.getLogger(__name__)

STRATEGIES = ("DIRECT_ANSWER", "CLARIFICATION_QUESTION", "ABSTAIN")
VARIANTS = ("bag", "prompt_only", "bag_plus")
ROUTES = {"DIRECT_ANSWER": "answer", "CLARIFICATION_QUESTION": "clarify", "ABSTAIN": "abstain"}
_STRATEGY_LINE = re.compile(
    r"strategy\W{0,4}(direct\W?_?\W?answer|answer\w*|clarif\w*(?:\W?_?\W?question)?|question|ask\w*|abstain\w*|refus\w*)",
    re.IGNORECASE,
)
_BARE = re.compile(r"\b(DIRECT_ANSWER|CLARIFICATION_QUESTION|ABSTAIN)\b")
INSTRUCTIONS = (
    "Decide how to respond to the user's last message. Start your reply with exactly one line:\n"
    "STRATEGY: DIRECT_ANSWER | CLARIFICATION_QUESTION | ABSTAIN\n"
    "then, on the next line, your answer (DIRECT_ANSWER) or one short clarifying question "
    "(CLARIFICATION_QUESTION). Ask when the request can reasonably mean different things; abstain when you cannot "
    "answer reliably."
)


def _canonical(word: str) -> str:
    w = word.lower()
    if w.startswith(("clarif", "question", "ask")):
        return "CLARIFICATION_QUESTION"
    if w.startswith(("abstain", "refus")):
        return "ABSTAIN"
    return "DIRECT_ANSWER"


def parse_strategy(text: str) -> tuple[str, str]:
    """(strategy, content) from a model reply. A `STRATEGY:` line (any case, spaces/underscores/dashes, partial
    words like 'clarify') wins; else a bare DIRECT_ANSWER / CLARIFICATION_QUESTION / ABSTAIN token; else a reply
    ending in '?' is a clarification and anything else a direct answer. `content` is the reply without the
    strategy marker."""
    match = _STRATEGY_LINE.search(text) or _BARE.search(text)
    if match:
        strategy = _canonical(match.group(1))
        before = re.sub(r"[\s*_#>]+$", "", text[: match.start()]).strip()
        after = re.sub(r"^[\s:|\-*_.>]+", "", text[match.end() :]).strip()
        return strategy, f"{before} {after}".strip()
    stripped = text.strip()
    return ("CLARIFICATION_QUESTION" if stripped.endswith("?") else "DIRECT_ANSWER"), stripped


def cluster_samples(samples: list[str], key: Callable[[str], object] | None = None, context: str = "") -> list[int]:
    """Meaning clusters of `samples` (ids 0, 1, ... by first appearance). With `key`, samples with the same
    non-None key share a cluster (e.g. the intent they name); the rest cluster by `cluster_answers` given the user's
    turns `context` (whose words are not part of an answer)."""
    keys = [key(s) if key is not None else None for s in samples]
    unkeyed = [s for s, k in zip(samples, keys) if k is None]
    meaning = iter(cluster_answers(unkeyed, context))
    labels = [("key", k) if k is not None else ("meaning", next(meaning)) for k in keys]
    ids: dict = {}
    return [ids.setdefault(label, len(ids)) for label in labels]


def top_cluster(cluster_ids: list[int]) -> tuple[int, float]:
    """The largest cluster (earliest on ties) and its share of the samples."""
    if not cluster_ids:
        return -1, 0.0
    counts = Counter(cluster_ids)
    best = max(counts, key=lambda c: (counts[c], -c))
    return best, counts[best] / len(cluster_ids)


def strategy_messages(messages: list[dict], samples: list[str] | None) -> list[dict]:
    """The strategy prompt: the conversation as a transcript, the samples when given, the instructions."""
    system = [m for m in messages if m["role"] == "system"]
    turns = [m for m in messages if m["role"] != "system"]
    transcript = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in turns)
    parts = [f"Conversation so far:\n{transcript}"]
    if samples is not None:
        listed = "\n".join(f"{i + 1}. {s or '(empty)'}" for i, s in enumerate(samples))
        parts.append(f"Before deciding, you drafted {len(samples)} answers independently:\n{listed}")
    parts.append(INSTRUCTIONS)
    return [*system, {"role": "user", "content": "\n\n".join(parts)}]


@dataclass
class BagStep:
    strategy: str
    text: str
    samples: list[str]
    cluster_ids: list[int]
    entropy: float
    raw: str


@dataclass
class BagPlus:
    answer: str | None
    share: float
    samples: list[str]
    cluster_ids: list[int]


def user_context(messages: list[dict]) -> str:
    """The user's turns of a conversation, joined: the words an answer repeats from them carry no answer."""
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def check_belief_temperature(value: float) -> float:
    """`value` when it is a usable belief temperature (> 0), else ValueError: at 0 the K samples would be one greedy
    answer repeated, and a negative temperature means nothing."""
    if not value > 0:  # also NaN
        raise ValueError(
            f"--belief-temperature={value}: need a temperature > 0 (at 0 the K belief samples would all be the same "
            "greedy answer)."
        )
    return value


def sample_belief(
    model,
    messages: list[dict],
    k: int,
    seed: int,
    key=None,
    max_new_tokens: int = 48,
    belief_temperature: float = 1.0,
):
    """K answers sampled at `belief_temperature` and their meaning cluster ids (`cluster_samples` with the user's
    turns as context)."""
    check_belief_temperature(belief_temperature)
    samples = model.chat([messages], n=k, temperature=belief_temperature, seed=seed, max_new_tokens=max_new_tokens)[0]
    ids = cluster_samples(samples, key, user_context(messages))
    return samples, ids


def bag_step(
    model,
    messages: list[dict],
    k: int = 5,
    seed: int = 0,
    show_samples: bool = True,
    key=None,
    max_new_tokens: int = 48,
    belief_temperature: float = 1.0,
) -> BagStep:
    """Belief (K samples at `belief_temperature`), strategy prompt (with or without them), parsed decision."""
    samples, ids = sample_belief(model, messages, k, seed, key, max_new_tokens, belief_temperature)
    raw = model.chat(
        [strategy_messages(messages, samples if show_samples else None)], seed=seed, max_new_tokens=max_new_tokens + 16
    )[0][0]
    strategy, text = parse_strategy(raw)
    if strategy == "DIRECT_ANSWER" and not text:
        best, _ = top_cluster(ids)
        text = samples[ids.index(best)] if best >= 0 else ""
    return BagStep(strategy, text, samples, ids, semantic_entropy(ids), raw)


def bag_plus_answer(
    model,
    messages: list[dict],
    k: int = 5,
    seed: int = 0,
    agree: float = 0.7,
    key=None,
    max_new_tokens: int = 48,
    belief_temperature: float = 1.0,
) -> BagPlus:
    """BAG+: resample K answers (at `belief_temperature`); answer with the largest cluster when it holds >= `agree`
    of them, else abstain."""
    samples, ids = sample_belief(model, messages, k, seed, key, max_new_tokens, belief_temperature)
    best, share = top_cluster(ids)
    answer = samples[ids.index(best)] if best >= 0 and share >= agree - 1e-9 else None
    return BagPlus(answer, share, samples, ids)


# --- fic bag: AmbigQA ------------------------------------------------------------------------------------------


def item_episode(item: dict, rng: random.Random):
    """The hidden-intent episode for an AmbigQA item: its disambiguations (target drawn by `rng`), or, when it is
    unambiguous, a single intent (the question itself; clarifying questions then get "I don't know")."""
    if item["ambiguous"]:
        episode = AmbigQAScenario().make_episode(item, rng)
        if episode is not None:
            return episode
    answers = [a for intent in item["intents"] for a in intent["answers"]]
    intent = Intent(
        id=f"{item['id']}#0",
        label=answers[0] if answers else "",
        attributes={"question": item["question"], "answers": answers, "span": "", "distinctive": ()},
    )
    return Episode(
        id=f"ambigqa-{item['id']}",
        scenario="ambigqa",
        request=item["question"],
        intents=[intent],
        target=0,
        meta={"item_id": item["id"]},
    )


def run_item(
    model,
    item: dict,
    variant: str,
    k: int,
    seed: int,
    profile: str = "cooperative",
    agree: float = 0.7,
    max_new_tokens: int = 48,
    belief_temperature: float = 1.0,
) -> dict:
    """One AmbigQA item through BAG (`variant`: bag, prompt_only, bag_plus); returns its record."""
    scenario = AmbigQAScenario()
    rng = random.Random(f"bag|{seed}|{item['id']}")
    episode = item_episode(item, rng)
    gold = episode.intents[episode.target].attributes["answers"]
    messages = [
        {"role": "system", "content": scenario.system_prompt(episode)},
        {"role": "user", "content": item["question"]},
    ]
    step = bag_step(
        model,
        messages,
        k=k,
        seed=seed,
        show_samples=variant != "prompt_only",
        max_new_tokens=max_new_tokens,
        belief_temperature=belief_temperature,
    )
    route = ROUTES[step.strategy]
    clarification, final = None, None
    if route == "answer":
        final = step.text
    elif route == "clarify":
        question = step.text or "Could you tell me more about what you mean?"
        user = SimulatedUser(scenario, episode, profile, rng)
        reply = user.respond(question)
        clarification = {"question": question, "reply": reply}
        messages = [*messages, {"role": "assistant", "content": question}, {"role": "user", "content": reply}]
        if variant == "bag_plus":
            plus = bag_plus_answer(
                model,
                messages,
                k=k,
                seed=seed + 1,
                agree=agree,
                max_new_tokens=max_new_tokens,
                belief_temperature=belief_temperature,
            )
            final = plus.answer
            clarification.update({"samples": plus.samples, "agreement": plus.share})
        else:
            final = model.chat([messages], seed=seed, max_new_tokens=max_new_tokens)[0][0]
    correct = None if final is None else matches_any_answer(final, gold)
    any_gold = [a for intent in item["intents"] for a in intent["answers"]]
    return {
        "key": str(item["id"]),
        "id": str(item["id"]),
        "question": item["question"],
        "ambiguous": item["ambiguous"],
        "variant": variant,
        "target": episode.target,
        "gold": gold,
        "samples": step.samples,
        "cluster_ids": step.cluster_ids,
        "semantic_entropy": step.entropy,
        "strategy": step.strategy,
        "raw": step.raw,
        "route": route,
        "clarification": clarification,
        "final_answer": final,
        "abstained": final is None,
        "correct": correct,
        "correct_any": None if final is None else matches_any_answer(final, any_gold),
    }


def summarize_bag(records: list[dict], header: dict, k: int) -> dict:
    """summary.json of a `fic bag` run over its item records (one per item, K = `k` belief samples): accuracy with
    abstentions excluded and its interval with the item as the cluster (`accuracy_interval`), accuracy of all items
    and against any intent's answers, the routing profile, the faithfulness of routes to beliefs
    (`fic.eval.clarify.stats.faithfulness`, plus the plain AUROC `auroc_entropy_not_direct`), and how the belief
    separates ambiguous items (`ambiguous`, `auroc_ambiguous`: AUROC of the entropy for the item being ambiguous)."""
    outcomes = [r["correct"] for r in records]
    routes = [r["route"] for r in records]
    entropies = [float(r["semantic_entropy"]) for r in records]
    ambiguous = [bool(r["ambiguous"]) for r in records]
    counts = accuracy_with_abstentions(outcomes)
    n = len(records)
    return {
        **header,
        **counts,
        "accuracy_interval": accuracy_interval(records),
        "accuracy_all_items": counts["correct"] / n if n else 0.0,
        "accuracy_any_intent": sum(1 for r in records if r["correct_any"]) / counts["answered"]
        if counts["answered"]
        else 0.0,
        "routing": routing_profile(routes, outcomes, ambiguous),
        "faithfulness": {
            **faithfulness(records, k),
            "auroc_entropy_not_direct": auroc(entropies, [r != "answer" for r in routes]),
        },
        "belief": {"ambiguous": sum(ambiguous), "auroc_ambiguous": auroc(entropies, ambiguous)},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None, help="AmbigQA dev_light.json (default: the shared data folder)")
    cli_args.add_model_arguments(parser, tokenizer=False)
    parser.add_argument("--variant", default="bag", choices=VARIANTS, help="bag, prompt_only or bag_plus")
    parser.add_argument("--k", type=int, default=5, help="samples forming the belief state")
    parser.add_argument("--agree", type=float, default=0.7, help="bag_plus: answer when this share agrees")
    parser.add_argument(
        "--belief-temperature",
        type=float,
        default=1.0,
        help="sampling temperature of the K belief samples (> 0; bag_plus resamples at it too)",
    )
    cli_args.add_limit_argument(parser, 100, help="AmbigQA items (a seeded sample)")
    parser.add_argument(
        "--skip",
        type=int,
        default=0,
        help="leave out the first SKIP items of the seeded sample (e.g. dev items disjoint from a --limit SKIP run)",
    )
    parser.add_argument("--profile", default="cooperative", help="simulated user profile answering clarifications")
    cli_args.add_token_arguments(parser, 48, turn="tokens per generated reply")
    cli_args.add_seed_argument(parser, required=True)
    cli_args.add_out_argument(parser)


def run(args) -> int:
    try:
        if args.k < 1 or not 0 < args.agree <= 1 or args.limit < 1 or args.skip < 0:
            raise ValueError(
                f"--k={args.k} --agree={args.agree} --limit={args.limit} --skip={args.skip}: need k >= 1, "
                "0 < agree <= 1, limit >= 1 and skip >= 0."
            )
        check_belief_temperature(args.belief_temperature)
        check_profile(args.profile)
        data_path = resolve_data_path("ambigqa", args.data)
        items = sorted(load_ambigqa(data_path), key=lambda it: it["id"])
        random.Random(f"bag-items/{args.seed}").shuffle(items)
        if args.skip >= len(items):
            raise ValueError(f"--skip={args.skip} leaves none of the {len(items)} items of {data_path}.")
        items = items[args.skip : args.skip + args.limit]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        keys = ("data", "model", "variant", "k", "agree", "belief_temperature", "profile", "seed", "max_new_tokens")
        config = {k: getattr(args, k) for k in keys}
        model = load_chat_model(args.model, backend_name(args), args.base_url, args.batch_size, args.max_batch_tokens)
        check_settings(out, config)  # last: a setup error must not pin the folder to bad settings
    except (ValueError, FicError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = out / "items.jsonl"
    lock = writer_lock(path)  # noqa: F841 - held until this function returns: a second run into OUT is refused
    done = load_keyed(path)
    # an item's seed is its position in the seeded draw, so --skip only selects items and never changes one
    todo = [(i, it) for i, it in enumerate(items, start=args.skip) if str(it["id"]) not in done]
    from tqdm.auto import tqdm  # tqdm (~40 ms): policies and regret import this module and need no progress bar

    for i, item in tqdm(todo, desc=f"bag {args.variant}", disable=None):
        rec = run_item(
            model,
            item,
            args.variant,
            args.k,
            args.seed * 100_003 + i,
            args.profile,
            args.agree,
            args.max_new_tokens,
            args.belief_temperature,
        )
        append_rows(path, [rec])
        done[rec["key"]] = rec
    records = [done[str(it["id"])] for it in items]
    header = {
        "variant": args.variant, "k": args.k, "belief_temperature": args.belief_temperature, "skip": args.skip,
        "seed": args.seed, "model": args.model, "data": str(data_path),
    }  # fmt: skip
    summary = summarize_bag(records, header, args.k)
    write_json(out / "summary.json", summary)
    logger.info(
        "bag/%s: accuracy %.3f over %d answered, %d abstained; routes %s -> %s",
        args.variant,
        summary["accuracy"],
        summary["answered"],
        summary["abstained"],
        {r: round(v["share"], 3) for r, v in summary["routing"].items()},
        out / "summary.json",
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fic bag", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
