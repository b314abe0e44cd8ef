"""Synthetic, fully specified tasks with natural shards, for CPU runs of the view-asymmetric methods.

The `arithmetic` family is a one- to three-step word problem over a small world ("Tom has 5 apples. Tom buys 3 more
apples. Tom gives away 2 apples. How many apples does Tom have now?"). Each task comes in several single-turn
phrasings (`phrasings`, plus the Lost-in-Conversation CONCAT form listing the shards, `concat_prompt`) and as shards:
the first shard states what is asked, each later shard carries exactly one fact, and every number of the task lands in
exactly one shard. A base model trained on the single-turn phrasings therefore scores alike on FULL and CONCAT, and
any gap left in the SHARDED view comes from the turns, not from the wording.

The answer (`answer`, checked by `check`) is chosen to differ from every number in the task and from every partial
result, so an answer given before the last shard cannot be right by echoing what was said so far.

Splits are disjoint by construction: a task belongs to `train` or `test` by a hash of its content, and `make_tasks`
only draws tasks of the requested split. Everything is deterministic in `(n, seed, split, family, steps)`.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from fic.chat import full_view, render, turn_end_strings

from .checkers import extract_final_number
from .records import Record

NAMES = ("Tom", "Ana", "Ben", "Eva", "Sam", "Mia", "Leo", "Zoe", "Max", "Ivy", "Jay", "Kim")
ITEMS = ("apples", "books", "cookies", "eggs", "cards", "coins", "pens", "stamps", "shells", "marbles")
GAIN_VERBS = ("{name} buys {x} more {item}.", "{name} finds {x} {item}.")
LOSS_VERBS = ("{name} gives away {x} {item}.", "{name} loses {x} {item}.")
QUESTION = "How many {item} does {name} have at the end?"
START = "At the start {name} has {a} {item}."
# Full single-turn phrasings. `{steps}` is the step sentences joined by spaces.
TEMPLATES = (
    "{name} has {a} {item}. {steps} How many {item} does {name} have now?",
    "How many {item} does {name} have at the end? At the start {name} has {a} {item}. {steps}",
    "Question: {name} starts with {a} {item}. {steps} What is the number of {item} that {name} has after that?",
)
ANSWER_FORMAT = "The answer is {answer}."
MAX_VALUE = 20  # every running total stays in [0, MAX_VALUE]
SPLITS = ("train", "test")
TEST_FRACTION = 0.2
FAMILIES = ("arithmetic",)
_WORD = re.compile(r"\w+|[^\w\s]+")


@dataclass(frozen=True)
class SyntheticTask:
    """One fully specified task with its phrasings, shards and checkable answer.

    Attributes:
        id: stable identifier derived from the task content (`arith-<hash>`).
        family: the task family (`arithmetic`).
        full_prompt: the canonical single-turn phrasing (`phrasings[0]`).
        phrasings: every full single-turn phrasing of the task (at least two templates).
        shards: the task split into user turns: the question first, then one fact per shard.
        answer: the reference answer as a string (a non-negative integer).
        meta: the task parameters (`name`, `item`, `start`, `deltas`).
    """

    id: str
    family: str
    full_prompt: str
    phrasings: tuple[str, ...]
    shards: tuple[str, ...]
    answer: str
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def concat_prompt(self) -> str:
        """All shards in one message, one per line: the same text as `fic.chat.concat_view(shards)`."""
        return "\n".join(f"- {s}" for s in self.shards)

    @property
    def single_turn_prompts(self) -> list[str]:
        """Every fully specified single-turn prompt: the phrasings and the CONCAT form."""
        return [*self.phrasings, self.concat_prompt]

    @property
    def reference(self) -> str:
        """The reference response in the trained answer format."""
        return ANSWER_FORMAT.format(answer=self.answer)

    def check(self, text: str) -> bool:
        """True when the final number in `text` equals the answer (GSM8K-style extraction)."""
        return extract_final_number(text) == self.answer

    def to_record(self):
        """The task as a `fic.data.Record` (full view, gsm8k verifier), for evaluators that take records."""
        return Record(
            id=self.id,
            source=f"synthetic-{self.family}",
            messages=[{"role": "user", "content": self.full_prompt}],
            reference=self.reference,
            verifier={"type": "gsm8k", "answer": self.answer},
            meta={"shards": list(self.shards), "phrasings": list(self.phrasings), **self.meta},
        )


def _split_of(key: str) -> str:
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    return "test" if digest % 1000 < TEST_FRACTION * 1000 else "train"


def _arithmetic_task(rng: random.Random, steps: int) -> SyntheticTask | None:
    """Draw one arithmetic task; `None` when the draw breaks a constraint (the caller draws again)."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    start = rng.randint(1, 9)
    deltas, sentences, totals = [], [], [start]
    for _ in range(steps):
        x = rng.randint(1, 9)
        gain = rng.random() < 0.5
        verb = rng.choice(GAIN_VERBS if gain else LOSS_VERBS)
        deltas.append(x if gain else -x)
        sentences.append(verb.format(name=name, x=x, item=item))
        totals.append(totals[-1] + deltas[-1])
    answer = totals[-1]
    if any(t < 0 or t > MAX_VALUE for t in totals):
        return None
    # No number said before the end (an operand or a partial total) may equal the answer.
    if answer in totals[:-1] or answer in (abs(d) for d in deltas):
        return None
    key = f"arithmetic|{name}|{item}|{start}|{','.join(map(str, deltas))}|{sentences}"
    task_id = "arith-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    slots = dict(name=name, item=item, a=start, steps=" ".join(sentences))
    phrasings = tuple(t.format(**slots) for t in TEMPLATES)
    shards = (QUESTION.format(name=name, item=item), START.format(name=name, a=start, item=item), *sentences)
    return SyntheticTask(
        id=task_id,
        family="arithmetic",
        full_prompt=phrasings[0],
        phrasings=phrasings,
        shards=shards,
        answer=str(answer),
        meta={"name": name, "item": item, "start": start, "deltas": deltas, "split_key": key},
    )


def make_tasks(n: int, seed: int = 0, split: str = "train", family: str = "arithmetic", steps: int = 2) -> list:
    """Draw `n` distinct tasks of one split, deterministically.

    Args:
        n: number of tasks.
        seed: random seed; the same arguments always give the same tasks in the same order.
        split: `train` or `test`; the two are disjoint (assignment by a hash of the task content).
        family: task family; only `arithmetic` exists.
        steps: number of update steps after the start value (1, 2 or 3), i.e. `steps + 2` shards.

    Returns:
        `list[SyntheticTask]`.
    """
    if split not in SPLITS:
        raise ValueError(f"split: unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if family not in FAMILIES:
        raise ValueError(f"family: unknown task family {family!r}; valid: {', '.join(FAMILIES)}")
    if steps not in (1, 2, 3):
        raise ValueError(f"steps: expected 1, 2 or 3 update steps, got {steps!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative integer, got {n!r}")
    rng = random.Random(f"{family}|{split}|{steps}|{seed}")
    tasks, seen, draws = [], set(), 0
    max_draws = 200 * n + 1000
    while len(tasks) < n:
        draws += 1
        if draws > max_draws:
            raise ValueError(
                f"n: could only draw {len(tasks)} distinct {split} tasks of family {family!r} in {max_draws} tries; "
                "ask for fewer tasks"
            )
        task = _arithmetic_task(rng, steps)
        if task is None or task.id in seen or _split_of(task.meta["split_key"]) != split:
            continue
        seen.add(task.id)
        tasks.append(task)
    return tasks


def vocabulary(family: str = "arithmetic") -> list[str]:
    """Every word and punctuation mark the family's prompts, shards and answers can contain (sorted).

    Words are split as `\\w+|[^\\w\\s]+` (the `Whitespace` pre-tokenizer of `tokenizers`), so a word-level
    tokenizer built on this list encodes every task of the family without unknown tokens.
    """
    if family not in FAMILIES:
        raise ValueError(f"family: unknown task family {family!r}; valid: {', '.join(FAMILIES)}")
    texts = [*TEMPLATES, *GAIN_VERBS, *LOSS_VERBS, QUESTION, START, ANSWER_FORMAT, "- \n"]
    words = set()
    for text in texts:
        words.update(_WORD.findall(re.sub(r"\{[a-z]+\}", " ", text)))
    words.update(NAMES)
    words.update(ITEMS)
    words.update(str(i) for i in range(max(MAX_VALUE, 9) + 1))
    return sorted(words)


def single_turn_rows(tasks: list[SyntheticTask]) -> list[dict]:
    """SFT rows (conversational prompt/completion) for every single-turn phrasing of every task."""
    return [
        {
            "prompt": [{"role": "user", "content": prompt}],
            "completion": [{"role": "assistant", "content": t.reference}],
        }
        for t in tasks
        for prompt in t.single_turn_prompts
    ]


def tokenized_single_turn_rows(tokenizer, tasks: list[SyntheticTask]) -> list[dict]:
    """`single_turn_rows` as token ids: the rendered prompt's ids followed by the response ids and the turn end
    (`input_ids` plus a `completion_mask`), built by concatenating ids. Several times faster than letting
    `SFTTrainer` render and tokenise every row, and the same ids."""
    end = tokenizer(turn_end_strings(tokenizer, role="assistant")[0], add_special_tokens=False)["input_ids"]
    prompts = [
        render(tokenizer, full_view(p), add_generation_prompt=True) for t in tasks for p in t.single_turn_prompts
    ]
    answers = [t.reference for t in tasks for _ in t.single_turn_prompts]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answers, add_special_tokens=False)["input_ids"]
    return [
        {"input_ids": p + a + end, "completion_mask": [0] * len(p) + [1] * (len(a) + len(end))}
        for p, a in zip(prompt_ids, answer_ids)
    ]


def vasd_shard_rows(tasks: list[SyntheticTask], seed: int = 0) -> list[dict]:
    """VASD rows whose student view the trainer plays itself (`shards`: the current student answers every shard but
    the last), with one single-turn phrasing per row (a full phrasing or CONCAT, drawn with `seed`) as the teacher
    view."""
    rng = random.Random(seed)
    return [
        {
            "shards": list(t.shards),
            "teacher_prompt": [{"role": "user", "content": rng.choice(t.single_turn_prompts)}],
            "task_id": t.id,
        }
        for t in tasks
    ]
